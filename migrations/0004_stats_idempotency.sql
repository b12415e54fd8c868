-- 0004_stats_idempotency.sql -- the Idempotency-Keys of statistics posts: a training job whose
-- answer was lost retries its post with the same key, and quantd answers it from here instead of
-- counting it twice. Written only by the stats writer (daemon/stats_idem.c), in the transaction
-- of the post itself, so a key is remembered exactly when its post is stored. Times are unix ms,
-- UTC. No BEGIN/COMMIT and no PRAGMA here (the store runs migrations inside its own transaction).

-- One key of one model: the SHA-256 of the post it came with (mode, ?step=, media type and body)
-- and what the answer said (`activations`; `step`, NULL when the post had none), so a retry of
-- the same post gets the same answer and another post under the key is refused. A key belongs to
-- the model, not to its statistics: resetting them (DELETE .../stats) keeps it, since the post
-- did happen; deleting the model row drops its keys (ON DELETE CASCADE). A key older than the
-- idempotency window counts as unknown; the writer deletes those at most once a minute, reading
-- `created_ms` through its index. The primary key serves the look-up and the cascade.
CREATE TABLE stat_post_keys (
    model_id    INTEGER NOT NULL REFERENCES stat_models (id) ON DELETE CASCADE,
    key         TEXT    NOT NULL
                CHECK (length(key) BETWEEN 1 AND 255 AND key NOT GLOB '*[^!-~]*'),
    fingerprint BLOB    NOT NULL CHECK (length(fingerprint) = 32),
    activations INTEGER NOT NULL CHECK (activations >= 0),
    step        INTEGER CHECK (step IS NULL OR step >= 0),
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (model_id, key)
) WITHOUT ROWID;

CREATE INDEX stat_post_keys_created ON stat_post_keys (created_ms);
