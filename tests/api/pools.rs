//! Two worker pools with their own connection pools on one database, as two processes
//! would run: every job is delivered exactly once while leases hold.

use std::collections::HashMap;
use std::sync::Arc;

use crate::both_backends;
use crate::support::sink::Sink;
use crate::support::{spawn_app_with_sink, Backend};
use hookgate::domain::{Name, ProviderEventId};
use hookgate::queue::JobStatus;
use hookgate::store::{NewEvent, Store};
use hookgate::worker::Worker;

both_backends!(two_pools_deliver_a_thousand_jobs_exactly_once);

const JOBS: usize = 1000;

async fn two_pools_deliver_a_thousand_jobs_exactly_once(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |s| {
        s.worker.concurrency = 16;
        for d in &mut s.destinations {
            d.max_in_flight = 16;
        }
    })
    .await;
    let (tenant, source) = (
        Name::parse("t", "default").unwrap(),
        Name::parse("s", "github").unwrap(),
    );
    let audit = [Name::parse("d", "audit").unwrap()];
    for i in 0..JOBS {
        let id = ProviderEventId::parse(&format!("delivery-{i}")).unwrap();
        app.store
            .insert_event(&NewEvent {
                event_type: Some("push"),
                content_type: Some("application/json"),
                verified_scheme: "github",
                destinations: &audit,
                claims: &[],
                orderings: &[],
                ..crate::support::new_event(
                    &tenant,
                    &source,
                    &id,
                    format!(r#"{{"n":{i}}}"#).as_bytes(),
                )
            })
            .await
            .unwrap();
    }

    let pools: Vec<_> = (0..2)
        .map(|_| {
            let store = Store::connect(&app.config.database).unwrap();
            Arc::new(Worker::new(store, app.config.clone()))
        })
        .collect();
    let runs: Vec<_> = pools
        .iter()
        .map(|w| {
            let w = w.clone();
            tokio::spawn(async move {
                let mut claimed = 0;
                loop {
                    let n = w.run_once().await.unwrap();
                    if n == 0 {
                        return claimed;
                    }
                    claimed += n;
                }
            })
        })
        .collect();
    let mut per_pool = Vec::new();
    for r in runs {
        per_pool.push(r.await.unwrap());
    }
    // A pool that saw an empty queue while the other still held jobs stopped early; let
    // either finish anything left (there should be nothing).
    per_pool.push(pools[0].run_once().await.unwrap());

    assert_eq!(per_pool.iter().sum::<usize>(), JOBS, "{per_pool:?}");
    assert!(
        per_pool[0] > 0 && per_pool[1] > 0,
        "both pools worked: {per_pool:?}"
    );
    let received = sink.received("/audit");
    let mut per_id: HashMap<&str, usize> = HashMap::new();
    for r in &received {
        *per_id.entry(r.header("webhook-id")).or_default() += 1;
    }
    assert_eq!(per_id.len(), JOBS);
    let twice: Vec<_> = per_id.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(
        app.store.count_jobs(JobStatus::Succeeded).await.unwrap(),
        JOBS as i64
    );
}
