-- Operator and circuit state per destination, shared by every process: a destination with a
-- row whose paused_at is set is paused, and no process claims its jobs. Times are INTEGER
-- milliseconds, as elsewhere in this schema.
CREATE TABLE destination_states (
    destination TEXT PRIMARY KEY NOT NULL,
    paused_at   INTEGER,
    updated_at  INTEGER NOT NULL
);

-- The destinations page reads the last hour of attempts, newest first.
CREATE INDEX delivery_attempts_started_idx ON delivery_attempts (started_at);
