//! The admin API's endpoints, tenant scoping and pagination.

use std::collections::HashSet;

use reqwest::Method;

use crate::both_backends;
use crate::support::signing::{self, github_headers};
use crate::support::sink::{Answer, Sink};
use crate::support::{
    error_code, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN, DEFAULT_TOKEN, GITHUB_SECRET,
};
use hookgate::domain::EventId;

mod secrets;
mod sources;

both_backends!(
    admin_requests_need_a_valid_token,
    events_are_listed_newest_first_across_pages_and_filtered,
    an_event_shows_what_arrived_and_what_happened,
    other_tenants_objects_answer_404_everywhere,
    replay_creates_jobs_delivered_with_the_same_webhook_id,
    dead_letters_are_listed_retried_to_success_and_discarded,
    the_openapi_document_lists_every_endpoint,
);

async fn ingest_github(app: &TestApp, delivery: &str, body: &[u8]) -> EventId {
    let headers = github_headers(GITHUB_SECRET, delivery, body);
    let r = app.post_webhook("github", &headers, body.to_vec()).await;
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = r.json().await.unwrap();
    EventId::parse(json["id"].as_str().unwrap()).unwrap()
}

async fn admin_requests_need_a_valid_token(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let r = app.admin(Method::GET, "", "/events", None, None).await;
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(error_code(r).await, (401, "unauthorized".into()));
    let mut one_byte_off = ACME_TOKEN.to_owned();
    one_byte_off.pop();
    one_byte_off.push('!');
    for bad in ["nope", one_byte_off.as_str()] {
        let r = app.admin(Method::GET, bad, "/events", None, None).await;
        assert_eq!(error_code(r).await, (401, "unauthorized".into()), "{bad}");
    }
    let r = app
        .admin(Method::POST, "wrong", "/replay", Some("{}"), None)
        .await;
    assert_eq!(r.status(), 401, "POSTs too");
    let r = app
        .admin(Method::GET, ACME_TOKEN, "/events", None, None)
        .await;
    assert_eq!(r.status(), 200);
}

