//! Group commit: requests waiting together share one transaction; dedupe stays exact inside
//! a batch, and a failed batch fails every request in it with 503.

use std::sync::Arc;
use std::time::Duration;

use crate::both_backends;
use crate::crash::RawConnHandle;
use crate::support::raw::RawConn;
use crate::support::{spawn_app, Backend, TestApp};

both_backends!(
    copies_in_one_batch_make_one_row_and_all_get_its_id,
    a_failed_batch_fails_every_request_with_503,
    a_row_the_database_refuses_fails_only_its_own_request,
);

/// Sends one Stripe event per id at once while the batcher is held, so that they all wait
/// and then go in one batch. Returns each answer's status and JSON.
pub(crate) async fn one_batch(
    app: &Arc<TestApp>,
    ids: &[&str],
) -> Vec<(u16, serde_json::Value, bool)> {
    let bodies: Vec<String> = ids
        .iter()
        .map(|id| format!(r#"{{"id":"{id}","type":"t"}}"#))
        .collect();
    one_batch_of(app, &bodies).await
}

/// As `one_batch`, with each Stripe event's whole body given.
async fn one_batch_of(
    app: &Arc<TestApp>,
    bodies: &[String],
) -> Vec<(u16, serde_json::Value, bool)> {
    let hold = app.batcher.hold().await;
    let before = app.batcher.submitted();
    let batches = app.batcher.batches();
    let tasks: Vec<_> = bodies
        .iter()
        .map(|body| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(async move {
                let r = app.post_stripe(&body).await;
                let status = r.status().as_u16();
                let retry_after = r.headers().contains_key("retry-after");
                (
                    status,
                    r.json::<serde_json::Value>().await.unwrap(),
                    retry_after,
                )
            })
        })
        .collect();
    let all = app.batcher.submitted_at_least(before + bodies.len() as u64);
    tokio::time::timeout(Duration::from_secs(10), all)
        .await
        .expect("requests did not arrive");
    drop(hold);
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(app.batcher.batches(), batches + 1, "all in a single batch");
    answers
}

async fn copies_in_one_batch_make_one_row_and_all_get_its_id(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let ids = ["evt_a", "evt_b", "evt_a", "evt_c", "evt_a"];
    let answers = one_batch(&app, &ids).await;
    assert!(answers.iter().all(|(s, _, _)| *s == 200), "{answers:?}");

    let copies: Vec<_> = ids
        .iter()
        .zip(&answers)
        .filter(|(id, _)| **id == "evt_a")
        .map(|(_, (_, json, _))| json)
        .collect();
    let fresh = copies.iter().filter(|j| j["duplicate"] == false).count();
    assert_eq!(fresh, 1, "exactly one copy created the row");
    assert!(
        copies.iter().all(|j| j["id"] == copies[0]["id"]),
        "{copies:?}"
    );
    assert_eq!(app.store.count_events().await.unwrap(), 3);
    let stored = app
        .store
        .find_event("stripe", "evt_a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.id.to_string(), copies[0]["id"].as_str().unwrap());
    assert_eq!(app.store.jobs_for_event(stored.id).await.unwrap().len(), 2);

    // And a later batch sees the stored row as a duplicate too. On PostgreSQL this batch
    // is first written with plain inserts, rejected whole by the unique index, and written
    // again with ON CONFLICT: the new event must still get one row and one job each.
    let again = one_batch(&app, &["evt_a", "evt_d", "evt_e"]).await;
    assert_eq!(again[0].1["duplicate"], true);
    assert_eq!(again[0].1["id"], copies[0]["id"]);
    for fresh in &again[1..] {
        assert_eq!(fresh.1["duplicate"], false, "{again:?}");
    }
    // The next batches (ON CONFLICT first, then plain inserts again) store theirs once.
    let batches = [
        (["evt_f", "evt_e"], [false, true]),
        (["evt_g", "evt_h"], [false, false]),
        (["evt_i", "evt_g"], [false, true]),
    ];
    for (ids, duplicate) in batches {
        let answers = one_batch(&app, &ids).await;
        let seen: Vec<bool> = answers.iter().map(|a| a.1["duplicate"] == true).collect();
        assert_eq!(seen, duplicate, "{ids:?}: {answers:?}");
    }
    assert_eq!(app.store.count_events().await.unwrap(), 9);
    for id in ["evt_d", "evt_e", "evt_f", "evt_g", "evt_h", "evt_i"] {
        let stored = app.store.find_event("stripe", id).await.unwrap().unwrap();
        let jobs = app.store.jobs_for_event(stored.id).await.unwrap();
        assert_eq!(jobs.len(), 2, "{id}: one job per destination");
    }
}

async fn a_failed_batch_fails_every_request_with_503(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let fault = RawConnHandle::open(&app).await;
    fault.install_job_insert_failure(backend).await;
    let answers = one_batch(&app, &["evt_x", "evt_y", "evt_x", "evt_z"]).await;
    for (status, json, retry_after) in &answers {
        assert_eq!(*status, 503, "{json}");
        assert_eq!(json["error"]["code"], "store_unavailable");
        assert!(retry_after);
    }
    assert_eq!(
        app.store.count_events().await.unwrap(),
        0,
        "nothing half-written"
    );

    fault.remove_job_insert_failure(backend).await;
    let retried = one_batch(&app, &["evt_x", "evt_y", "evt_z"]).await;
    assert!(retried
        .iter()
        .all(|(s, j, _)| *s == 200 && j["duplicate"] == false));
}

/// A trigger refuses one row of a batch for its data, as the database would refuse a value
/// it cannot hold: only that request fails, and the rest of its batch is stored.
async fn a_row_the_database_refuses_fails_only_its_own_request(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let mut conn = RawConn::open(&app).await;
    match backend {
        Backend::Sqlite => {
            conn.exec(
                "CREATE TRIGGER poison BEFORE INSERT ON events WHEN NEW.event_type = 'poison' \
                 BEGIN SELECT RAISE(ABORT, 'refused row'); END",
            )
            .await
        }
        Backend::Postgres => {
            conn.exec(
                "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN IF NEW.event_type = 'poison' THEN \
                 RAISE EXCEPTION 'refused row' USING ERRCODE = '22023'; END IF; \
                 RETURN NEW; END $$; \
                 CREATE TRIGGER poison BEFORE INSERT ON events \
                 FOR EACH ROW EXECUTE FUNCTION poison()",
            )
            .await
        }
    }
    let types = ["t", "t", "poison", "t", "t", "t", "poison", "t", "t"];
    let bodies: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, t)| format!(r#"{{"id":"evt_mix_{i}","type":"{t}"}}"#))
        .collect();
    let answers = one_batch_of(&app, &bodies).await;
    for (t, (status, json, retry_after)) in types.iter().zip(&answers) {
        if *t == "poison" {
            assert_eq!(*status, 503, "{json}");
            assert!(retry_after);
        } else {
            assert_eq!(*status, 200, "{json}");
            assert_eq!(json["duplicate"], false);
        }
    }
    assert_eq!(app.store.count_events().await.unwrap(), 7);
    let stored = app
        .store
        .find_event("stripe", "evt_mix_3")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        app.store.jobs_for_event(stored.id).await.unwrap().len(),
        2,
        "each stored event has its jobs"
    );
}
