//! SQL for the `/metrics` gauges, the same on both backends but for a placeholder.

/// The oldest `next_attempt_at` among pending jobs due at the bound time, or NULL.
///
/// `MIN(next_attempt_at)` over all destinations cannot use `jobs_due_idx`, which leads with
/// the destination, so on a backlog of a million jobs the planner reads them all at every
/// scrape. Instead this walks the index's distinct destinations (one lookup each, a "skip
/// scan") and takes each one's oldest due job, one more lookup: O(destinations · log n).
/// It reads only the table, not the configuration, so jobs of a destination since removed
/// from the config still count, as before.
pub(super) fn oldest_due_pending(now: &str) -> String {
    format!(
        "WITH RECURSIVE pending_destinations(name) AS ( \
             SELECT (SELECT destination FROM jobs WHERE status = 'pending' \
                     ORDER BY destination LIMIT 1) \
             UNION ALL \
             SELECT (SELECT destination FROM jobs WHERE status = 'pending' AND destination > name \
                     ORDER BY destination LIMIT 1) \
             FROM pending_destinations WHERE name IS NOT NULL \
         ) \
         SELECT MIN(oldest) FROM ( \
             SELECT (SELECT next_attempt_at FROM jobs \
                     WHERE status = 'pending' AND destination = name AND next_attempt_at <= {now} \
                     ORDER BY next_attempt_at LIMIT 1) AS oldest \
             FROM pending_destinations WHERE name IS NOT NULL \
         ) AS per_destination"
    )
}

/// Unfinished jobs by status and destination: pending, in progress, and failed not discarded
/// (dead letters). Each part reads its own partial index (`jobs_due_idx`, `jobs_lease_idx`,
/// `jobs_dead_letters_idx`), so the cost follows the unfinished jobs. One scan with an `OR`
/// of the three conditions would read every job ever stored, succeeded ones included, whose
/// number grows with history until retention deletes them.
pub(super) const COUNT_UNFINISHED_JOBS: &str = "\
    SELECT 'pending' AS status, destination, COUNT(*) FROM jobs \
    WHERE status = 'pending' GROUP BY destination \
    UNION ALL \
    SELECT 'in_progress', destination, COUNT(*) FROM jobs \
    WHERE status = 'in_progress' GROUP BY destination \
    UNION ALL \
    SELECT 'failed', destination, COUNT(*) FROM jobs \
    WHERE status = 'failed' AND discarded_at IS NULL GROUP BY destination";
