//! Routes (docs/ROUTING.md): jobs only for the routes an event matches, decided at ingest in
//! the event's transaction; an event no route matches is stored and shown as such; a delay
//! holds a job back; a replay routes again; the reconciler routes again what another
//! configuration routed.

use chrono::{Duration, Utc};
use hookgate::config::{RouteSettings, Settings};
use hookgate::domain::EventId;
use reqwest::Method;
use serde_json::json;

use crate::both_backends;
use crate::support::console::login;
use crate::support::sink::Sink;
use crate::support::{signing, spawn_app_with_sink, Backend, TestApp, ACME_TOKEN, STRIPE_SECRET};

both_backends!(
    jobs_are_created_only_for_the_routes_an_event_matches,
    an_event_no_route_matches_is_stored_answered_and_shown,
    a_delayed_route_is_due_no_earlier_than_its_delay,
    a_replay_routes_again_unless_destinations_are_named,
    the_reconciler_routes_again_what_another_configuration_routed,
);

fn route(destination: &str) -> RouteSettings {
    RouteSettings {
        destination: destination.into(),
        event_types: None,
        body: None,
        match_headers: None,
        delay: None,
        ordering_key: None,
        on_dead_letter: None,
    }
}

/// `stripe` routes invoices of at least 100 to billing, and to audit whatever succeeded or
/// came with `X-Tier: gold`.
fn filtered_routes(settings: &mut Settings) {
    let stripe = &mut settings.sources[0];
    stripe.destinations.clear();
    stripe.routes = vec![
        RouteSettings {
            event_types: Some(vec!["invoice.*".into()]),
            body: Some(json!({"data": {"object": {"amount": {"$gte": 100}}}})),
            ..route("billing")
        },
        RouteSettings {
            event_types: Some(vec!["*.succeeded".into()]),
            ..route("audit")
        },
        RouteSettings {
            match_headers: Some(json!({"X-Tier": "gold"})),
            ..route("audit")
        },
    ];
}

fn body(id: &str, event_type: &str, amount: i64) -> String {
    json!({"id": id, "type": event_type, "data": {"object": {"amount": amount}}}).to_string()
}

/// Posts a signed Stripe event with extra headers; returns its id.
async fn post(app: &TestApp, body: &str, extra: &[(&str, &str)]) -> EventId {
    let mut headers = signing::stripe_headers(STRIPE_SECRET, signing::now(), body.as_bytes());
    headers.extend(extra.iter().map(|(n, v)| ((*n).into(), (*v).into())));
    let r = app.post_webhook("stripe", &headers, body.to_owned()).await;
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = r.json().await.unwrap();
    EventId::parse(json["id"].as_str().unwrap()).unwrap()
}

async fn destinations_of(app: &TestApp, event: EventId) -> Vec<String> {
    let mut d: Vec<String> = app
        .store
        .jobs_for_event(event)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.destination)
        .collect();
    d.sort();
    d
}

async fn jobs_are_created_only_for_the_routes_an_event_matches(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, filtered_routes).await;
    let big = post(&app, &body("evt_big", "invoice.paid", 150), &[]).await;
    let small = post(&app, &body("evt_small", "invoice.paid", 50), &[]).await;
    let ok = post(&app, &body("evt_ok", "charge.succeeded", 150), &[]).await;
    let gold = post(
        &app,
        &body("evt_gold", "charge.failed", 1),
        &[("x-TIER", "gold")],
    )
    .await;
    let both = post(
        &app,
        &body("evt_both", "invoice.paid", 100),
        &[("X-Tier", "gold")],
    )
    .await;
    assert_eq!(destinations_of(&app, big).await, ["billing"]);
    assert!(destinations_of(&app, small).await.is_empty());
    assert_eq!(destinations_of(&app, ok).await, ["audit"]);
    assert_eq!(destinations_of(&app, gold).await, ["audit"]);
    assert_eq!(destinations_of(&app, both).await, ["audit", "billing"]);

    app.worker().run_once().await.unwrap();
    assert_eq!(sink.received("/billing").len(), 2);
    assert_eq!(sink.received("/audit").len(), 3);
}

