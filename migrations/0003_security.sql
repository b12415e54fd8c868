-- 0003_security.sql -- access tokens (issue 9) and the retention of finished jobs' outputs.
-- No BEGIN/COMMIT and no PRAGMA here (the store runs migrations inside its own transaction).
-- Times are unix milliseconds, UTC.

-- Bearer tokens. Only the SHA-256 of a token is kept (32 bytes), never the token: a token is
-- looked up by its hash, which nobody can steer towards a stored one, and the hashes are then
-- compared in constant time. `name` is what the request log and the API show. A revoked token's
-- row is deleted; an expired one stays (listed as expired) until it is revoked.
CREATE TABLE tokens (
    name       TEXT    NOT NULL PRIMARY KEY,
    role       TEXT    NOT NULL CHECK (role IN ('trainer', 'reader', 'operator')),
    hash       BLOB    NOT NULL UNIQUE CHECK (length(hash) = 32),
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER CHECK (expires_ms IS NULL OR expires_ms > created_ms)
);

-- Retention: when a finished job's outputs were removed (its row, report and outputs list stay,
-- so GET /v1/jobs/{id} still tells what the job made); NULL while they are on disk. The
-- retention sweep reads finished jobs by id, through the primary key.
ALTER TABLE jobs ADD COLUMN outputs_removed_ms INTEGER;
