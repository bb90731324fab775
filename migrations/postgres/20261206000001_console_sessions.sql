-- Console sessions. The cookie holds a random id (256 bits from the OS); only its SHA-256 is
-- stored, so a copy of this table does not log anyone in. Times are unix seconds, the same
-- type on both stores, so one copy of the SQL serves both.
CREATE TABLE console_sessions (
    id_sha256  BYTEA PRIMARY KEY,
    tenant     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
CREATE INDEX console_sessions_seen_idx ON console_sessions (seen_at);