async fn events_are_listed_newest_first_across_pages_and_filtered(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let acme = app.ingest_stripes("evt_page", 7).await;
    let gh = ingest_github(&app, "gh-1", b"{}").await;

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            None => "/events?limit=3".to_owned(),
            Some(c) => format!("/events?limit=3&cursor={c}"),
        };
        let page = app.admin_json(ACME_TOKEN, &path).await;
        pages += 1;
        for e in page["data"].as_array().unwrap() {
            seen.push(e["id"].as_str().unwrap().to_owned());
            assert_eq!(e["source"], "stripe", "only the tenant's events");
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let newest_first: Vec<String> = acme.iter().rev().map(|e| e.to_string()).collect();
    assert_eq!(seen, newest_first);

    let other = app.admin_json(DEFAULT_TOKEN, "/events").await;
    let ids: Vec<_> = other["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(ids, [serde_json::json!(gh.to_string())]);

    let one = app
        .admin_json(ACME_TOKEN, "/events?provider_event_id=evt_page_3")
        .await;
    assert_eq!(one["data"][0]["id"], acme[3].to_string());
    assert_eq!(one["data"].as_array().unwrap().len(), 1);
    let typed = app
        .admin_json(ACME_TOKEN, "/events?event_type=invoice.paid&source=stripe")
        .await;
    assert_eq!(typed["data"].as_array().unwrap().len(), 7);
    let none = app
        .admin_json(ACME_TOKEN, "/events?event_type=nothing")
        .await;
    assert!(none["data"].as_array().unwrap().is_empty());
    let pending = app.admin_json(ACME_TOKEN, "/events?status=pending").await;
    assert_eq!(pending["data"].as_array().unwrap().len(), 7);
    let succeeded = app.admin_json(ACME_TOKEN, "/events?status=succeeded").await;
    assert!(succeeded["data"].as_array().unwrap().is_empty());
    let future = app
        .admin_json(ACME_TOKEN, "/events?received_from=2999-01-01T00:00:00Z")
        .await;
    assert!(future["data"].as_array().unwrap().is_empty());
    let past = app
        .admin_json(
            ACME_TOKEN,
            "/events?received_to=2999-01-01T00:00:00Z&limit=500",
        )
        .await;
    assert_eq!(past["data"].as_array().unwrap().len(), 7);

    for bad in [
        "/events?limit=501",
        "/events?limit=0",
        "/events?cursor=garbage",
        "/events?status=lost",
        "/events?colour=red",
    ] {
        let r = app.admin(Method::GET, ACME_TOKEN, bad, None, None).await;
        assert_eq!(error_code(r).await, (400, "bad_request".into()), "{bad}");
    }
}

async fn an_event_shows_what_arrived_and_what_happened(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/audit", &[Answer::status(500)]);
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let body: Vec<u8> = vec![0xff, 0x00, b'h', b'i', 0xfe];
    let id = ingest_github(&app, "gh-binary", &body).await;
    app.worker().run_once().await.unwrap();

    let e = app
        .admin_json(DEFAULT_TOKEN, &format!("/events/{id}"))
        .await;
    assert_eq!(e["id"], id.to_string());
    assert_eq!(e["source"], "github");
    assert_eq!(e["provider_event_id"], "gh-binary");
    assert_eq!(e["event_type"], "push");
    assert!(e["received_at"].as_str().is_some());
    assert!(e["body"].is_null(), "not UTF-8, so no text body");
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(e["body_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, body);
    let headers = e["headers"].as_array().unwrap();
    assert!(headers.iter().any(|h| h["name"] == "x-hub-signature-256"
        && h["value"].as_str().unwrap().starts_with("sha256=")));
    let job = &e["jobs"][0];
    assert_eq!(job["destination"], "audit");
    assert_eq!(job["status"], "pending");
    assert_eq!(job["attempts"], 1);
    assert_eq!(job["last_error"], "HTTP 500");
    assert!(job["next_attempt_at"].as_str().is_some());
    assert_eq!(job["history"][0]["status_code"], 500);
    assert_eq!(job["history"][0]["outcome"], "retry");

    let raw = app
        .admin(
            Method::GET,
            DEFAULT_TOKEN,
            &format!("/events/{id}/raw"),
            None,
            None,
        )
        .await;
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.headers()["content-type"], "application/octet-stream");
    assert_eq!(raw.bytes().await.unwrap().as_ref(), body.as_slice());

    let text = app.ingest_stripe("evt_text").await;
    let e = app.admin_json(ACME_TOKEN, &format!("/events/{text}")).await;
    assert_eq!(e["body"], r#"{"id":"evt_text","type":"invoice.paid"}"#);
    let raw = app
        .admin(
            Method::GET,
            ACME_TOKEN,
            &format!("/events/{text}/raw"),
            None,
            None,
        )
        .await;
    assert_eq!(raw.headers()["content-type"], "application/octet-stream");
    assert_eq!(
        raw.headers()["hookgate-original-content-type"],
        "application/json"
    );

    for missing in [
        "/events/01a22c04-d7d2-70d6-ae77-4f1669652d2b",
        "/events/not-a-uuid",
        "/events/01a22c04-d7d2-70d6-ae77-4f1669652d2b/raw",
    ] {
        let r = app
            .admin(Method::GET, ACME_TOKEN, missing, None, None)
            .await;
        assert_eq!(error_code(r).await, (404, "not_found".into()), "{missing}");
    }
}

async fn other_tenants_objects_answer_404_everywhere(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(410));
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let acme_event = app.ingest_stripe("evt_private").await;
    app.worker().run_once().await.unwrap();
    let dead = app.job(acme_event, "billing").await;
    assert_eq!(dead.status, hookgate::queue::JobStatus::Failed);

    // The default tenant probes acme's ids: every answer is the plain "not found".
    let probes = [
        (Method::GET, format!("/events/{acme_event}")),
        (Method::GET, format!("/events/{acme_event}/raw")),
        (Method::POST, format!("/events/{acme_event}/replay")),
        (Method::POST, format!("/dead-letters/{}/retry", dead.id)),
        (Method::DELETE, format!("/dead-letters/{}", dead.id)),
    ];
    for (method, path) in probes {
        let r = app
            .admin(method.clone(), DEFAULT_TOKEN, &path, None, None)
            .await;
        assert_eq!(
            error_code(r).await,
            (404, "not_found".into()),
            "{method} {path}"
        );
    }
    let events = app.admin_json(DEFAULT_TOKEN, "/events").await;
    assert!(events["data"].as_array().unwrap().is_empty());
    let dead_letters = app.admin_json(DEFAULT_TOKEN, "/dead-letters").await;
    assert!(dead_letters["data"].as_array().unwrap().is_empty());
    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/replay",
            Some(r#"{"source":"stripe"}"#),
            None,
        )
        .await;
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["replayed"], 0);
    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/dead-letters/retry",
            Some(r#"{"destination":"billing"}"#),
            None,
        )
        .await;
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["retried"], 0);
    // Nothing changed for acme.
    assert_eq!(
        app.job(acme_event, "billing").await.status,
        hookgate::queue::JobStatus::Failed
    );
    assert_eq!(app.store.jobs_for_event(acme_event).await.unwrap().len(), 2);
    let own = app.admin_json(ACME_TOKEN, "/dead-letters").await;
    assert_eq!(own["data"].as_array().unwrap().len(), 1);
}

