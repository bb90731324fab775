-- Requests to a known source that failed verification, kept so that an operator can
-- re-verify them (a secret rotated at the provider first) or see what was refused. Bounded
-- per source by count and bytes (the writer evicts the oldest) and by retention.
CREATE TABLE quarantine (
    id          UUID PRIMARY KEY,
    tenant      TEXT NOT NULL,
    source      TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    -- The rejection's code (invalid_signature, ...) and message, as last verified.
    reason      TEXT NOT NULL,
    message     TEXT NOT NULL,
    checked_at  TIMESTAMPTZ NOT NULL,
    checks      INTEGER NOT NULL DEFAULT 1,
    method      TEXT NOT NULL,
    query       TEXT NOT NULL,
    -- A JSON list of [name, value] pairs, credential headers redacted. TEXT, not JSONB:
    -- JSONB cannot hold an escaped NUL, and a rejected request may carry one.
    headers     TEXT NOT NULL,
    body        BYTEA NOT NULL,
    body_bytes  BIGINT NOT NULL
);

CREATE INDEX quarantine_tenant_received_idx ON quarantine (tenant, received_at DESC, id DESC);
-- Eviction ranks one source's rows, newest first, by count and bytes.
CREATE INDEX quarantine_source_received_idx ON quarantine (source, received_at DESC, id DESC) INCLUDE (body_bytes);
CREATE INDEX quarantine_received_idx ON quarantine (received_at);
