//! The admin side of `Store`: listing, replay, dead letters and Idempotency-Key records.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{
    BulkProgress, DeadLetterFilter, EventFilter, EventSummary, IdempotencyBegin, JobWithEvent,
    NewJob, PageCursor, ProgressKey, SavedResponse, Store, StoreError,
};
use crate::domain::JobId;

impl Store {
    /// Events of the filter's tenant, newest first, after the keyset position `after`.
    pub async fn list_events(
        &self,
        filter: &EventFilter,
        after: Option<PageCursor>,
        limit: i64,
    ) -> Result<Vec<EventSummary>, StoreError> {
        filter.check()?;
        dispatch!(self, s => s.list_events(filter, after, limit).await)
    }

    pub async fn count_matching_events(&self, filter: &EventFilter) -> Result<i64, StoreError> {
        filter.check()?;
        dispatch!(self, s => s.count_matching_events(filter).await)
    }

    pub async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<PageCursor>,
        limit: i64,
    ) -> Result<Vec<JobWithEvent>, StoreError> {
        filter.check()?;
        dispatch!(self, s => s.list_dead_letters(filter, after, limit).await)
    }

    /// The job with its event, if the event belongs to `tenant`.
    pub async fn find_job(
        &self,
        job: JobId,
        tenant: &str,
    ) -> Result<Option<JobWithEvent>, StoreError> {
        dispatch!(self, s => s.find_job(job, tenant).await)
    }

    /// Creates pending jobs and, in the same transaction, saves the idempotent response.
    pub async fn create_jobs(
        &self,
        jobs: &[NewJob],
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.create_jobs(jobs, now, save).await)
    }

    /// One committed batch of a bulk replay; `routes` maps a source to its destinations.
    pub async fn replay_events_batch(
        &self,
        filter: &EventFilter,
        progress: BulkProgress,
        limit: i64,
        routes: &BTreeMap<String, Vec<String>>,
        now: DateTime<Utc>,
        key: Option<ProgressKey<'_>>,
    ) -> Result<BulkProgress, StoreError> {
        filter.check()?;
        dispatch!(self, s => s.replay_events_batch(filter, progress, limit, routes, now, key).await)
    }

    pub async fn retry_dead_letter(
        &self,
        job: JobId,
        tenant: &str,
        now: DateTime<Utc>,
        save: Option<&SavedResponse<'_>>,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.retry_dead_letter(job, tenant, now, save).await)
    }

    /// One committed batch of a bulk dead-letter retry.
    pub async fn retry_dead_letters_batch(
        &self,
        filter: &DeadLetterFilter,
        progress: BulkProgress,
        limit: i64,
        now: DateTime<Utc>,
        key: Option<ProgressKey<'_>>,
    ) -> Result<BulkProgress, StoreError> {
        filter.check()?;
        dispatch!(self, s => s.retry_dead_letters_batch(filter, progress, limit, now, key).await)
    }

    /// Discards up to `limit` dead letters matching `filter`; returns how many.
    pub async fn discard_dead_letters_batch(
        &self,
        filter: &DeadLetterFilter,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        filter.check()?;
        dispatch!(self, s => s.discard_dead_letters_batch(filter, now, limit).await)
    }

    pub async fn discard_dead_letter(
        &self,
        job: JobId,
        tenant: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.discard_dead_letter(job, tenant, now).await)
    }

    /// Records that a request with this key starts, or says how an earlier one stands.
    pub async fn idempotency_begin(
        &self,
        tenant: &str,
        key: &str,
        request_hash: &str,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, StoreError> {
        dispatch!(self, s => s.idempotency_begin(tenant, key, request_hash, now, stale_before).await)
    }

    /// Saves a response that changed nothing (a 4xx).
    pub async fn idempotency_save(
        &self,
        save: &SavedResponse<'_>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.idempotency_save(save, now).await)
    }

    /// Forgets a started key (after a 5xx), so the client may retry.
    pub async fn idempotency_release(&self, tenant: &str, key: &str) -> Result<(), StoreError> {
        dispatch!(self, s => s.idempotency_release(tenant, key).await)
    }

    /// Deletes up to `limit` records created before `created_before`.
    pub async fn sweep_idempotency(
        &self,
        created_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.sweep_idempotency(created_before, limit).await)
    }
}