async fn replay_creates_jobs_delivered_with_the_same_webhook_id(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let id = app.ingest_stripe("evt_replay").await;
    app.worker().run_once().await.unwrap();
    assert_eq!(sink.received("/billing").len(), 1);

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{id}/replay"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    let json: serde_json::Value = r.json().await.unwrap();
    let jobs = json["jobs"].as_array().unwrap();
    let destinations: HashSet<_> = jobs
        .iter()
        .map(|j| j["destination"].as_str().unwrap())
        .collect();
    assert_eq!(destinations, HashSet::from(["billing", "audit"]));
    assert!(jobs
        .iter()
        .all(|j| j["status"] == "pending" && j["event_id"] == id.to_string()));

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{id}/replay"),
            Some(r#"{"destinations":["billing"]}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["jobs"].as_array().unwrap().len(), 1);

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{id}/replay"),
            Some(r#"{"destinations":["elsewhere"]}"#),
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (422, "unprocessable".into()));
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{id}/replay"),
            Some("{not json"),
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (400, "bad_request".into()));

    app.worker().run_once().await.unwrap();
    let billing = sink.received("/billing");
    assert_eq!(billing.len(), 3, "the original and two replays");
    assert!(billing
        .iter()
        .all(|r| r.header("webhook-id") == id.to_string()));
    assert_eq!(sink.received("/audit").len(), 2);

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(r#"{"dry_run":true}"#),
            None,
        )
        .await;
    assert_eq!(
        error_code(r).await,
        (400, "bad_request".into()),
        "a filter is required"
    );
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(r#"{"source":"stripe","dry_run":true}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["matched"], 1);
    let before = app.store.jobs_for_event(id).await.unwrap().len();
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(r#"{"provider_event_id":"evt_replay"}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["replayed"], 1);
    assert_eq!(
        app.store.jobs_for_event(id).await.unwrap().len(),
        before + 2
    );
}

async fn dead_letters_are_listed_retried_to_success_and_discarded(backend: Backend) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(410));
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let events = app.ingest_stripes("evt_dead", 3).await;
    app.worker().run_once().await.unwrap();

    // Three dead letters, two per page.
    let first = app.admin_json(ACME_TOKEN, "/dead-letters?limit=2").await;
    assert_eq!(first["data"].as_array().unwrap().len(), 2);
    let cursor = first["next_cursor"].as_str().expect("a second page");
    let second = app
        .admin_json(
            ACME_TOKEN,
            &format!("/dead-letters?limit=2&cursor={cursor}"),
        )
        .await;
    assert_eq!(second["data"].as_array().unwrap().len(), 1);
    assert!(second["next_cursor"].is_null());
    let letter = &first["data"][0];
    assert_eq!(letter["destination"], "billing");
    assert_eq!(letter["status"], "failed");
    assert_eq!(letter["last_error"], "HTTP 410");
    assert_eq!(letter["event"]["source"], "stripe");
    assert_eq!(letter["history"][0]["status_code"], 410);
    let filtered = app
        .admin_json(ACME_TOKEN, "/dead-letters?destination=audit")
        .await;
    assert!(filtered["data"].as_array().unwrap().is_empty());

    // The destination recovers; one dead letter is retried and delivered.
    sink.always("/billing", Answer::status(200));
    let job = app.job(events[0], "billing").await;
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/dead-letters/{}/retry", job.id),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["status"], "pending");
    assert_eq!(json["attempts"], 0);
    app.worker().run_once().await.unwrap();
    let job = app.job(events[0], "billing").await;
    assert_eq!(job.status, hookgate::queue::JobStatus::Succeeded);
    let history = app.store.attempts_for_job(job.id).await.unwrap();
    assert_eq!(
        history.len(),
        2,
        "the history is kept: the 410, then the success"
    );
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/dead-letters/{}/retry", job.id),
            None,
            None,
        )
        .await;
    assert_eq!(
        error_code(r).await,
        (409, "conflict".into()),
        "no longer a dead letter"
    );

    // Another is discarded: out of the list, still in the event's history.
    let discard = app.job(events[1], "billing").await;
    let r = app
        .admin(
            Method::DELETE,
            ACME_TOKEN,
            &format!("/dead-letters/{}", discard.id),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.json::<serde_json::Value>().await.unwrap()["discarded_at"].is_string());
    let r = app
        .admin(
            Method::DELETE,
            ACME_TOKEN,
            &format!("/dead-letters/{}", discard.id),
            None,
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (409, "conflict".into()));
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/dead-letters/{}/retry", discard.id),
            None,
            None,
        )
        .await;
    assert_eq!(
        error_code(r).await,
        (409, "conflict".into()),
        "a discarded letter stays discarded"
    );
    let list = app.admin_json(ACME_TOKEN, "/dead-letters").await;
    let ids: Vec<_> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [app.job(events[2], "billing").await.id.to_string()]);
    let detail = app
        .admin_json(ACME_TOKEN, &format!("/events/{}", events[1]))
        .await;
    let billing = detail["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["destination"] == "billing")
        .unwrap();
    assert_eq!(billing["status"], "failed");
    assert!(billing["discarded_at"].is_string());

    // Bulk retry takes the rest.
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/dead-letters/retry",
            Some(r#"{"destination":"billing"}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["retried"], 1);
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/dead-letters/retry",
            Some("{}"),
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (400, "bad_request".into()));
    app.worker().run_once().await.unwrap();
    assert_eq!(
        app.job(events[2], "billing").await.status,
        hookgate::queue::JobStatus::Succeeded
    );
    let empty = app.admin_json(ACME_TOKEN, "/dead-letters").await;
    assert!(empty["data"].as_array().unwrap().is_empty());
    let _ = signing::now();
}

