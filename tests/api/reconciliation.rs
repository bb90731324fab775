//! Reconciliation against the provider's API (`[sources.reconcile]`), against local fakes of
//! Stripe's, GitHub's and Paddle's APIs: what was never POSTed is recovered and delivered
//! once, a webhook arriving after its recovery is a duplicate, a failed or rate-limited page
//! leaves a cursor the next run resumes from, and one run at a time per source.

use reqwest::Method;
use serde_json::Value;

use crate::both_backends;
use crate::support::fake_providers::{Failure, FakeProviders};
use crate::support::sink::Sink;
use crate::support::{
    error_code, signing, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN, DEFAULT_TOKEN,
    GITHUB_SECRET,
};

both_backends!(
    stripe_recovers_a_missing_event_once_and_its_late_webhook_is_a_duplicate,
    a_failed_or_rate_limited_page_leaves_a_cursor_the_next_run_resumes_from,
    github_missing_deliveries_are_redelivered_and_stored_ones_are_not,
    paddle_failed_notifications_are_replayed_unless_stored,
    one_run_at_a_time_per_source,
    the_console_shows_a_sources_runs,
    the_schedule_runs_each_source_once_per_interval,
);

pub const API_KEY: &str = "sk_test_reconcile_api_key_never_logged_51Hx";
const PADDLE_SECRET: &str = "pdl_ntfset_01reconcile_test_secret";

fn reconcile(fake: &FakeProviders, extra: &str) -> hookgate::config::ReconcileSettings {
    toml::from_str(&format!(
        "api_key = \"{API_KEY}\"\napi_base = \"{}\"\n{extra}",
        fake.base
    ))
    .unwrap()
}

/// An app whose stripe, github and paddle sources reconcile against `fake`.
async fn app_with_fake(backend: Backend, sink: &Sink, fake: &FakeProviders) -> TestApp {
    spawn_app_with_sink(backend, sink, |settings| {
        for s in &mut settings.sources {
            match s.name.as_str() {
                "stripe" => s.reconcile = Some(reconcile(fake, "")),
                "github" => {
                    s.reconcile = Some(reconcile(fake, "repository = \"octo/hello\"\nhook_id = 42"))
                }
                _ => {}
            }
        }
        let mut paddle: hookgate::config::SourceSettings = toml::from_str(&format!(
            "name = \"paddle\"\nprovider = \"paddle\"\nsecrets = [\"{PADDLE_SECRET}\"]\ndestinations = [\"audit\"]"
        ))
        .unwrap();
        paddle.reconcile = Some(reconcile(fake, ""));
        settings.sources.push(paddle);
    })
    .await
}

/// Runs one reconciliation of `source` through the admin API and returns its record.
async fn run(app: &TestApp, token: &str, source: &str, key: Option<&str>) -> Value {
    let r = app
        .admin(
            Method::POST,
            token,
            &format!("/sources/{source}/reconciliations"),
            None,
            key,
        )
        .await;
    assert_eq!(r.status(), 200, "run of {source}");
    r.json().await.unwrap()
}

fn counts(run: &Value) -> [i64; 4] {
    ["listed", "missing", "recovered", "errors"].map(|k| run[k].as_i64().unwrap())
}

