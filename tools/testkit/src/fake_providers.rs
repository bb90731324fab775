//! Local fakes of the provider APIs reconciliation calls, one actix server on port 0 for all
//! three, following the documented request and response shapes (pagination included) and
//! recording every request:
//! - Stripe `GET /v1/events` (`created[gte]`, `limit`, `starting_after`; `has_more`);
//! - GitHub `GET {hook}/deliveries` (`per_page`, `cursor`; `Link: <..>; rel="next"`) and
//!   `POST {hook}/deliveries/{id}/attempts`, the App hook's `/app/hook/...` included, which
//!   want a GitHub App JWT (`accept_github_app`, checked as in `github_app`);
//! - Paddle `GET /notifications` (`status=failed`, `after`, `per_page`; `meta.pagination`)
//!   and `POST /notifications/{id}/replay`.
//!
//! Pages hold `page_size` items whatever the request's limit (a provider may serve fewer),
//! so tests reach a second page with a few items. A request without the expected bearer
//! credential is answered 401.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    pub method: String,
    pub path: String,
    /// Decoded query parameters.
    pub query: HashMap<String, String>,
    pub headers: HashMap<String, String>,
}

/// A scripted failure: the status, and `Retry-After` seconds if any.
#[derive(Debug, Clone, Copy)]
pub struct Failure {
    pub status: u16,
    pub retry_after: Option<u64>,
}

/// A GitHub delivery as listed.
#[derive(Debug, Clone)]
pub struct GithubDelivery {
    pub id: u64,
    pub guid: String,
    pub delivered_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Default)]
struct State {
    api_key: Mutex<String>,
    /// The App whose JWTs `/app/...` accepts: its id and public key.
    github_app: Mutex<Option<(u64, rsa::RsaPublicKey)>>,
    page_size: Mutex<usize>,
    requests: Mutex<Vec<ApiRequest>>,
    /// Newest first, as the APIs list them.
    stripe_events: Mutex<Vec<Value>>,
    github_deliveries: Mutex<Vec<GithubDelivery>>,
    /// (notification id, event id), newest first.
    paddle_failed: Mutex<Vec<(String, String)>>,
    /// Per request number (1-based, over every request): a failure to answer instead.
    failures: Mutex<HashMap<usize, Failure>>,
    /// Failures for the next requests to a path, in order.
    path_failures: Mutex<HashMap<String, VecDeque<Failure>>>,
}

pub struct FakeProviders {
    pub base: String,
    state: Arc<State>,
    handle: ServerHandle,
}

impl FakeProviders {
    /// Starts the fake; it accepts `Authorization: Bearer {api_key}` only.
    pub async fn start(api_key: &str) -> FakeProviders {
        let state = Arc::new(State::default());
        *state.api_key.lock().unwrap() = api_key.to_owned();
        *state.page_size.lock().unwrap() = 100;
        let data = web::Data::from(state.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let base_for_app = base.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::Data::new(base_for_app.clone()))
                .default_service(web::to(answer))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        FakeProviders {
            base,
            state,
            handle,
        }
    }

    /// `/app/...` accepts JWTs of App `app_id` signed with `private_pem` (only those).
    pub fn accept_github_app(&self, app_id: u64, private_pem: &str) {
        *self.state.github_app.lock().unwrap() =
            Some((app_id, super::github_app::public_key(private_pem)));
    }

    pub fn set_page_size(&self, n: usize) {
        *self.state.page_size.lock().unwrap() = n.max(1);
    }

    /// Adds a Stripe event `{"id", "object": "event", "type", "created", "data"}` as the
    /// newest.
    pub fn add_stripe_event(&self, id: &str, event_type: &str) -> Value {
        let event = json!({
            "id": id,
            "object": "event",
            "type": event_type,
            "created": chrono::Utc::now().timestamp(),
            "livemode": false,
            "data": {"object": {"id": format!("in_{id}"), "object": "invoice"}},
        });
        self.state
            .stripe_events
            .lock()
            .unwrap()
            .insert(0, event.clone());
        event
    }

