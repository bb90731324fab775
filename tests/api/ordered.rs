//! Per-key ordered delivery end to end: `billing` orders its jobs on the body's
//! `/data/object/customer`; `audit` stays unordered. Workers run rounds on a moving clock,
//! so retries come due without waiting.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use hookgate::config::{RouteSettings, Settings};
use hookgate::queue::JobStatus;
use reqwest::Method;
use serde_json::json;

use crate::both_backends;
use crate::support::sink::{Answer, Sink};
use crate::support::{spawn_app_with_sink, Backend, TestApp, ACME_TOKEN};

both_backends!(
    each_key_arrives_in_order_with_no_gaps_through_random_failures,
    a_retrying_head_blocks_its_key_and_no_other,
    a_held_dead_letter_blocks_its_key_until_retried_or_discarded,
    a_skipped_dead_letter_lets_the_next_job_go,
    a_replay_joins_the_end_of_its_key_s_line,
    a_keyed_job_is_never_handed_off_at_ingest,
    the_key_is_shown_with_the_job_and_a_long_one_by_its_digest,
    a_running_worker_moves_down_a_line_without_waiting_for_its_poll,
);

fn ordered(on_dead_letter: &'static str) -> impl FnOnce(&mut Settings) {
    move |s: &mut Settings| {
        s.sources[0].destinations = vec!["audit".into()];
        s.sources[0].routes = vec![RouteSettings {
            destination: "billing".into(),
            event_types: None,
            body: None,
            match_headers: None,
            delay: None,
            ordering_key: Some("json:/data/object/customer".into()),
            on_dead_letter: Some(on_dead_letter.into()),
        }];
        let billing = s.destinations.iter_mut().find(|d| d.name == "billing");
        billing.unwrap().retry_schedule = vec!["1m".into(); 8];
    }
}

/// Posts one event of `customer` (none: unordered) carrying its item number `n`.
async fn post(
    app: &TestApp,
    id: &str,
    customer: Option<&str>,
    n: usize,
) -> hookgate::domain::EventId {
    let body = json!({"id": id, "type": "invoice.paid", "data": {"object": {"customer": customer, "n": n}}});
    let r = app.post_stripe(&body.to_string()).await;
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = r.json().await.unwrap();
    hookgate::domain::EventId::parse(json["id"].as_str().unwrap()).unwrap()
}

/// `(customer, n)` of every request `billing` received, in arrival order.
fn arrivals(sink: &Sink) -> Vec<(String, u64)> {
    sink.received("/billing")
        .iter()
        .map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            let o = &body["data"]["object"];
            let customer = o["customer"].as_str().unwrap_or("").to_owned();
            (customer, o["n"].as_u64().unwrap())
        })
        .collect()
}

/// Runs worker rounds, each an hour after the last, until no `billing` job is pending or
/// in progress (or `rounds` ran). Returns the clock reached.
async fn drain(
    app: &TestApp,
    events: &[hookgate::domain::EventId],
    rounds: usize,
) -> DateTime<Utc> {
    let worker = app.worker();
    let mut at = Utc::now();
    for _ in 0..rounds {
        worker.run_once_at(at).await.unwrap();
        let mut open = false;
        for e in events {
            let s = app.job(*e, "billing").await.status;
            open |= matches!(s, JobStatus::Pending | JobStatus::InProgress);
        }
        if !open {
            return at;
        }
        at += chrono::Duration::hours(1);
    }
    panic!("billing still has open jobs after {rounds} rounds");
}

/// A small deterministic generator (xorshift), so a failure can be replayed.
fn failures(seed: u64, n: usize) -> Vec<Answer> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Answer::status(if x % 10 < 4 { 500 } else { 200 })
        })
        .collect()
}

async fn each_key_arrives_in_order_with_no_gaps_through_random_failures(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/billing", &failures(0x9e37_79b9_7f4a_7c15, 400));
    let app = spawn_app_with_sink(backend, &sink, ordered("hold")).await;
    let keys = ["cus_a", "cus_b", "cus_c", "cus_d", "cus_e"];
    let mut events = Vec::new();
    for n in 0..8 {
        for k in keys {
            events.push(post(&app, &format!("evt_{k}_{n}"), Some(k), n).await);
        }
        events.push(post(&app, &format!("evt_none_{n}"), None, n).await);
    }
    drain(&app, &events, 200).await;

    let mut lines: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (customer, n) in arrivals(&sink) {
        lines.entry(customer).or_default().push(n);
    }
    for k in keys {
        let line = &lines[k];
        // Retries repeat an item; the next one comes only after it, and none is skipped.
        assert_eq!(line.first(), Some(&0), "{k}: {line:?}");
        assert!(
            line.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1),
            "{k} out of order or with a gap: {line:?}"
        );
        assert_eq!(line.last(), Some(&7), "{k}: {line:?}");
    }
    for e in &events {
        assert_eq!(app.job(*e, "billing").await.status, JobStatus::Succeeded);
    }
}