async fn stripe_recovers_a_missing_event_once_and_its_late_webhook_is_a_duplicate(
    backend: Backend,
) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start(API_KEY).await;
    let app = app_with_fake(backend, &sink, &fake).await;
    app.ingest_stripe("evt_seen").await;
    fake.add_stripe_event("evt_seen", "invoice.paid");
    let lost = fake.add_stripe_event("evt_lost", "invoice.payment_failed");

    let first = run(&app, ACME_TOKEN, "stripe", Some("reconcile-1")).await;
    assert_eq!(counts(&first), [2, 1, 1, 0], "{first}");
    assert_eq!(first["provider"], "stripe");
    assert_eq!(first["run_by"], "admin");
    assert!(first["cursor"].is_null() && first["last_error"].is_null());
    let listing = &fake.requests()[0];
    assert_eq!(listing.path, "/v1/events");
    assert_eq!(listing.query["limit"], "100");
    assert!(listing.query.contains_key("created[gte]"));
    assert_eq!(
        listing.headers["authorization"],
        format!("Bearer {API_KEY}")
    );

    // The same Idempotency-Key answers the same run without calling the provider again.
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/sources/stripe/reconciliations",
            None,
            Some("reconcile-1"),
        )
        .await;
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(r.json::<Value>().await.unwrap(), first);
    assert_eq!(fake.requests().len(), 1);

    // Stored from the API's JSON, marked as verified through the API, routed as usual.
    let page = app
        .admin_json(ACME_TOKEN, "/events?provider_event_id=evt_lost")
        .await;
    let id = page["data"][0]["id"].as_str().unwrap().to_owned();
    let event = app.admin_json(ACME_TOKEN, &format!("/events/{id}")).await;
    assert_eq!(event["verified_scheme"], "stripe-api", "{event}");
    assert_eq!(event["event_type"], "invoice.payment_failed");
    let raw = app
        .admin(
            Method::GET,
            ACME_TOKEN,
            &format!("/events/{id}/raw"),
            None,
            None,
        )
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&raw).unwrap(), lost);

    // The provider's own webhook for it, arriving late, is a duplicate.
    let r = app.post_stripe(&lost.to_string()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["duplicate"], true);
    app.worker().run_once().await.unwrap();
    let delivered = |path: &str| {
        sink.received(path)
            .iter()
            .filter(|r| String::from_utf8_lossy(&r.body).contains("evt_lost"))
            .count()
    };
    assert_eq!((delivered("/billing"), delivered("/audit")), (1, 1));

    let second = run(&app, ACME_TOKEN, "stripe", None).await;
    assert_eq!(counts(&second), [2, 0, 0, 0]);
    let runs = app
        .admin_json(ACME_TOKEN, "/sources/stripe/reconciliations")
        .await;
    let ids: Vec<&Value> = runs["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(ids, [&second["id"], &first["id"]], "newest first");
    let recovered = app
        .metrics
        .reconciliation
        .with_label_values(&["stripe", "recovered"])
        .get();
    assert_eq!(recovered, 1);

    // Another tenant's source is not found; a source without reconciliation is 422.
    let r = app
        .admin(
            Method::GET,
            DEFAULT_TOKEN,
            "/sources/stripe/reconciliations",
            None,
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (404, "not_found".into()));
    let r = app
        .admin(
            Method::POST,
            DEFAULT_TOKEN,
            "/sources/slack/reconciliations",
            Some("null"),
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (422, "unprocessable".into()));
}

async fn a_failed_or_rate_limited_page_leaves_a_cursor_the_next_run_resumes_from(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start(API_KEY).await;
    fake.set_page_size(2);
    let app = app_with_fake(backend, &sink, &fake).await;
    for i in 0..5 {
        fake.add_stripe_event(&format!("evt_r{i}"), "invoice.paid");
    }
    // Newest first: evt_r4, evt_r3 | evt_r2, evt_r1 | evt_r0. The second page is limited.
    fake.fail_request(
        2,
        Failure {
            status: 429,
            retry_after: Some(0),
        },
    );
    let first = run(&app, ACME_TOKEN, "stripe", None).await;
    assert_eq!(counts(&first), [2, 2, 2, 1], "{first}");
    assert_eq!(first["cursor"], "evt_r3");
    assert!(
        first["last_error"]
            .as_str()
            .unwrap()
            .contains("rate limited"),
        "{first}"
    );

    // The next run goes on from the cursor, in the same window, to the end of the list.
    let before = fake.requests().len();
    let second = run(&app, ACME_TOKEN, "stripe", None).await;
    assert_eq!(counts(&second), [3, 3, 3, 0], "{second}");
    assert!(second["cursor"].is_null());
    assert_eq!(second["since"], first["since"]);
    let resumed = &fake.requests()[before];
    assert_eq!(resumed.query["starting_after"], "evt_r3");

    // A server error mid-list is recorded; the cursor stays on the page that failed.
    fake.fail_request(
        2,
        Failure {
            status: 500,
            retry_after: None,
        },
    );
    let third = run(&app, ACME_TOKEN, "stripe", None).await;
    assert_eq!(counts(&third), [2, 0, 0, 1], "{third}");
    assert_eq!(third["cursor"], "evt_r3");
    assert!(third["last_error"].as_str().unwrap().contains("500"));

    // A Retry-After in the future holds off the next run, which is refused, not queued.
    fake.fail_request(
        1,
        Failure {
            status: 429,
            retry_after: Some(3600),
        },
    );
    let limited = run(&app, ACME_TOKEN, "stripe", None).await;
    assert_eq!(limited["errors"], 1);
    assert_eq!(limited["cursor"], "evt_r3", "the cursor survives the limit");
    let calls = fake.requests().len();
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/sources/stripe/reconciliations",
            None,
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (409, "conflict".into()));
    assert_eq!(fake.requests().len(), calls, "no call while asked to wait");
    let errors = app
        .metrics
        .reconciliation
        .with_label_values(&["stripe", "errors"])
        .get();
    assert_eq!(errors, 3);
}

