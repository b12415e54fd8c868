-- 0001_init.sql -- the PostgreSQL engine's first schema: rule sets, jobs with their outputs and
-- reports, and access tokens; the same rows and rules as the SQLite schema's migrations 0001,
-- 0003, 0005 and 0007 (the statistics stay on SQLite for now). Run by daemon/store/store_pg.c
-- inside its start-up transaction under an advisory lock, so no BEGIN/COMMIT here. Times are unix
-- milliseconds, UTC; NULL = not yet.

-- The schema version, one row; the store reads and bumps it in the migrations' transaction.
CREATE TABLE quantd_schema (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version integer NOT NULL CHECK (version >= 0)
);

-- Named rule sets, as PUT /v1/rulesets/{name} stored them: the validated {"rules":[...]} text.
CREATE TABLE rulesets (
    name       text   NOT NULL PRIMARY KEY,
    body       text   NOT NULL,
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL
);

-- The job queue and its history. An identity column never hands an id out twice, even after the
-- newest job is deleted. The queue is FIFO by id. A job keeps its own snapshot of the rules;
-- `ruleset` only records the name they came from (NULL for inline rules) and is not a foreign
-- key. `layout` has no CHECK so that a new layout needs no migration (the API validates it).
CREATE TABLE jobs (
    id                 bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    state              text    NOT NULL
                       CHECK (state IN ('receiving', 'queued', 'running', 'succeeded', 'failed',
                                        'cancelled')),
    ruleset            text,
    rules              text    NOT NULL,
    layout             text    NOT NULL,
    source_kind        text    NOT NULL CHECK (source_kind IN ('upload', 'path')),
    source_path        text    NOT NULL,
    stats_model        text,
    created_ms         bigint  NOT NULL,
    started_ms         bigint,
    finished_ms        bigint,
    tensors_done       bigint  NOT NULL DEFAULT 0,
    tensors_total      bigint  NOT NULL DEFAULT 0,
    bytes_done         bigint  NOT NULL DEFAULT 0,
    bytes_total        bigint  NOT NULL DEFAULT 0,
    error              text,
    attempts           integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    outputs_removed_ms bigint,
    unused_rules       text
);

-- Claiming the oldest queued job, listing by state and counting per state read this index.
CREATE INDEX jobs_state_id ON jobs (state, id);

-- The files a succeeded job published in its output directory.
CREATE TABLE outputs (
    job_id bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name   text   NOT NULL,
    bytes  bigint NOT NULL CHECK (bytes >= 0),
    sha256 text   NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (job_id, name)
);

-- The per-tensor report of a finished job (JSON text), at most one per job.
CREATE TABLE reports (
    job_id bigint PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    body   text   NOT NULL
);

-- Bearer tokens: only the SHA-256 of a token is kept, never the token; a token is looked up by
-- its hash and the hashes are compared again in constant time. A revoked token's row is deleted;
-- an expired one stays (listed as expired) until it is revoked.
CREATE TABLE tokens (
    name       text   NOT NULL PRIMARY KEY,
    role       text   NOT NULL CHECK (role IN ('trainer', 'reader', 'operator')),
    hash       bytea  NOT NULL UNIQUE CHECK (octet_length(hash) = 32),
    created_ms bigint NOT NULL,
    expires_ms bigint CHECK (expires_ms IS NULL OR expires_ms > created_ms)
);