async fn the_openapi_document_lists_every_endpoint(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let r = app
        .admin(Method::GET, "", "/openapi.json", None, None)
        .await;
    assert_eq!(r.status(), 401);
    let doc = app.admin_json(ACME_TOKEN, "/openapi.json").await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let mut documented = HashSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    let served: HashSet<String> = [
        "GET /admin/v1/events",
        "GET /admin/v1/events/{id}",
        "GET /admin/v1/events/{id}/raw",
        "POST /admin/v1/events/{id}/replay",
        "POST /admin/v1/replay",
        "GET /admin/v1/dead-letters",
        "POST /admin/v1/dead-letters/{job_id}/retry",
        "POST /admin/v1/dead-letters/retry",
        "DELETE /admin/v1/dead-letters/{job_id}",
        "GET /admin/v1/sources",
        "GET /admin/v1/destinations",
        "GET /admin/v1/destinations/{name}",
        "POST /admin/v1/destinations/{name}/pause",
        "POST /admin/v1/destinations/{name}/resume",
        "GET /admin/v1/undelivered",
        "POST /admin/v1/undelivered/retry",
        "GET /admin/v1/quarantine",
        "GET /admin/v1/quarantine/{id}",
        "DELETE /admin/v1/quarantine/{id}",
        "POST /admin/v1/quarantine/{id}/verify",
        "POST /admin/v1/quarantine/verify",
        "GET /admin/v1/sources/{name}/reconciliations",
        "POST /admin/v1/sources/{name}/reconciliations",
        "GET /admin/v1/openapi.json",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(documented, served);
    // Every documented route is really served: with a made-up id it answers 404 JSON from
    // the handler (not_found), never the router's bare 404.
    let fake = "01a22c04-d7d2-70d6-ae77-4f1669652d2b";
    for route in &served {
        let (method, path) = route.split_once(' ').unwrap();
        let path = path
            .trim_start_matches("/admin/v1")
            .replace("{id}", fake)
            .replace("{job_id}", fake);
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let body = (method == Method::POST).then_some(r#"{"source":"stripe"}"#);
        let r = app
            .admin(method.clone(), ACME_TOKEN, &path, body, None)
            .await;
        let status = r.status().as_u16();
        let json: serde_json::Value = r.json().await.unwrap_or_default();
        assert!(
            status < 300 || json["error"]["code"] == "not_found",
            "{route}: {status} {json}"
        );
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    assert_eq!(doc, hookgate::admin::openapi_document(), "served as built");

    // A method a documented path does not serve answers 405 with Allow, before any auth.
    for (method, path, allow) in [
        (Method::PUT, "/events", "GET"),
        (Method::DELETE, "/replay", "POST"),
        (Method::DELETE, "/dead-letters/retry", "POST"),
        (Method::POST, &*format!("/dead-letters/{fake}"), "DELETE"),
    ] {
        let r = app.admin(method.clone(), "", path, None, None).await;
        assert_eq!(r.headers()["allow"], allow, "{method} {path}");
        assert_eq!(
            error_code(r).await,
            (405, "method_not_allowed".into()),
            "{method} {path}"
        );
    }

    // What the document says of Idempotency-Key and limit is what the server checks.
    let too_long = "k".repeat(256);
    for bad in ["two words", too_long.as_str()] {
        let r = app
            .admin(
                Method::POST,
                ACME_TOKEN,
                "/replay",
                Some(r#"{"source":"stripe","dry_run":true}"#),
                Some(bad),
            )
            .await;
        assert_eq!(error_code(r).await, (400, "bad_request".into()), "{bad:?}");
    }
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(r#"{"source":"stripe","dry_run":true}"#),
            Some("a-b_c:~!"),
        )
        .await;
    assert_eq!(r.status(), 200);
    let huge = format!(
        r#"{{"source":"{}"}}"#,
        "x".repeat(hookgate::admin::MAX_BODY_BYTES)
    );
    let r = app
        .admin(Method::POST, ACME_TOKEN, "/replay", Some(&huge), None)
        .await;
    assert_eq!(error_code(r).await, (413, "payload_too_large".into()));
    for (limit, status) in [(0, 400), (1, 200), (500, 200), (501, 400)] {
        for list in ["/events", "/dead-letters"] {
            let r = app
                .admin(
                    Method::GET,
                    ACME_TOKEN,
                    &format!("{list}?limit={limit}"),
                    None,
                    None,
                )
                .await;
            assert_eq!(r.status(), status, "{list} limit {limit}");
        }
    }
}
