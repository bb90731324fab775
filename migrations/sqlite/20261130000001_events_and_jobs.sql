-- Same schema as migrations/postgres, in SQLite's dialect. Times are unix milliseconds
-- (INTEGER) so they compare and sort numerically; ids are UUID text.
CREATE TABLE events (
    id                    TEXT PRIMARY KEY NOT NULL,
    tenant                TEXT NOT NULL,
    source                TEXT NOT NULL,
    provider_event_id     TEXT NOT NULL,
    event_type            TEXT,
    received_at           INTEGER NOT NULL,
    content_type          TEXT,
    headers               TEXT NOT NULL,
    body                  BLOB NOT NULL,
    verified_scheme       TEXT NOT NULL,
    verified_secret_index INTEGER NOT NULL,
    UNIQUE (source, provider_event_id)
);

CREATE INDEX events_tenant_received_idx ON events (tenant, received_at DESC, id DESC);

CREATE TABLE jobs (
    id              TEXT PRIMARY KEY NOT NULL,
    event_id        TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    destination     TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'in_progress', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    locked_until    INTEGER,
    claim_token     TEXT,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX jobs_due_idx ON jobs (next_attempt_at) WHERE status = 'pending';
CREATE INDEX jobs_event_idx ON jobs (event_id);
