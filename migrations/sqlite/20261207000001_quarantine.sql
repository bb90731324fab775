-- Same schema as migrations/postgres, in SQLite's dialect (times are INTEGER milliseconds,
-- ids UUID text). Requests to a known source that failed verification, kept so that an
-- operator can re-verify them or see what was refused; bounded per source by count and
-- bytes (the writer evicts the oldest) and by retention.
CREATE TABLE quarantine (
    id          TEXT PRIMARY KEY NOT NULL,
    tenant      TEXT NOT NULL,
    source      TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    message     TEXT NOT NULL,
    checked_at  INTEGER NOT NULL,
    checks      INTEGER NOT NULL DEFAULT 1,
    method      TEXT NOT NULL,
    query       TEXT NOT NULL,
    headers     TEXT NOT NULL,
    body        BLOB NOT NULL,
    body_bytes  INTEGER NOT NULL
);

CREATE INDEX quarantine_tenant_received_idx ON quarantine (tenant, received_at DESC, id DESC);
CREATE INDEX quarantine_source_received_idx ON quarantine (source, received_at DESC, id DESC, body_bytes);
CREATE INDEX quarantine_received_idx ON quarantine (received_at);