async fn an_event_no_route_matches_is_stored_answered_and_shown(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, filtered_routes).await;
    let routed = post(&app, &body("evt_routed", "invoice.paid", 500), &[]).await;
    let unrouted = post(&app, &body("evt_unrouted", "customer.created", 0), &[]).await;
    let stored = app
        .store
        .get_event(unrouted)
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.provider_event_id, "evt_unrouted");

    let listed = app.admin_json(ACME_TOKEN, "/events?status=no_route").await;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [unrouted.to_string()]);
    let detail = app
        .admin_json(ACME_TOKEN, &format!("/events/{unrouted}"))
        .await;
    assert_eq!(detail["no_route_matched"], true, "{detail}");
    let detail = app
        .admin_json(ACME_TOKEN, &format!("/events/{routed}"))
        .await;
    assert_eq!(detail["no_route_matched"], false);

    let cookie = login(&app, ACME_TOKEN).await;
    let page = |id: EventId| {
        app.client
            .get(app.url(&format!("/console/events/{id}")))
            .header("cookie", &cookie)
            .send()
    };
    let html = page(unrouted).await.unwrap().text().await.unwrap();
    assert!(html.contains(r#"id="no-route""#), "{html}");
    let html = page(routed).await.unwrap().text().await.unwrap();
    assert!(!html.contains(r#"id="no-route""#));
}

async fn a_delayed_route_is_due_no_earlier_than_its_delay(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.sources[0].destinations = vec!["audit".into()];
        s.sources[0].routes = vec![RouteSettings {
            delay: Some("1h".into()),
            ..route("billing")
        }];
    })
    .await;
    let event = post(&app, &body("evt_later", "invoice.paid", 1), &[]).await;
    let received = app
        .store
        .get_event(event)
        .await
        .unwrap()
        .unwrap()
        .received_at;
    let billing = app.job(event, "billing").await;
    assert!(billing.next_attempt_at >= received + Duration::hours(1));
    assert!(app.job(event, "audit").await.next_attempt_at <= received + Duration::seconds(1));

    app.worker().run_once().await.unwrap();
    assert_eq!(sink.received("/audit").len(), 1);
    assert!(sink.received("/billing").is_empty(), "not due for an hour");
    let later = Utc::now() + Duration::minutes(61);
    app.worker().run_once_at(later).await.unwrap();
    assert_eq!(sink.received("/billing").len(), 1);
}

async fn a_replay_routes_again_unless_destinations_are_named(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, filtered_routes).await;
    let big = post(&app, &body("evt_r_big", "invoice.paid", 150), &[]).await;
    let small = post(&app, &body("evt_r_small", "invoice.paid", 1), &[]).await;

    let app = &app;
    let replay = |event: EventId, body: Option<&'static str>| async move {
        let path = format!("/events/{event}/replay");
        app.admin(Method::POST, ACME_TOKEN, &path, body, None).await
    };
    let r = replay(big, None).await;
    assert_eq!(r.status(), 202);
    let jobs: serde_json::Value = r.json().await.unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(jobs["jobs"][0]["destination"], "billing");

    let (status, code) = crate::support::error_code(replay(small, None).await).await;
    assert_eq!((status, code.as_str()), (422, "unprocessable"));
    let r = replay(small, Some(r#"{"destinations": ["audit"]}"#)).await;
    assert_eq!(r.status(), 202, "named destinations need no matching route");
    assert_eq!(destinations_of(app, small).await, ["audit"]);

    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            "/replay",
            Some(r#"{"source": "stripe"}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(
        destinations_of(app, big).await,
        ["billing", "billing", "billing"]
    );
    assert_eq!(
        destinations_of(app, small).await,
        ["audit"],
        "no route matches it"
    );
}

/// Events stored under another configuration's routes (a rolling change: the process that
/// took them had other routes) are routed again by the current routes, once.
async fn the_reconciler_routes_again_what_another_configuration_routed(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, filtered_routes).await;
    let (tenant, source) = (
        hookgate::domain::Name::parse("t", "acme").unwrap(),
        hookgate::domain::Name::parse("s", "stripe").unwrap(),
    );
    let mut stale = Vec::new();
    for (id, amount) in [("evt_old_big", 700), ("evt_old_small", 7)] {
        let pid = hookgate::domain::ProviderEventId::parse(id).unwrap();
        let text = body(id, "invoice.paid", amount);
        let outcome = app
            .store
            .insert_event(&hookgate::store::NewEvent {
                event_type: Some("invoice.paid"),
                content_type: Some("application/json"),
                route_digest: Some(app.config.sources["stripe"].routes.digest() ^ 1),
                ..crate::support::new_event(&tenant, &source, &pid, text.as_bytes())
            })
            .await
            .unwrap();
        let hookgate::store::InsertOutcome::Created(event) = outcome else {
            panic!("{outcome:?}")
        };
        stale.push(event);
    }
    let current = post(&app, &body("evt_current", "invoice.paid", 5), &[]).await;

    let report = app.reconciler().sweep().await.unwrap();
    assert_eq!(report.missing_jobs, 1);
    assert_eq!(destinations_of(&app, stale[0]).await, ["billing"]);
    assert!(destinations_of(&app, stale[1]).await.is_empty());
    assert!(destinations_of(&app, current).await.is_empty());
    let again = app.reconciler().sweep().await.unwrap();
    assert_eq!(again.missing_jobs, 0, "routed again once");
}