async fn a_retrying_head_blocks_its_key_and_no_other(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/billing", &[Answer::status(500)]);
    let app = spawn_app_with_sink(backend, &sink, ordered("hold")).await;
    let worker = app.worker();
    let a0 = post(&app, "evt_a0", Some("cus_a"), 0).await;
    worker.run_once().await.unwrap();
    assert_eq!(app.job(a0, "billing").await.status, JobStatus::Pending);

    let a1 = post(&app, "evt_a1", Some("cus_a"), 1).await;
    let b0 = post(&app, "evt_b0", Some("cus_b"), 0).await;
    let none = post(&app, "evt_x", None, 0).await;
    worker.run_once().await.unwrap();
    assert_eq!(app.job(a1, "billing").await.status, JobStatus::Pending);
    assert_eq!(app.job(b0, "billing").await.status, JobStatus::Succeeded);
    assert_eq!(app.job(none, "billing").await.status, JobStatus::Succeeded);
    assert_eq!(app.job(a1, "billing").await.attempts, 0, "never tried");

    drain(&app, &[a0, a1, b0, none], 10).await;
    let a: Vec<u64> = arrivals(&sink)
        .into_iter()
        .filter(|(c, _)| c == "cus_a")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(a, [0, 0, 1]);
}

/// `cus_a`'s first job fails both its attempts and becomes a dead letter.
async fn dead_head(app: &TestApp, sink: &Sink) -> [hookgate::domain::EventId; 3] {
    sink.script("/billing", &[Answer::status(500); 9]);
    let a0 = post(app, "evt_a0", Some("cus_a"), 0).await;
    let at = drain(app, &[a0], 20).await;
    assert_eq!(app.job(a0, "billing").await.status, JobStatus::Failed);
    let a1 = post(app, "evt_a1", Some("cus_a"), 1).await;
    let b0 = post(app, "evt_b0", Some("cus_b"), 0).await;
    app.worker().run_once_at(at).await.unwrap();
    [a0, a1, b0]
}

async fn a_held_dead_letter_blocks_its_key_until_retried_or_discarded(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, ordered("hold")).await;
    let [a0, a1, b0] = dead_head(&app, &sink).await;
    assert_eq!(app.job(b0, "billing").await.status, JobStatus::Succeeded);
    assert_eq!(app.job(a1, "billing").await.status, JobStatus::Pending);
    app.worker()
        .run_once_at(Utc::now() + chrono::Duration::days(1))
        .await
        .unwrap();
    assert_eq!(
        app.job(a1, "billing").await.attempts,
        0,
        "held behind the dead letter"
    );
    // The dead-letter list names the key it holds.
    let page = app
        .admin_json(ACME_TOKEN, "/dead-letters?destination=billing")
        .await;
    let held: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["ordering_key"].as_str().unwrap())
        .collect();
    assert_eq!(held, ["cus_a"]);

    // A retried dead letter goes first, then the line moves on.
    let dead = app.job(a0, "billing").await.id;
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/dead-letters/{dead}/retry"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    drain(&app, &[a0, a1], 10).await;
    let a: Vec<u64> = arrivals(&sink)
        .into_iter()
        .filter(|(c, _)| c == "cus_a")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        a.iter().filter(|&&n| n == 0).count(),
        10,
        "nine failures, one retry"
    );
    assert_eq!(a.last(), Some(&1));

    // A discarded dead letter lets its key go on.
    let [c0, c1] = {
        sink.script("/billing", &[Answer::status(500); 9]);
        let c0 = post(&app, "evt_c0", Some("cus_c"), 0).await;
        let at = drain(&app, &[c0], 20).await;
        let c1 = post(&app, "evt_c1", Some("cus_c"), 1).await;
        app.worker().run_once_at(at).await.unwrap();
        assert_eq!(app.job(c1, "billing").await.status, JobStatus::Pending);
        [c0, c1]
    };
    let dead = app.job(c0, "billing").await.id;
    let r = app
        .admin(
            Method::DELETE,
            ACME_TOKEN,
            &format!("/dead-letters/{dead}"),
            None,
            None,
        )
        .await;
    assert!(r.status().is_success(), "{}", r.status());
    drain(&app, &[c1], 5).await;
    assert_eq!(app.job(c1, "billing").await.status, JobStatus::Succeeded);
}