    /// Adds a GitHub delivery of the hook as the newest.
    pub fn add_github_delivery(&self, id: u64, guid: &str) {
        self.state.github_deliveries.lock().unwrap().insert(
            0,
            GithubDelivery {
                id,
                guid: guid.to_owned(),
                delivered_at: chrono::Utc::now(),
            },
        );
    }

    /// Adds a failed Paddle notification as the newest.
    pub fn add_paddle_failed(&self, notification_id: &str, event_id: &str) {
        self.state
            .paddle_failed
            .lock()
            .unwrap()
            .insert(0, (notification_id.to_owned(), event_id.to_owned()));
    }

    /// The `n`-th request from now on (1 = the next) is answered with `failure`.
    pub fn fail_request(&self, n: usize, failure: Failure) {
        let at = self.state.requests.lock().unwrap().len() + n;
        self.state.failures.lock().unwrap().insert(at, failure);
    }

    /// The next request to `path` is answered with `failure`.
    pub fn fail_path(&self, path: &str, failure: Failure) {
        self.state
            .path_failures
            .lock()
            .unwrap()
            .entry(path.to_owned())
            .or_default()
            .push_back(failure);
    }

    pub fn requests(&self) -> Vec<ApiRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The paths of the POSTs received, in order.
    pub fn posts(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .map(|r| r.path)
            .collect()
    }
}

impl Drop for FakeProviders {
    fn drop(&mut self) {
        super::stop_server(self.handle.clone());
    }
}

async fn answer(
    state: web::Data<State>,
    base: web::Data<String>,
    req: HttpRequest,
) -> HttpResponse {
    let query: HashMap<String, String> =
        web::Query::<HashMap<String, String>>::from_query(req.query_string())
            .map(|q| q.into_inner())
            .unwrap_or_default();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let recorded = ApiRequest {
        method: req.method().to_string(),
        path: req.path().to_owned(),
        query: query.clone(),
        headers,
    };
    let number = {
        let mut requests = state.requests.lock().unwrap();
        requests.push(recorded);
        requests.len()
    };
    let failure = state.failures.lock().unwrap().remove(&number).or_else(|| {
        state
            .path_failures
            .lock()
            .unwrap()
            .get_mut(req.path())
            .and_then(VecDeque::pop_front)
    });
    if let Some(f) = failure {
        let mut r = HttpResponse::build(actix_web::http::StatusCode::from_u16(f.status).unwrap());
        if let Some(s) = f.retry_after {
            r.insert_header(("Retry-After", s.to_string()));
        }
        return r.json(json!({"error": {"message": "scripted failure"}}));
    }
    let expected = format!("Bearer {}", state.api_key.lock().unwrap());
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let authorized = if req.path().starts_with("/app/") {
        state
            .github_app
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|(id, public)| {
                let now = chrono::Utc::now().timestamp();
                super::github_app::check_jwt(authorization, *id, public, now).is_ok()
            })
    } else {
        authorization == Some(expected.as_str())
    };
    if !authorized {
        return HttpResponse::Unauthorized().json(json!({"error": {"message": "bad key"}}));
    }
    let page_size = *state.page_size.lock().unwrap();
    let path = req.path().to_owned();
    let method = req.method().as_str();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("GET", ["v1", "events"]) => stripe_events(&state, &query, page_size),
        ("GET", [.., "hooks", _, "deliveries"]) => github_deliveries(
            &state,
            &query,
            page_size,
            &format!("{}{path}", base.as_str()),
        ),
        ("GET", ["app", "hook", "deliveries"]) => github_deliveries(
            &state,
            &query,
            page_size,
            &format!("{}{path}", base.as_str()),
        ),
        ("POST", [.., "hooks", _, "deliveries", _, "attempts"])
        | ("POST", ["app", "hook", "deliveries", _, "attempts"]) => {
            HttpResponse::Accepted().json(json!({}))
        }
        ("GET", ["notifications"]) => paddle_notifications(
            &state,
            &query,
            page_size,
            &format!("{}{path}", base.as_str()),
        ),
        ("POST", ["notifications", id, "replay"]) => {
            HttpResponse::Accepted().json(json!({"data": {"notification_id": id}}))
        }
        _ => HttpResponse::NotFound().json(json!({"error": {"message": "no such route"}})),
    }
}

