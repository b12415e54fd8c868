-- 0006_stats_mean_sq.sql -- the importance statistic (issue 13 item 2, SPEC section 9): beside
-- its range statistic (absmax, or min and max) an activation may carry mean_sq, the mean of x^2
-- over every axis but the last, one value per input feature; or carry mean_sq alone (kind
-- 'none'). Its set of keys is fixed by its first post. SQLite cannot change a CHECK in place, so
-- the table is rebuilt with the same rows (ids kept); nothing references it.
-- No BEGIN/COMMIT and no PRAGMA here (the store runs migrations inside its own transaction).

-- As 0002's table, and:
--   kind 'none'   no range statistic: shape, sum_a, last_a, ema_a (and the *_b) are NULL;
--   sq_len        mean_sq's length n (its shape is [n]); NULL when the activation has none;
--   sum_sq        the sum of the posted mean_sq (a merge adds sum_of_mean_sq), 8 * sq_len bytes;
--   last_sq       the last post's mean_sq, kept exactly when last_a would be (bootstrapping);
--   ema_sq        its exponential moving average, kept exactly when ema_a would be.
-- When the activation has both, the *_sq arrays are kept and dropped with the *_a ones: one
-- model setting governs them all.
CREATE TABLE stats_new (
    id         INTEGER PRIMARY KEY,
    model_id   INTEGER NOT NULL REFERENCES stat_models (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('absmax', 'minmax', 'none')),
    shape      TEXT,
    sq_len     INTEGER CHECK (sq_len IS NULL OR sq_len >= 1),
    count      INTEGER NOT NULL CHECK (count >= 1),
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    sum_a      BLOB,
    sum_b      BLOB,
    sum_sq     BLOB,
    last_a     BLOB,
    last_b     BLOB,
    last_sq    BLOB,
    ema_a      BLOB,
    ema_b      BLOB,
    ema_sq     BLOB,
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
    CHECK (sum_sq IS NULL OR length(sum_sq) = 8 * sq_len),
    CHECK (sum_sq IS NOT NULL OR (last_sq IS NULL AND ema_sq IS NULL))
);

INSERT INTO stats_new (id, model_id, name, kind, shape, count, created_ms, updated_ms, sum_a,
                       sum_b, last_a, last_b, ema_a, ema_b)
    SELECT id, model_id, name, kind, shape, count, created_ms, updated_ms, sum_a, sum_b, last_a,
           last_b, ema_a, ema_b
    FROM stats;

DROP TABLE stats;

ALTER TABLE stats_new RENAME TO stats;
