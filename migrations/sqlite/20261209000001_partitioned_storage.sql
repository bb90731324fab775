-- PostgreSQL moves dedupe to an event_keys table (its events table is partitioned by time,
-- and a partitioned table's UNIQUE constraint must contain the partition key). SQLite keeps
-- dedupe on the events table's UNIQUE (source, provider_event_id); this view gives both
-- stores the same name for the same lookup, so the statements that read it are shared.
CREATE VIEW event_keys AS
    SELECT source, provider_event_id, id AS event_id, received_at FROM events;
