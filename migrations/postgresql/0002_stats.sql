-- 0002_stats.sql -- the statistics on PostgreSQL: models with their averaging settings, one row
-- per activation with its float64 arrays, and the posts' Idempotency-Keys; the same rows and
-- rules as the SQLite schema's migrations 0002, 0004 and 0006. The arrays are bytea holding
-- little-endian float64 values, as SQLite's blobs: the statistics' engines read and write the
-- same bytes, so sums and counts are bit for bit the same on both. Run inside the start-up
-- transaction under the advisory lock (daemon/store/store_pg.c), so no BEGIN/COMMIT here. Times
-- are unix milliseconds, UTC.

-- A model's settings and counters. `posts` counts the posts stored since created or reset;
-- `stats_updated_ms` is NULL until its first post. The writer locks a model's row (SELECT ... FOR
-- UPDATE) before it reads or changes anything of the model, so the groups of every instance that
-- touch one model apply one after another in commit order.
CREATE TABLE stat_models (
    id               bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text             NOT NULL UNIQUE,
    averaging        text             NOT NULL DEFAULT 'simple'
                     CHECK (averaging IN ('simple', 'ema')),
    ema_constant     double precision NOT NULL DEFAULT 0.01
                     CHECK (ema_constant > 0 AND ema_constant <= 1),
    bootstrap_steps  bigint           NOT NULL DEFAULT 0 CHECK (bootstrap_steps >= 0),
    posts            bigint           NOT NULL DEFAULT 0 CHECK (posts >= 0),
    stats_updated_ms bigint,
    created_ms       bigint           NOT NULL,
    updated_ms       bigint           NOT NULL
);

-- One activation of a model: its kind, its shape as JSON text ("[2,3]"; NULL for mean_sq alone),
-- the sums, and the last post and the EMA only while they serve (NULL otherwise).
CREATE TABLE stats (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_id   bigint NOT NULL REFERENCES stat_models (id) ON DELETE CASCADE,
    name       text   NOT NULL,
    kind       text   NOT NULL CHECK (kind IN ('absmax', 'minmax', 'none')),
    shape      text,
    sq_len     bigint CHECK (sq_len IS NULL OR sq_len >= 1),
    count      bigint NOT NULL CHECK (count >= 1),
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL,
    sum_a      bytea,
    sum_b      bytea,
    sum_sq     bytea,
    last_a     bytea,
    last_b     bytea,
    last_sq    bytea,
    ema_a      bytea,
    ema_b      bytea,
    ema_sq     bytea,
    UNIQUE (model_id, name),
    CHECK (CASE kind
           WHEN 'absmax' THEN shape IS NOT NULL AND sum_a IS NOT NULL AND sum_b IS NULL
                              AND last_b IS NULL AND ema_b IS NULL
           WHEN 'minmax' THEN shape IS NOT NULL AND sum_a IS NOT NULL AND sum_b IS NOT NULL
                              AND (last_a IS NULL) = (last_b IS NULL)
                              AND (ema_a IS NULL) = (ema_b IS NULL)
           ELSE shape IS NULL AND sum_a IS NULL AND sum_b IS NULL AND last_a IS NULL
                AND last_b IS NULL AND ema_a IS NULL AND ema_b IS NULL AND sq_len IS NOT NULL END),
    CHECK ((sq_len IS NULL) = (sum_sq IS NULL)),
    CHECK (sum_sq IS NULL OR octet_length(sum_sq) = 8 * sq_len),
    CHECK (sum_sq IS NOT NULL OR (last_sq IS NULL AND ema_sq IS NULL))
);

-- The Idempotency-Keys of stored posts, per model: the post's fingerprint (SHA-256) and the
-- answer it got. A key is looked up and recorded under its model's row lock, so every instance
-- sees the others' committed keys: a replay through any instance answers as a replay.
CREATE TABLE stat_post_keys (
    model_id    bigint NOT NULL REFERENCES stat_models (id) ON DELETE CASCADE,
    key         text   NOT NULL CHECK (key ~ '^[!-~]{1,255}$'),
    fingerprint bytea  NOT NULL CHECK (octet_length(fingerprint) = 32),
    activations bigint NOT NULL CHECK (activations >= 0),
    step        bigint CHECK (step IS NULL OR step >= 0),
    created_ms  bigint NOT NULL,
    PRIMARY KEY (model_id, key)
);

CREATE INDEX stat_post_keys_created ON stat_post_keys (created_ms);
