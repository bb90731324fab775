-- Per-key ordered delivery. A job with an ordering key (NULL: unordered) is claimed only
-- when no earlier job of its destination and key is still ahead of it: pending,
-- in progress, or a dead letter that holds its key (ordering_hold, from the route's
-- on_dead_letter) and was not discarded. "Earlier" is ordering_seq, taken from a sequence
-- as the row is inserted, so a replay or a repaired job joins the end of its key's line.
ALTER TABLE jobs ADD COLUMN ordering_key TEXT;
ALTER TABLE jobs ADD COLUMN ordering_seq BIGINT;
ALTER TABLE jobs ADD COLUMN ordering_hold BOOLEAN NOT NULL DEFAULT FALSE;

CREATE SEQUENCE jobs_ordering_seq;

-- Only keyed rows take a number: unordered inserts pay for the WHEN test alone.
CREATE FUNCTION jobs_take_ordering_seq() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.ordering_seq := nextval('jobs_ordering_seq');
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_ordering_seq BEFORE INSERT ON jobs FOR EACH ROW
    WHEN (NEW.ordering_key IS NOT NULL) EXECUTE FUNCTION jobs_take_ordering_seq();

-- The jobs that keep later ones of their key waiting; the claim's test of "anything ahead"
-- is one probe here. The predicate is written exactly as the claim writes it.
CREATE INDEX jobs_ordering_ahead_idx ON jobs (destination, ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND (status IN ('pending', 'in_progress')
        OR (status = 'failed' AND ordering_hold AND discarded_at IS NULL));
