//! The fake Stripe events API that reconciliation calls: an in-process HTTP server holding
//! every event the non-retrying provider produced (recorded before its one POST, so an event
//! whose POST failed is still listed). It serves `GET /v1/events?created[gte]=..&limit=..
//! [&starting_after=evt_..]` as Stripe does: newest first, `has_more` when a page follows,
//! the next page starting after the last id listed. It checks the Bearer key and counts the
//! calls it gets, with their times, so the drain can wait for a call after the faults.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use bytes::Bytes;

/// The restricted key the gateway's `[sources.reconcile]` presents.
pub const API_KEY: &str = "rk_test_chaos_events_read";
/// Stripe's page size bounds: `limit` defaults to 10 and is at most 100.
const DEFAULT_LIMIT: usize = 10;
const MAX_LIMIT: usize = 100;

/// One produced event: its id, its `created` time (Unix seconds) and its JSON, the very
/// bytes its webhook carries.
#[derive(Debug, Clone)]
pub struct Produced {
    pub id: String,
    pub created: i64,
    pub body: Bytes,
}

/// Events in the order produced (oldest first), with each id's position.
#[derive(Debug, Default)]
pub struct EventLog {
    events: Vec<Produced>,
    index: HashMap<String, usize>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum PageError {
    /// `starting_after` names no event (Stripe answers 400 `resource_missing`).
    NoSuchEvent(String),
}

impl EventLog {
    pub fn push(&mut self, e: Produced) {
        self.index.insert(e.id.clone(), self.events.len());
        self.events.push(e);
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.events.iter().map(|e| e.id.as_str())
    }

    /// One page, newest first: events created at or after `created_gte`, after the event
    /// `starting_after` (in list order) when given, at most `limit`; and whether more follow.
    pub fn page(
        &self,
        created_gte: i64,
        limit: usize,
        starting_after: Option<&str>,
    ) -> Result<(Vec<&Produced>, bool), PageError> {
        // Newest first is production order reversed: the event after position p is p - 1.
        let end = match starting_after {
            None => self.events.len(),
            Some(id) => *self
                .index
                .get(id)
                .ok_or_else(|| PageError::NoSuchEvent(id.to_owned()))?,
        };
        let mut listed = self.events[..end]
            .iter()
            .rev()
            .filter(|e| e.created >= created_gte);
        let page: Vec<&Produced> = listed.by_ref().take(limit).collect();
        let has_more = listed.next().is_some();
        Ok((page, has_more))
    }
}

/// `{"object":"list","url":"/v1/events","has_more":..,"data":[...]}` with each event's
/// bytes as produced.
pub fn list_body(page: &[&Produced], has_more: bool) -> Vec<u8> {
    let mut out = format!(r#"{{"object":"list","url":"/v1/events","has_more":{has_more},"data":["#)
        .into_bytes();
    for (i, e) in page.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&e.body);
    }
    out.extend_from_slice(b"]}");
    out
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ApiCounts {
    /// `GET /v1/events` answered 200.
    pub list_calls: u64,
    /// Calls without the right Bearer key (answered 401).
    pub unauthorized: u64,
    /// Malformed queries or unknown cursors (answered 400), and other paths (404).
    pub bad_requests: u64,
    /// Events returned over all pages.
    pub events_listed: u64,
    /// Time of the last list call, seconds since the run's start.
    pub last_call_at: Option<f64>,
}

pub struct ApiState {
    pub log: Mutex<EventLog>,
    started_at: Instant,
    list_calls: AtomicU64,
    unauthorized: AtomicU64,
    bad_requests: AtomicU64,
    events_listed: AtomicU64,
    last_call_at: Mutex<Option<f64>>,
}

impl ApiState {
    pub fn record(&self, e: Produced) {
        self.log.lock().unwrap().push(e);
    }

    pub fn counts(&self) -> ApiCounts {
        ApiCounts {
            list_calls: self.list_calls.load(Ordering::SeqCst),
            unauthorized: self.unauthorized.load(Ordering::SeqCst),
            bad_requests: self.bad_requests.load(Ordering::SeqCst),
            events_listed: self.events_listed.load(Ordering::SeqCst),
            last_call_at: *self.last_call_at.lock().unwrap(),
        }
    }