async fn github_missing_deliveries_are_redelivered_and_stored_ones_are_not(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start(API_KEY).await;
    fake.set_page_size(2);
    let app = app_with_fake(backend, &sink, &fake).await;
    let body = br#"{"zen":"Keep it logically awesome."}"#;
    let headers = signing::github_headers(GITHUB_SECRET, "guid-stored", body);
    assert_eq!(
        app.post_webhook("github", &headers, &body[..])
            .await
            .status(),
        200
    );
    // Newest first: 4 (a second listing of guid-lost-a) and 3 | 2 and 1.
    fake.add_github_delivery(1, "guid-stored");
    fake.add_github_delivery(2, "guid-lost-a");
    fake.add_github_delivery(3, "guid-lost-b");
    fake.add_github_delivery(4, "guid-lost-a");

    let record = run(&app, DEFAULT_TOKEN, "github", None).await;
    assert_eq!(counts(&record), [4, 2, 2, 0], "{record}");
    assert_eq!(record["pages"], 2);
    assert_eq!(
        fake.posts(),
        [
            "/repos/octo/hello/hooks/42/deliveries/4/attempts",
            "/repos/octo/hello/hooks/42/deliveries/3/attempts",
        ],
        "one redelivery per missing guid, none for the stored one"
    );
    let requests = fake.requests();
    let listings: Vec<_> = requests.iter().filter(|r| r.method == "GET").collect();
    assert_eq!(listings[0].path, "/repos/octo/hello/hooks/42/deliveries");
    assert_eq!(listings[0].query["per_page"], "100");
    assert_eq!(
        listings[1].query["cursor"], "v1_3",
        "the Link header's next cursor"
    );
    for r in &requests {
        assert_eq!(r.headers["authorization"], format!("Bearer {API_KEY}"));
        assert_eq!(r.headers["accept"], "application/vnd.github+json");
        assert_eq!(r.headers["x-github-api-version"], "2022-11-28");
        assert!(r.headers["user-agent"].starts_with("hookgate/"));
    }

    // The redelivery arrives signed, with the same delivery id, and takes the normal path.
    let headers = signing::github_headers(GITHUB_SECRET, "guid-lost-a", body);
    let r = app.post_webhook("github", &headers, &body[..]).await;
    assert_eq!(r.json::<Value>().await.unwrap()["duplicate"], false);
    let again = run(&app, DEFAULT_TOKEN, "github", None).await;
    assert_eq!(counts(&again), [4, 1, 1, 0]);
    assert_eq!(
        fake.posts().last().unwrap(),
        "/repos/octo/hello/hooks/42/deliveries/3/attempts"
    );

    // A redelivery limited mid-page stops the run there; the next one asks again.
    let attempts = |id: u64| format!("/repos/octo/hello/hooks/42/deliveries/{id}/attempts");
    fake.add_github_delivery(5, "guid-lost-c");
    fake.add_github_delivery(6, "guid-lost-d");
    fake.fail_path(
        &attempts(6),
        Failure {
            status: 429,
            retry_after: Some(0),
        },
    );
    let limited = run(&app, DEFAULT_TOKEN, "github", None).await;
    assert_eq!(counts(&limited), [2, 1, 0, 1], "{limited}");
    assert!(limited["last_error"]
        .as_str()
        .unwrap()
        .contains("rate limited"));
    let posts = fake.posts();
    assert_eq!(
        posts.last().unwrap(),
        &attempts(6),
        "nothing after the limit"
    );
    let resumed = run(&app, DEFAULT_TOKEN, "github", None).await;
    assert_eq!(resumed["errors"], 0, "{resumed}");
    let posts = &fake.posts()[posts.len()..];
    assert!(
        posts.contains(&attempts(6)) && posts.contains(&attempts(5)),
        "{posts:?}"
    );
}

fn paddle_headers(body: &str) -> Vec<(String, String)> {
    let ts = signing::now();
    let mac = signing::hmac_sha256(PADDLE_SECRET.as_bytes(), format!("{ts}:{body}").as_bytes());
    vec![(
        "Paddle-Signature".into(),
        format!("ts={ts};h1={}", hex::encode(mac)),
    )]
}

