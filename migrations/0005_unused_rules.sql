-- 0005_unused_rules.sql -- the unused rules of a job (issue 13 item 4, SPEC section 10): the
-- 0-based indices of its rules that are the first match of no tensor, as a JSON array of
-- integers, decided when the job is planned at creation (before any tensor data is read).
-- NULL for a job created before this migration (its report, when it has one, lists them).
-- No BEGIN/COMMIT and no PRAGMA here (the store runs migrations inside its own transaction).
ALTER TABLE jobs ADD COLUMN unused_rules TEXT;
