-- Per-key ordered delivery (see migrations/postgres). SQLite has one writer, so the next
-- number in the line is the largest taken plus one, read in the inserting transaction; a
-- stored column rather than the rowid, which VACUUM may renumber.
ALTER TABLE jobs ADD COLUMN ordering_key TEXT;
ALTER TABLE jobs ADD COLUMN ordering_seq INTEGER;
ALTER TABLE jobs ADD COLUMN ordering_hold INTEGER NOT NULL DEFAULT 0;

CREATE INDEX jobs_ordering_seq_idx ON jobs (ordering_seq) WHERE ordering_seq IS NOT NULL;

CREATE TRIGGER jobs_ordering_seq AFTER INSERT ON jobs FOR EACH ROW
    WHEN NEW.ordering_key IS NOT NULL
BEGIN
    UPDATE jobs SET ordering_seq = (SELECT COALESCE(MAX(ordering_seq), 0) + 1 FROM jobs
        WHERE ordering_seq IS NOT NULL) WHERE rowid = NEW.rowid;
END;

CREATE INDEX jobs_ordering_ahead_idx ON jobs (destination, ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND (status IN ('pending', 'in_progress')
        OR (status = 'failed' AND ordering_hold AND discarded_at IS NULL));
