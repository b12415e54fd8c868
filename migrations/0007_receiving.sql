-- 0007_receiving.sql -- checkpoint jobs (issue 11 item 1): a job created with the list of files
-- its client will PUT waits in the new state 'receiving' until they have all arrived. SQLite
-- cannot change a CHECK constraint in place, so the jobs table is rebuilt (the store runs
-- migrations with foreign keys off, so dropping the old table cascades nowhere; the children
-- keep referring to "jobs", the name the new table takes). Same columns, same order, same ids,
-- and AUTOINCREMENT's high-water mark carried over (an id is never handed out twice, even one
-- whose job was deleted).
-- No BEGIN/COMMIT and no PRAGMA here (the store runs migrations inside its own transaction).
CREATE TABLE jobs_new (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    state              TEXT    NOT NULL
                       CHECK (state IN ('receiving', 'queued', 'running', 'succeeded', 'failed',
                                        'cancelled')),
    ruleset            TEXT,
    rules              TEXT    NOT NULL,
    layout             TEXT    NOT NULL,
    source_kind        TEXT    NOT NULL CHECK (source_kind IN ('upload', 'path')),
    source_path        TEXT    NOT NULL,
    stats_model        TEXT,
    created_ms         INTEGER NOT NULL,
    started_ms         INTEGER,
    finished_ms        INTEGER,
    tensors_done       INTEGER NOT NULL DEFAULT 0,
    tensors_total      INTEGER NOT NULL DEFAULT 0,
    bytes_done         INTEGER NOT NULL DEFAULT 0,
    bytes_total        INTEGER NOT NULL DEFAULT 0,
    error              TEXT,
    attempts           INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    outputs_removed_ms INTEGER,
    unused_rules       TEXT
);
INSERT INTO jobs_new (id, state, ruleset, rules, layout, source_kind, source_path, stats_model,
                      created_ms, started_ms, finished_ms, tensors_done, tensors_total,
                      bytes_done, bytes_total, error, attempts, outputs_removed_ms, unused_rules)
    SELECT id, state, ruleset, rules, layout, source_kind, source_path, stats_model, created_ms,
           started_ms, finished_ms, tensors_done, tensors_total, bytes_done, bytes_total, error,
           attempts, outputs_removed_ms, unused_rules FROM jobs;
UPDATE sqlite_sequence SET seq = max(seq, (SELECT seq FROM sqlite_sequence WHERE name = 'jobs'))
    WHERE name = 'jobs_new';
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE INDEX jobs_state_id ON jobs (state, id);
