-- Admin API: dead letters can be discarded (kept in history, out of the dead-letter list),
-- and saved responses for Idempotency-Key.
ALTER TABLE jobs ADD COLUMN discarded_at TIMESTAMPTZ;

CREATE INDEX jobs_dead_letters_idx ON jobs (updated_at DESC, id DESC)
    WHERE status = 'failed' AND discarded_at IS NULL;

CREATE TABLE idempotency_keys (
    tenant          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_hash    TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('started', 'completed')),
    status_code     INTEGER,
    response_body   BYTEA,
    -- Bulk actions commit batch by batch; this is how far they got, to resume after a crash.
    progress        TEXT,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant, idempotency_key)
);

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
