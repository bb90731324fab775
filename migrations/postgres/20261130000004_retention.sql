-- Retention: events past their window are deleted in batches by age; an event whose body
-- was purged but whose id is still remembered for dedupe keeps its row, marked here.
ALTER TABLE events ADD COLUMN purged_at TIMESTAMPTZ;
CREATE INDEX events_received_idx ON events (received_at);
