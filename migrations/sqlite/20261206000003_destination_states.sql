-- Operator and circuit state per destination, shared by every process: a destination with a
-- row whose paused_at is set is paused, and no process claims its jobs. One whose tripped_at
-- is set is tripped by its circuit breaker: its jobs are held too, but for one probe
-- delivery once probe_at has passed. Times are INTEGER milliseconds, as elsewhere.
CREATE TABLE destination_states (
    destination TEXT PRIMARY KEY NOT NULL,
    paused_at   INTEGER,
    -- Failed attempts since the last success (destinations with a circuit breaker).
    failure_streak INTEGER NOT NULL DEFAULT 0,
    tripped_at  INTEGER,
    probe_at    INTEGER,
    -- The delivery rate limit's token bucket (destinations with a rate_limit): the tokens
    -- left at refilled_at; NULL is a full bucket.
    tokens      REAL,
    refilled_at INTEGER,
    updated_at  INTEGER NOT NULL
);

-- The destinations page reads the last hour of attempts, newest first.
CREATE INDEX delivery_attempts_started_idx ON delivery_attempts (started_at);
