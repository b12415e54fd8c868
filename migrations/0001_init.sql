-- 0001_init.sql -- quantd's first schema: rule sets, jobs, their outputs and reports.
-- Run by daemon/store.c inside the start-up transaction, so no BEGIN/COMMIT and no PRAGMA here
-- (the store refuses both while migrating). Times are unix milliseconds, UTC; NULL = not yet.

-- Named rule sets, as PUT /v1/rulesets/{name} stored them: the validated {"rules":[...]} text.
CREATE TABLE rulesets (
    name       TEXT    NOT NULL PRIMARY KEY,
    body       TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);

-- The job queue and its history. AUTOINCREMENT: an id is never handed out twice, even after the
-- newest job is deleted, so a client's old id can never name someone else's job. The queue is
-- FIFO by id. A job keeps its own snapshot of the rules: `ruleset` only records the name they
-- came from (NULL for inline rules) and is deliberately not a foreign key, so replacing or
-- deleting a rule set never touches a job. The CHECKs cover the columns the store's own logic
-- reads; `layout` has none so that a new layout needs no table rebuild (the API validates it).
CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    state         TEXT    NOT NULL
                  CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    ruleset       TEXT,
    rules         TEXT    NOT NULL,
    layout        TEXT    NOT NULL,
    source_kind   TEXT    NOT NULL CHECK (source_kind IN ('upload', 'path')),
    source_path   TEXT    NOT NULL,
    stats_model   TEXT,
    created_ms    INTEGER NOT NULL,
    started_ms    INTEGER,
    finished_ms   INTEGER,
    tensors_done  INTEGER NOT NULL DEFAULT 0,
    tensors_total INTEGER NOT NULL DEFAULT 0,
    bytes_done    INTEGER NOT NULL DEFAULT 0,
    bytes_total   INTEGER NOT NULL DEFAULT 0,
    error         TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0)
);

-- Claiming the oldest queued job, listing by state and counting per state read this index only.
CREATE INDEX jobs_state_id ON jobs (state, id);

-- The files a succeeded job published in its output directory. The primary key starts with
-- job_id, so it also serves the ON DELETE CASCADE lookups.
CREATE TABLE outputs (
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name   TEXT    NOT NULL,
    bytes  INTEGER NOT NULL CHECK (bytes >= 0),
    sha256 TEXT    NOT NULL CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    PRIMARY KEY (job_id, name)
);

-- The per-tensor report of a finished job (JSON text), at most one per job.
CREATE TABLE reports (
    job_id INTEGER PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    body   TEXT    NOT NULL
);