async fn paddle_failed_notifications_are_replayed_unless_stored(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start(API_KEY).await;
    let app = app_with_fake(backend, &sink, &fake).await;
    let body = r#"{"event_id":"evt_p_stored","event_type":"transaction.completed","notification_id":"ntf_1","data":{}}"#;
    let r = app
        .post_webhook("paddle", &paddle_headers(body), body.to_owned())
        .await;
    assert_eq!(r.status(), 200);
    fake.add_paddle_failed("ntf_1", "evt_p_stored");
    fake.add_paddle_failed("ntf_2", "evt_p_lost");

    let record = run(&app, DEFAULT_TOKEN, "paddle", None).await;
    assert_eq!(counts(&record), [2, 1, 1, 0], "{record}");
    assert_eq!(fake.posts(), ["/notifications/ntf_2/replay"]);
    let listing = &fake.requests()[0];
    assert_eq!(listing.path, "/notifications");
    assert_eq!(listing.query["status"], "failed");
    assert!(listing.query.contains_key("from"));
    assert_eq!(
        listing.headers["authorization"],
        format!("Bearer {API_KEY}")
    );
}

async fn one_run_at_a_time_per_source(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start(API_KEY).await;
    let app = app_with_fake(backend, &sink, &fake).await;
    // Another process holds the lease: this one's run is refused without calling Stripe.
    let now = chrono::Utc::now();
    let token = uuid::Uuid::now_v7();
    let held = app
        .store
        .claim_reconciliation(
            "stripe",
            token,
            now,
            now + chrono::TimeDelta::minutes(5),
            false,
        )
        .await
        .unwrap();
    assert!(held.is_some());
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/sources/stripe/reconciliations",
            None,
            None,
        )
        .await;
    assert_eq!(error_code(r).await, (409, "conflict".into()));
    assert!(fake.requests().is_empty());
    // The GitHub source's lease is its own.
    run(&app, DEFAULT_TOKEN, "github", None).await;
    app.store
        .release_reconciliation("stripe", token)
        .await
        .unwrap();
    run(&app, ACME_TOKEN, "stripe", None).await;
    // An expired lease (a crashed process) is taken over.
    let later = chrono::Utc::now();
    let crashed = app
        .store
        .claim_reconciliation("stripe", uuid::Uuid::now_v7(), later, later, false)
        .await
        .unwrap();
    assert!(crashed.is_some());
    run(&app, ACME_TOKEN, "stripe", None).await;
}

async fn the_console_shows_a_sources_runs(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start(API_KEY).await;
    let app = app_with_fake(backend, &sink, &fake).await;
    fake.add_stripe_event("evt_console", "invoice.paid");
    run(&app, ACME_TOKEN, "stripe", None).await;
    let session = crate::support::console::login(&app, ACME_TOKEN).await;
    let get = |path: &str| {
        crate::support::console::no_redirects()
            .get(app.url(path))
            .header("cookie", &session)
            .send()
    };
    let sources = get("/console/sources").await.unwrap().text().await.unwrap();
    assert!(sources.contains(r#"href="/console/sources/stripe/reconciliations""#));
    let r = get("/console/sources/stripe/reconciliations")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let page = r.text().await.unwrap();
    assert!(page.contains("Reconciliation of stripe"), "{page}");
    assert!(page.contains(r#"<td class="recovered">1</td>"#), "{page}");
    assert!(!page.contains(API_KEY));
    // Another tenant's source is not found.
    let r = get("/console/sources/github/reconciliations")
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

async fn the_schedule_runs_each_source_once_per_interval(backend: Backend) {
    let sink = Sink::start().await;
    let fake = FakeProviders::start(API_KEY).await;
    let app = app_with_fake(backend, &sink, &fake).await;
    fake.add_stripe_event("evt_scheduled", "invoice.paid");
    // Two processes' schedules over one database: the lease and the due time make one run
    // per source per interval (10 minutes by default) between them.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let reconciler = hookgate::reconcile::ProviderReconciler::new(
            app.store.clone(),
            app.config.clone(),
            app.batcher.clone(),
            app.metrics.clone(),
        );
        tasks.push(tokio::spawn(reconciler.run_on_schedule(stopped.clone())));
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let mut ran = 0;
        for (source, token) in [
            ("stripe", ACME_TOKEN),
            ("github", DEFAULT_TOKEN),
            ("paddle", DEFAULT_TOKEN),
        ] {
            let runs = app
                .admin_json(token, &format!("/sources/{source}/reconciliations"))
                .await;
            ran += runs["data"].as_array().unwrap().len();
        }
        if ran >= 3 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A second round of both schedules (their tick is 30 s at this interval) would find
    // nothing due; stop them and count.
    stop.send(true).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let runs = app
        .admin_json(ACME_TOKEN, "/sources/stripe/reconciliations")
        .await;
    let runs = runs["data"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["run_by"], "schedule");
    assert_eq!(runs[0]["recovered"], 1);
    let listings = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/events")
        .count();
    assert_eq!(listings, 1);
}
