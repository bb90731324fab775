-- Events as received (exact body bytes), deduplicated on the provider's own id,
-- and one delivery job per destination, written in the same transaction.
CREATE TABLE events (
    id                    UUID PRIMARY KEY,
    tenant                TEXT NOT NULL,
    source                TEXT NOT NULL,
    provider_event_id     TEXT NOT NULL,
    event_type            TEXT,
    received_at           TIMESTAMPTZ NOT NULL,
    content_type          TEXT,
    headers               JSONB NOT NULL,
    body                  BYTEA NOT NULL,
    verified_scheme       TEXT NOT NULL,
    verified_secret_index INTEGER NOT NULL,
    CONSTRAINT events_source_provider_event_id_key UNIQUE (source, provider_event_id)
);

CREATE INDEX events_tenant_received_idx ON events (tenant, received_at DESC, id DESC);

CREATE TABLE jobs (
    id              UUID PRIMARY KEY,
    event_id        UUID NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    destination     TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'in_progress', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    locked_until    TIMESTAMPTZ,
    claim_token     UUID,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL
);

CREATE INDEX jobs_due_idx ON jobs (next_attempt_at) WHERE status = 'pending';
CREATE INDEX jobs_event_idx ON jobs (event_id);