    /// Every produced id.
    pub fn ids(&self) -> Vec<String> {
        self.log.lock().unwrap().ids().map(str::to_owned).collect()
    }
}

pub struct ProviderApi {
    pub base: String,
    pub state: Arc<ApiState>,
    handle: ServerHandle,
}

impl ProviderApi {
    pub async fn start(started_at: Instant) -> anyhow::Result<ProviderApi> {
        let state = Arc::new(ApiState {
            log: Mutex::default(),
            started_at,
            list_calls: AtomicU64::new(0),
            unauthorized: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            events_listed: AtomicU64::new(0),
            last_call_at: Mutex::default(),
        });
        let data = web::Data::from(state.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let base = format!("http://{}", listener.local_addr()?);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/v1/events", web::get().to(list_events))
                .default_service(web::to(|| async {
                    HttpResponse::NotFound().body("chaos: no such API")
                }))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(ProviderApi {
            base,
            state,
            handle,
        })
    }

    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

fn stripe_error(status: actix_web::http::StatusCode, kind: &str, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(serde_json::json!({
        "error": {"type": kind, "message": message}
    }))
}

async fn list_events(
    state: web::Data<ApiState>,
    req: HttpRequest,
    query: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    use actix_web::http::StatusCode;
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {API_KEY}"));
    if !authorized {
        state.unauthorized.fetch_add(1, Ordering::SeqCst);
        return stripe_error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Invalid API Key provided",
        );
    }
    let parsed = (|| {
        let gte = match query.get("created[gte]") {
            Some(v) => v.parse::<i64>().ok()?,
            None => i64::MIN,
        };
        let limit = match query.get("limit") {
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))?,
            None => DEFAULT_LIMIT,
        };
        Some((gte, limit))
    })();
    let Some((gte, limit)) = parsed else {
        state.bad_requests.fetch_add(1, Ordering::SeqCst);
        return stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "created[gte] must be an integer and limit between 1 and 100",
        );
    };
    let body = {
        let log = state.log.lock().unwrap();
        match log.page(gte, limit, query.get("starting_after").map(String::as_str)) {
            Ok((page, has_more)) => {
                state
                    .events_listed
                    .fetch_add(page.len() as u64, Ordering::SeqCst);
                list_body(&page, has_more)
            }
            Err(PageError::NoSuchEvent(id)) => {
                drop(log);
                state.bad_requests.fetch_add(1, Ordering::SeqCst);
                return stripe_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("No such event: '{id}'"),
                );
            }
        }
    };
    state.list_calls.fetch_add(1, Ordering::SeqCst);
    *state.last_call_at.lock().unwrap() = Some(state.started_at.elapsed().as_secs_f64());
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(n: usize) -> EventLog {
        let mut log = EventLog::default();
        for i in 1..=n {
            log.push(Produced {
                id: format!("evt_{i:03}"),
                // Two events a second.
                created: 1_000 + (i as i64) / 2,
                body: Bytes::from(format!(r#"{{"id":"evt_{i:03}"}}"#)),
            });
        }
        log
    }

    fn ids(page: &[&Produced]) -> Vec<String> {
        page.iter().map(|e| e.id.clone()).collect()
    }

    #[test]
    fn pages_go_newest_first_and_follow_the_cursor_to_the_end() {
        let log = log(7);
        let (p1, more) = log.page(0, 3, None).unwrap();
        assert_eq!(ids(&p1), ["evt_007", "evt_006", "evt_005"]);
        assert!(more);
        let (p2, more) = log.page(0, 3, Some("evt_005")).unwrap();
        assert_eq!(ids(&p2), ["evt_004", "evt_003", "evt_002"]);
        assert!(more);
        let (p3, more) = log.page(0, 3, Some("evt_002")).unwrap();
        assert_eq!(ids(&p3), ["evt_001"]);
        assert!(!more);
    }

    #[test]
    fn a_full_last_page_says_no_more() {
        let log = log(6);
        let (_, more) = log.page(0, 3, Some("evt_004")).unwrap();
        assert!(!more);
        let (p, more) = log.page(0, 100, None).unwrap();
        assert_eq!((p.len(), more), (6, false));
    }

    #[test]
    fn created_gte_bounds_the_window() {
        let log = log(7); // created: 1000, 1001, 1001, 1002, 1002, 1003, 1003
        let (p, more) = log.page(1002, 10, None).unwrap();
        assert_eq!(ids(&p), ["evt_007", "evt_006", "evt_005", "evt_004"]);
        assert!(!more);
        // The event past the window's start does not count as "more".
        let (p, more) = log.page(1002, 2, Some("evt_006")).unwrap();
        assert_eq!(ids(&p), ["evt_005", "evt_004"]);
        assert!(!more);
    }

    #[test]
    fn events_produced_during_a_listing_do_not_shift_its_later_pages() {
        let mut log = log(4);
        let (p1, _) = log.page(0, 2, None).unwrap();
        let cursor = p1.last().unwrap().id.clone();
        log.push(Produced {
            id: "evt_new".into(),
            created: 2_000,
            body: Bytes::from_static(b"{}"),
        });
        let (p2, more) = log.page(0, 2, Some(&cursor)).unwrap();
        assert_eq!(ids(&p2), ["evt_002", "evt_001"]);
        assert!(!more);
    }

    #[test]
    fn an_unknown_cursor_is_an_error() {
        assert_eq!(
            log(2).page(0, 2, Some("evt_x")).unwrap_err(),
            PageError::NoSuchEvent("evt_x".into())
        );
    }

    #[test]
    fn the_list_body_is_a_stripe_list_with_the_events_as_produced() {
        let log = log(2);
        let (p, more) = log.page(0, 10, None).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&list_body(&p, more)).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["has_more"], false);
        assert_eq!(v["data"][0]["id"], "evt_002");
        assert_eq!(v["data"][1]["id"], "evt_001");
        let empty: serde_json::Value = serde_json::from_slice(&list_body(&[], false)).unwrap();
        assert_eq!(empty["data"], serde_json::json!([]));
    }
}
