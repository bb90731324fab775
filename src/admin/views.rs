//! The admin API's JSON shapes. The OpenAPI document is generated from these.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::store::{EventSummary, StoredAttempt, StoredEvent, StoredJob};

#[derive(Debug, Serialize, ToSchema)]
pub struct EventSummaryView {
    pub id: String,
    pub source: String,
    pub provider_event_id: String,
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    /// Which of the source's secrets verified the event (0 = the first listed).
    pub verified_secret_index: i32,
}

impl From<&EventSummary> for EventSummaryView {
    fn from(e: &EventSummary) -> Self {
        Self {
            id: e.id.to_string(),
            source: e.source.clone(),
            provider_event_id: e.provider_event_id.clone(),
            event_type: e.event_type.clone(),
            received_at: e.received_at,
            verified_secret_index: e.verified_secret_index,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    pub data: Vec<EventSummaryView>,
    /// Pass back as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    pub attempt: i32,
    pub worker_id: String,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    /// succeeded | retry | failed | lease_expired | lease_lost | released
    pub outcome: String,
}

impl From<&StoredAttempt> for AttemptView {
    fn from(a: &StoredAttempt) -> Self {
        Self {
            attempt: a.attempt,
            worker_id: a.worker_id.clone(),
            started_at: a.started_at,
            duration_ms: a.duration_ms,
            status_code: a.status_code,
            error: a.error.clone(),
            outcome: a.outcome.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    pub id: String,
    pub event_id: String,
    pub destination: String,
    /// pending | in_progress | succeeded | failed
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Set when the dead letter was discarded.
    pub discarded_at: Option<DateTime<Utc>>,
    /// The ordering key whose line the job is in (`ordering_key` on its route; a key longer
    /// than 64 bytes as `sha256:` and its digest). Absent for an unordered job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<String>,
    /// Every attempt, oldest first (in event details and dead letters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<AttemptView>>,
}

impl JobView {
    pub fn new(j: &StoredJob, history: Option<&[StoredAttempt]>) -> Self {
        Self {
            id: j.id.to_string(),
            event_id: j.event_id.to_string(),
            destination: j.destination.clone(),
            status: j.status.as_str().to_owned(),
            attempts: j.attempts,
            next_attempt_at: j.next_attempt_at,
            last_error: j.last_error.clone(),
            created_at: j.created_at,
            updated_at: j.updated_at,
            discarded_at: j.discarded_at,
            ordering_key: j.ordering_key.clone(),
            history: history.map(|h| h.iter().map(AttemptView::from).collect()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeaderView {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventDetail {
    pub id: String,
    pub source: String,
    pub provider_event_id: String,
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    pub content_type: Option<String>,
    /// In arrival order, repeats kept.
    pub headers: Vec<HeaderView>,
    /// The exact body bytes.
    pub body_base64: String,
    /// The body as text, when it is valid UTF-8.
    pub body: Option<String>,
    pub verified_scheme: String,
    /// Which of the source's secrets verified the event (0 = the first listed).
    pub verified_secret_index: i32,
    /// No route matched the event when it was received, and it was not replayed since: it
    /// has no job.
    pub no_route_matched: bool,
    pub jobs: Vec<JobView>,
}

impl EventDetail {
    pub fn new(e: &StoredEvent, jobs: Vec<JobView>) -> Self {
        Self {
            id: e.id.to_string(),
            source: e.source.clone(),
            provider_event_id: e.provider_event_id.clone(),
            event_type: e.event_type.clone(),
            received_at: e.received_at,
            content_type: e.content_type.clone(),
            headers: e
                .headers
                .iter()
                .map(|(name, value)| HeaderView {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            body_base64: base64::engine::general_purpose::STANDARD.encode(&e.body),
            body: String::from_utf8(e.body.clone()).ok(),
            verified_scheme: e.verified_scheme.clone(),
            verified_secret_index: e.verified_secret_index,
            no_route_matched: jobs.is_empty(),
            jobs,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JobsReply {
    pub jobs: Vec<JobView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayedReply {
    /// Events replayed (each gets one new job per destination its source's routes choose for
    /// it today).
    pub replayed: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DryRunReply {
    pub dry_run: bool,
    /// Events a replay with this filter would replay.
    pub matched: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterView {
    #[serde(flatten)]
    pub job: JobView,
    pub event: EventSummaryView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterPage {
    pub data: Vec<DeadLetterView>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RetriedReply {
    pub retried: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"destinations": ["billing"]}))]
pub struct ReplayRequest {
    /// Default: the destinations the source's routes choose for the event today (422 when
    /// none does). Each must be one of the source's destinations (else 422); a name listed
    /// twice is replayed to once.
    pub destinations: Option<Vec<String>>,
}

/// An event status, as the `status` filters take it (the server answers 400 for any other):
/// a job status (events with at least one job in it), or `no_route` (events no route
/// matched: without any job).
#[derive(Debug, ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // a type for the document only: the handlers parse with `EventStatus::parse`
pub enum StatusFilter {
    Pending,
    InProgress,
    Succeeded,
    Failed,
    NoRoute,
}

/// Event filters shared by the list and the bulk replay. Filter strings cannot hold a NUL:
/// no stored value can, and PostgreSQL refuses one in text (400 `bad_request`); the document
/// says so with a pattern.
#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    #[param(pattern = "^[^\\u0000]*$")]
    #[schema(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
    #[param(pattern = "^[^\\u0000]*$")]
    #[schema(pattern = "^[^\\u0000]*$")]
    pub event_type: Option<String>,
    #[param(pattern = "^[^\\u0000]*$")]
    #[schema(pattern = "^[^\\u0000]*$")]
    pub provider_event_id: Option<String>,
    /// Events with at least one job in this status, or `no_route`: events without a job.
    #[param(inline, value_type = Option<StatusFilter>)]
    pub status: Option<String>,
    /// RFC 3339; inclusive.
    pub received_from: Option<DateTime<Utc>>,
    /// RFC 3339; exclusive.
    pub received_to: Option<DateTime<Utc>>,
    /// Page size: 1 to 500, default 50.
    #[param(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<i64>,
    /// Opaque: a `next_cursor` this API returned (anything else answers 400).
    pub cursor: Option<String>,
}

/// Give at least one filter (the document's `anyOf` says so; the server answers 400).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"source": "stripe", "status": "failed", "dry_run": true}))]
pub struct BulkReplayRequest {
    #[schema(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
    #[schema(pattern = "^[^\\u0000]*$")]
    pub event_type: Option<String>,
    #[schema(pattern = "^[^\\u0000]*$")]
    pub provider_event_id: Option<String>,
    /// Events with at least one job in this status, or `no_route`: events without a job.
    #[schema(inline, value_type = Option<StatusFilter>)]
    pub status: Option<String>,
    pub received_from: Option<DateTime<Utc>>,
    pub received_to: Option<DateTime<Utc>>,
    /// Only count what would be replayed.
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Default, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadLettersQuery {
    #[param(pattern = "^[^\\u0000]*$")]
    #[schema(pattern = "^[^\\u0000]*$")]
    pub destination: Option<String>,
    #[param(pattern = "^[^\\u0000]*$")]
    #[schema(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
    /// Page size: 1 to 500, default 50.
    #[param(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<i64>,
    /// Opaque: a `next_cursor` this API returned (anything else answers 400).
    pub cursor: Option<String>,
}

/// Give `destination`, `source` or both (the document's `anyOf` says so; the server answers
/// 400).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"destination": "billing"}))]
pub struct BulkRetryRequest {
    #[schema(pattern = "^[^\\u0000]*$")]
    pub destination: Option<String>,
    #[schema(pattern = "^[^\\u0000]*$")]
    pub source: Option<String>,
}
