-- Every delivery attempt, kept for the dead-letter view, and the index workers claim with.
CREATE TABLE delivery_attempts (
    id            TEXT PRIMARY KEY NOT NULL,
    job_id        TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL,
    worker_id     TEXT NOT NULL,
    started_at    INTEGER NOT NULL,
    duration_ms   INTEGER NOT NULL,
    status_code   INTEGER,
    error         TEXT,
    outcome       TEXT NOT NULL CHECK (outcome IN ('succeeded', 'retry', 'failed', 'lease_expired', 'lease_lost', 'released'))
);

CREATE INDEX delivery_attempts_job_idx ON delivery_attempts (job_id, attempt);

DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs (destination, next_attempt_at) WHERE status = 'pending';
CREATE INDEX jobs_lease_idx ON jobs (locked_until) WHERE status = 'in_progress';
CREATE INDEX events_source_received_idx ON events (source, received_at);
