-- Time-partitioned storage (docs/decisions/postgres-time-partitions.md). events, jobs and
-- delivery_attempts become range-partitioned tables whose partition key is a UUIDv7, so a
-- range of keys is a range of time: an event by its id (the time it was received), a job by
-- its id, which carries its event's time (JobId::for_event: an event and its jobs, replays
-- included, share a partition), an attempt by its id (the time it was made, never earlier
-- than its event's). Retention drops whole
-- partitions; hookgate creates them ahead (store::partitions), with no extension.
--
-- A UNIQUE constraint of a partitioned table must contain the partition key, so dedupe on
-- the provider's id moves to event_keys: one small row per event, deleted after the longer
-- of retention.events and retention.dedupe_window. There are no foreign keys between the
-- partitioned tables: a referenced partition cannot be dropped without a scan of the
-- referencing table, and retention removes an event's jobs and attempts itself.
--
-- The existing tables become the first partition of each (up to the next midnight UTC):
-- their rows stay where they are, their indexes are attached as they are, and retention
-- drops them whole once they have expired. The migration copies the dedupe keys and reads
-- each table once to check the partition bound.

CREATE TABLE event_keys (
    source            TEXT NOT NULL,
    provider_event_id TEXT NOT NULL,
    event_id          UUID NOT NULL,
    received_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (source, provider_event_id)
);

INSERT INTO event_keys (source, provider_event_id, event_id, received_at)
    SELECT source, provider_event_id, id, received_at FROM events;

CREATE INDEX event_keys_received_idx ON event_keys (received_at);

ALTER TABLE jobs DROP CONSTRAINT jobs_event_id_fkey;
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_job_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_source_provider_event_id_key;
DROP TRIGGER jobs_ordering_seq ON jobs;

ALTER TABLE events RENAME TO events_legacy;
ALTER TABLE jobs RENAME TO jobs_legacy;
ALTER TABLE delivery_attempts RENAME TO delivery_attempts_legacy;

-- The partitioned tables' indexes take the names the tables' indexes had.
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid IN ('events_legacy'::regclass, 'jobs_legacy'::regclass,
            'delivery_attempts_legacy'::regclass)
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname, r.relname || '_legacy');
    END LOOP;
END
$$;

CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS
    INCLUDING STORAGE) PARTITION BY RANGE (id);
ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (id);
CREATE INDEX events_tenant_received_idx ON events (tenant, received_at DESC, id DESC);
CREATE INDEX events_source_received_idx ON events (source, received_at);
CREATE INDEX events_received_idx ON events (received_at);
CREATE INDEX events_tenant_received_source_idx ON events (tenant, received_at, source);

CREATE TABLE jobs (LIKE jobs_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS
    INCLUDING STORAGE) PARTITION BY RANGE (id);
ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);
CREATE INDEX jobs_event_idx ON jobs (event_id);
CREATE INDEX jobs_due_idx ON jobs (destination, next_attempt_at) WHERE status = 'pending';
CREATE INDEX jobs_lease_idx ON jobs (locked_until) WHERE status = 'in_progress';
CREATE INDEX jobs_dead_letters_idx ON jobs (updated_at DESC, id DESC)
    WHERE status = 'failed' AND discarded_at IS NULL;
CREATE INDEX jobs_ordering_ahead_idx ON jobs (destination, ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND (status IN ('pending', 'in_progress')
        OR (status = 'failed' AND ordering_hold AND discarded_at IS NULL));
CREATE TRIGGER jobs_ordering_seq BEFORE INSERT ON jobs FOR EACH ROW
    WHEN (NEW.ordering_key IS NOT NULL) EXECUTE FUNCTION jobs_take_ordering_seq();

CREATE TABLE delivery_attempts (LIKE delivery_attempts_legacy INCLUDING DEFAULTS
    INCLUDING CONSTRAINTS INCLUDING STORAGE) PARTITION BY RANGE (id);
ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_pkey PRIMARY KEY (id);
CREATE INDEX delivery_attempts_job_idx ON delivery_attempts (job_id, attempt);
CREATE INDEX delivery_attempts_started_idx ON delivery_attempts (started_at);

-- The first partition ends at the next midnight UTC, as a UUIDv7 bound: the unix
-- milliseconds in the first 48 bits, zeros after (below every id of that millisecond).
DO $$
DECLARE
    bound uuid := (lpad(to_hex((extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC')
        + interval '1 day') * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid;
BEGIN
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_legacy '
        'FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    EXECUTE format('ALTER TABLE jobs ATTACH PARTITION jobs_legacy '
        'FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    EXECUTE format('ALTER TABLE delivery_attempts ATTACH PARTITION delivery_attempts_legacy '
        'FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END
$$;