async fn a_skipped_dead_letter_lets_the_next_job_go(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, ordered("skip")).await;
    let [a0, a1, b0] = dead_head(&app, &sink).await;
    assert_eq!(app.job(a0, "billing").await.status, JobStatus::Failed);
    assert_eq!(app.job(a1, "billing").await.status, JobStatus::Succeeded);
    assert_eq!(app.job(b0, "billing").await.status, JobStatus::Succeeded);
}

async fn a_replay_joins_the_end_of_its_key_s_line(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/billing", &[Answer::status(500)]);
    let app = spawn_app_with_sink(backend, &sink, ordered("hold")).await;
    let events = [
        post(&app, "evt_a0", Some("cus_a"), 0).await,
        post(&app, "evt_a1", Some("cus_a"), 1).await,
        post(&app, "evt_a2", Some("cus_a"), 2).await,
    ];
    let r = app
        .admin(
            Method::POST,
            ACME_TOKEN,
            &format!("/events/{}/replay", events[0]),
            Some(r#"{"destinations":["billing"]}"#),
            None,
        )
        .await;
    assert_eq!(r.status(), 202);
    let worker = app.worker();
    for hour in 0..10 {
        let at = Utc::now() + chrono::Duration::hours(hour);
        worker.run_once_at(at).await.unwrap();
    }
    // The first attempt fails and is retried; the replay waits behind the whole line.
    let a: Vec<u64> = arrivals(&sink).into_iter().map(|(_, n)| n).collect();
    assert_eq!(a, [0, 0, 1, 2, 0]);
}

/// The hand-off claims a new job in the ingest transaction, past the claim's ordering rule:
/// a keyed job goes through the queue instead, while the unordered one beside it is handed
/// off as before.
async fn a_keyed_job_is_never_handed_off_at_ingest(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, ordered("hold")).await;
    let worker = app.worker();
    app.batcher.hand_off_to(worker.handoff());
    worker.run_once().await.unwrap();

    let a0 = post(&app, "evt_a0", Some("cus_a"), 0).await;
    let billing = app.job(a0, "billing").await;
    assert_eq!((billing.status, billing.attempts), (JobStatus::Pending, 0));
    let audit = app.job(a0, "audit").await;
    assert_eq!((audit.status, audit.attempts), (JobStatus::InProgress, 1));
    let none = post(&app, "evt_x", None, 0).await;
    assert_eq!(app.job(none, "billing").await.status, JobStatus::InProgress);
    worker.run_once().await.unwrap();
    assert_eq!(app.job(a0, "billing").await.status, JobStatus::Succeeded);
}

async fn the_key_is_shown_with_the_job_and_a_long_one_by_its_digest(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, ordered("hold")).await;
    let short = post(&app, "evt_short", Some("cus_a"), 0).await;
    let long_key = "c".repeat(1_000);
    let long = post(&app, "evt_long", Some(&long_key), 0).await;
    let none = post(&app, "evt_none", None, 0).await;

    let detail = app
        .admin_json(ACME_TOKEN, &format!("/events/{short}"))
        .await;
    let keys: Vec<(&str, Option<&str>)> = detail["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["destination"].as_str().unwrap(),
                j["ordering_key"].as_str(),
            )
        })
        .collect();
    assert_eq!(keys, [("audit", None), ("billing", Some("cus_a"))]);
    let stored = app.job(long, "billing").await.ordering_key.unwrap();
    assert_eq!(stored, hookgate::routing::bounded_key(&long_key));
    assert!(
        stored.starts_with("sha256:") && stored.len() == 71,
        "{stored}"
    );
    assert_eq!(app.job(none, "billing").await.ordering_key, None);
    drain(&app, &[short, long, none], 5).await;
}

/// Once a key's head is delivered, the next job is claimable, but no new job (no wake-up)
/// says so: the worker claims again when the outcome is written, not at its next poll.
async fn a_running_worker_moves_down_a_line_without_waiting_for_its_poll(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        ordered("hold")(s);
        s.worker.poll_interval = "1h".into();
    })
    .await;
    let mut events = Vec::new();
    for n in 0..6 {
        events.push(post(&app, &format!("evt_a{n}"), Some("cus_a"), n).await);
    }
    let worker = app.start_worker();
    let received = sink
        .wait_for("/billing", 6, std::time::Duration::from_secs(20))
        .await;
    worker.stop().await;
    assert_eq!(received.len(), 6, "the line stalled until the poll");
    let a: Vec<u64> = arrivals(&sink).into_iter().map(|(_, n)| n).collect();
    assert_eq!(a, [0, 1, 2, 3, 4, 5]);
}
