-- 0002_stats.sql -- calibration statistics (issue 5, SPEC section 8): the models that training
-- jobs post to, with their averaging settings, and per (model, activation) the running sums of
-- Qwix's SimpleMovingAverage beside the last posted value and an exponential moving average.
-- Written only by the stats writer thread (daemon/stats_writer.c). Times are unix ms, UTC.
-- No BEGIN/COMMIT and no PRAGMA here (the store runs migrations inside its own transaction).

-- A model's settings and its counters. `posts` counts the posts (updates and merges) stored since
-- the model was created or last reset; `stats_updated_ms` is the time of the last of them (NULL:
-- none since). `updated_ms` is when the settings last changed.
CREATE TABLE stat_models (
    id               INTEGER PRIMARY KEY,
    name             TEXT    NOT NULL UNIQUE,
    averaging        TEXT    NOT NULL DEFAULT 'simple' CHECK (averaging IN ('simple', 'ema')),
    ema_constant     REAL    NOT NULL DEFAULT 0.01
                     CHECK (ema_constant > 0 AND ema_constant <= 1),
    bootstrap_steps  INTEGER NOT NULL DEFAULT 0 CHECK (bootstrap_steps >= 0),
    posts            INTEGER NOT NULL DEFAULT 0 CHECK (posts >= 0),
    stats_updated_ms INTEGER,
    created_ms       INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL
);

-- One activation of one model. Only activations with at least one update exist (count >= 1).
-- The arrays are little-endian float64 blobs of `shape`'s element count, each 8 * n bytes:
-- the *_a columns hold absmax (kind 'absmax') or min (kind 'minmax'), the *_b columns max for
-- 'minmax' and are NULL for 'absmax'. `shape` is JSON text, "[]" for a scalar.
--   sum_*  the sums of Qwix's SimpleMovingAverage (a merge adds a dump's sums and count);
--   last_* the last post (a merge: its sums / its count), kept only while count <= the model's
--          bootstrap_steps (the calibration then), else NULL;
--   ema_*  the exponential moving average, kept only while the model's averaging is 'ema'
--          (started from sum / count when a model switches to it), else NULL.
-- So a model with the default settings writes only its sums at each post. The small columns
-- come first and the sums before the rest, so a read that needs only the sums stops early in
-- the row. The UNIQUE index (model_id, name) serves reading a model's activations by name, one
-- activation's lookup, counting them, and deleting a model's statistics.
CREATE TABLE stats (
    id         INTEGER PRIMARY KEY,
    model_id   INTEGER NOT NULL REFERENCES stat_models (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('absmax', 'minmax')),
    shape      TEXT    NOT NULL,
    count      INTEGER NOT NULL CHECK (count >= 1),
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    sum_a      BLOB    NOT NULL,
    sum_b      BLOB,
    last_a     BLOB,
    last_b     BLOB,
    ema_a      BLOB,
    ema_b      BLOB,
    UNIQUE (model_id, name),
    CHECK (CASE kind WHEN 'absmax' THEN sum_b IS NULL AND last_b IS NULL AND ema_b IS NULL
                     ELSE sum_b IS NOT NULL AND (last_a IS NULL) = (last_b IS NULL)
                          AND (ema_a IS NULL) = (ema_b IS NULL) END)
);
