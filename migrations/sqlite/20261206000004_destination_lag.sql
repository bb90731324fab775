-- The age of each destination's oldest due job, sampled by the reconciler once a minute
-- (at most the last few hours are kept): the console charts it. `minute` is unix minutes.
CREATE TABLE destination_lag (
    destination        TEXT NOT NULL,
    minute             INTEGER NOT NULL,
    oldest_due_seconds INTEGER NOT NULL,
    PRIMARY KEY (destination, minute)
);

-- The events page charts ingest per source over the last hour.
CREATE INDEX events_tenant_received_source_idx ON events (tenant, received_at, source);
