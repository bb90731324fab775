-- Reconciliation against providers' APIs (docs/RECOVERY.md). One state row per reconciled
-- source: the lease that lets one process at a time run it (claimed with a token and an
-- expiry, like a job's), the cursor an interrupted run left, and when the next run is due.
CREATE TABLE reconciliation_state (
    source        TEXT PRIMARY KEY NOT NULL,
    lease_token   UUID,
    lease_until   TIMESTAMPTZ,
    -- The provider's opaque cursor and the window start it belongs to; NULL: start afresh.
    cursor        TEXT,
    cursor_since  TIMESTAMPTZ,
    -- The provider's Retry-After: no run before this.
    not_before    TIMESTAMPTZ,
    next_due_at   TIMESTAMPTZ
);

-- One row per run, kept for the admin API and the console; run_by is `schedule` or `admin`.
CREATE TABLE reconciliation_runs (
    id           UUID PRIMARY KEY NOT NULL,
    tenant       TEXT NOT NULL,
    source       TEXT NOT NULL,
    provider     TEXT NOT NULL,
    run_by       TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    finished_at  TIMESTAMPTZ,
    window_since TIMESTAMPTZ NOT NULL,
    window_until TIMESTAMPTZ NOT NULL,
    pages        BIGINT NOT NULL DEFAULT 0,
    listed       BIGINT NOT NULL DEFAULT 0,
    missing      BIGINT NOT NULL DEFAULT 0,
    recovered    BIGINT NOT NULL DEFAULT 0,
    errors       BIGINT NOT NULL DEFAULT 0,
    last_error   TEXT,
    cursor       TEXT
);

CREATE INDEX reconciliation_runs_source_idx ON reconciliation_runs (source, started_at DESC, id DESC);
