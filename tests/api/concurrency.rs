//! Dedupe is decided by the database's UNIQUE constraint, whatever the interleaving.

use std::collections::HashSet;

use crate::both_backends;
use crate::support::{spawn_app, Backend};
use hookgate::domain::EventId;

both_backends!(fifty_concurrent_copies_make_one_event_and_one_job_per_destination);

async fn fifty_concurrent_copies_make_one_event_and_one_job_per_destination(backend: Backend) {
    let app = std::sync::Arc::new(spawn_app(backend).await);
    let body = r#"{"id":"evt_race","type":"charge.succeeded"}"#;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let r = app.post_stripe(body).await;
                assert_eq!(r.status(), 200);
                let json: serde_json::Value = r.json().await.unwrap();
                (
                    json["id"].as_str().unwrap().to_owned(),
                    json["duplicate"].as_bool().unwrap(),
                )
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }

    let ids: HashSet<_> = answers.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids.len(), 1, "every copy answers with the same id: {ids:?}");
    let fresh = answers.iter().filter(|(_, dup)| !dup).count();
    assert_eq!(fresh, 1, "exactly one request created the event");

    assert_eq!(app.store.count_events().await.unwrap(), 1);
    let id = EventId::parse(ids.iter().next().unwrap()).unwrap();
    let jobs = app.store.jobs_for_event(id).await.unwrap();
    let mut destinations: Vec<_> = jobs.iter().map(|j| j.destination.clone()).collect();
    destinations.sort();
    assert_eq!(destinations, ["audit", "billing"]);
}