/// The items after the one `after` names (all when none), at most `size`, and whether more
/// follow.
fn page_after<T: Clone>(items: &[T], after: Option<usize>, size: usize) -> (Vec<T>, bool) {
    let start = after.map_or(0, |i| i + 1);
    let rest = items.get(start..).unwrap_or_default();
    let page: Vec<T> = rest.iter().take(size).cloned().collect();
    (page, rest.len() > size)
}

fn stripe_events(state: &State, query: &HashMap<String, String>, size: usize) -> HttpResponse {
    let gte: i64 = query
        .get("created[gte]")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let events: Vec<Value> = state
        .stripe_events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["created"].as_i64().unwrap_or(0) >= gte)
        .cloned()
        .collect();
    let after = query
        .get("starting_after")
        .and_then(|id| events.iter().position(|e| e["id"] == id.as_str()));
    let (data, has_more) = page_after(&events, after, size.min(limit));
    HttpResponse::Ok()
        .json(json!({"object": "list", "url": "/v1/events", "data": data, "has_more": has_more}))
}

fn github_deliveries(
    state: &State,
    query: &HashMap<String, String>,
    size: usize,
    url: &str,
) -> HttpResponse {
    let deliveries = state.github_deliveries.lock().unwrap().clone();
    let after = query
        .get("cursor")
        .and_then(|c| c.strip_prefix("v1_"))
        .and_then(|id| deliveries.iter().position(|d| d.id.to_string() == id));
    let (page, more) = page_after(&deliveries, after, size);
    let body: Vec<Value> = page
        .iter()
        .map(|d| {
            json!({
                "id": d.id, "guid": d.guid, "delivered_at": d.delivered_at.to_rfc3339(),
                "redelivery": false, "duration": 0.2, "status": "Invalid HTTP Response: 503",
                "status_code": 503, "event": "push", "action": null,
                "installation_id": null, "repository_id": 1,
            })
        })
        .collect();
    let mut response = HttpResponse::Ok();
    if more {
        let last = page.last().expect("more follow a non-empty page").id;
        response.insert_header((
            "Link",
            format!("<{url}?per_page=100&cursor=v1_{last}>; rel=\"next\", <{url}?per_page=100>; rel=\"first\""),
        ));
    }
    response.json(body)
}

fn paddle_notifications(
    state: &State,
    query: &HashMap<String, String>,
    size: usize,
    url: &str,
) -> HttpResponse {
    if query.get("status").map(String::as_str) != Some("failed") {
        return HttpResponse::BadRequest()
            .json(json!({"error": {"detail": "this fake lists failed notifications only"}}));
    }
    let failed = state.paddle_failed.lock().unwrap().clone();
    let after = query
        .get("after")
        .and_then(|a| failed.iter().position(|(id, _)| id == a));
    let (page, more) = page_after(&failed, after, size);
    let data: Vec<Value> = page
        .iter()
        .map(|(id, event)| {
            json!({
                "id": id, "type": "transaction.completed", "status": "failed",
                "payload": {"event_id": event, "event_type": "transaction.completed",
                    "notification_id": id, "occurred_at": "2026-12-01T00:00:00Z", "data": {}},
                "occurred_at": "2026-12-01T00:00:00Z", "origin": "event", "times_attempted": 60,
            })
        })
        .collect();
    let next = page
        .last()
        .map(|(id, _)| format!("{url}?status=failed&after={id}"));
    HttpResponse::Ok().json(json!({
        "data": data,
        "meta": {"request_id": "req_fake", "pagination": {
            "per_page": size, "next": next, "has_more": more, "estimated_total": failed.len()}},
    }))
}
