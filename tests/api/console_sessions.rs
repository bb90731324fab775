//! Console sessions rest on a random id stored (hashed) in the database: a cookie built from
//! the configuration is refused, logout ends the session server-side, two logins get two
//! sessions, and a session ends at its idle and absolute limits.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::both_backends;
use crate::support::console::{csrf_of, login, no_redirects};
use crate::support::raw::RawConn;
use crate::support::{spawn_app, Backend, TestApp, ACME_TOKEN, DEFAULT_TOKEN};

both_backends!(
    a_cookie_built_from_the_configuration_is_refused,
    logout_ends_the_session_and_its_csrf_token,
    two_logins_at_once_get_two_sessions,
    the_database_holds_only_a_digest_of_the_session_id,
    an_idle_or_old_session_is_refused,
);

/// GET a console page with `cookie`: its status and body.
async fn page(app: &TestApp, cookie: &str, path: &str) -> (u16, String) {
    let r = no_redirects()
        .get(app.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn a_cookie_built_from_the_configuration_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    // What anyone who can read the configuration could compute: a key from the configured
    // token digests, and a MAC over a tenant and an expiry of their choosing.
    let mut key = Sha256::new();
    key.update(b"hookgate console session key v1");
    for t in &app.config.admin.tokens {
        key.update(t.tenant.as_str().as_bytes());
        key.update(b"\0");
        key.update(t.sha256);
    }
    let key: [u8; 32] = key.finalize().into();
    let expires = (chrono::Utc::now().timestamp() + 3600).to_string();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    for part in [&b"session"[..], b"acme", expires.as_bytes()] {
        mac.update(part);
        mac.update(b"\0");
    }
    let forged = format!(
        "hookgate_session=acme.{expires}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    );
    let (status, _) = page(&app, &forged, "/console/events").await;
    assert_eq!(status, 303, "sent to log in");
    // Nor does a well-formed id that was never issued.
    let guessed = format!("hookgate_session={}", URL_SAFE_NO_PAD.encode([7u8; 32]));
    assert_eq!(page(&app, &guessed, "/console/events").await.0, 303);
    // A real login works.
    let session = login(&app, ACME_TOKEN).await;
    assert_eq!(page(&app, &session, "/console/events").await.0, 200);
}

async fn logout_ends_the_session_and_its_csrf_token(backend: Backend) {
    let app = spawn_app(backend).await;
    let event = app.ingest_stripe("evt_logout").await;
    let session = login(&app, ACME_TOKEN).await;
    let (status, html) = page(&app, &session, &format!("/console/events/{event}")).await;
    assert_eq!(status, 200);
    let csrf = csrf_of(&html);
    let client = no_redirects();
    let r = client
        .post(app.url("/console/logout"))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    // The old cookie, replayed after logout, is no session; its CSRF token does nothing.
    assert_eq!(page(&app, &session, "/console/events").await.0, 303);
    let r = client
        .post(app.url(&format!("/console/events/{event}/replay")))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "sent to log in");
    assert_eq!(
        app.store.jobs_for_event(event).await.unwrap().len(),
        2,
        "no replay"
    );
}

async fn two_logins_at_once_get_two_sessions(backend: Backend) {
    let app = spawn_app(backend).await;
    let (a, b) = tokio::join!(login(&app, ACME_TOKEN), login(&app, ACME_TOKEN));
    assert_ne!(a, b);
    let other = login(&app, DEFAULT_TOKEN).await;
    // Logging one out leaves the others.
    let (_, html) = page(&app, &a, "/console/events").await;
    let r = no_redirects()
        .post(app.url("/console/logout"))
        .header("cookie", &a)
        .form(&[("csrf", csrf_of(&html).as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(page(&app, &a, "/console/events").await.0, 303);
    assert_eq!(page(&app, &b, "/console/events").await.0, 200);
    let (status, html) = page(&app, &other, "/console/events").await;
    assert_eq!(status, 200);
    assert!(html.contains("default"), "the other tenant's session");
}

fn session_id(cookie: &str) -> Vec<u8> {
    let value = cookie.split_once('=').unwrap().1;
    URL_SAFE_NO_PAD.decode(value).expect("a session id")
}

async fn the_database_holds_only_a_digest_of_the_session_id(backend: Backend) {
    let app = spawn_app(backend).await;
    let session = login(&app, ACME_TOKEN).await;
    let id = session_id(&session);
    assert_eq!(id.len(), 32, "256 bits");
    let digest: [u8; 32] = Sha256::digest(&id).into();
    let stored = app.store.find_session(&digest).await.unwrap().unwrap();
    assert_eq!(stored.tenant, "acme");
    assert!(stored.expires_at - stored.created_at <= 8 * 3600);
    let as_key: [u8; 32] = id.clone().try_into().unwrap();
    assert!(
        app.store.find_session(&as_key).await.unwrap().is_none(),
        "the id itself is not stored"
    );
}

async fn an_idle_or_old_session_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let idle = login(&app, ACME_TOKEN).await;
    let old = login(&app, ACME_TOKEN).await;
    let fresh = login(&app, ACME_TOKEN).await;
    let mut conn = RawConn::open(&app).await;
    let hex_digest = |cookie: &str| hex::encode(Sha256::digest(session_id(cookie)));
    let literal = |cookie: &str| match backend {
        Backend::Sqlite => format!("X'{}'", hex_digest(cookie)),
        Backend::Postgres => format!("'\\x{}'::bytea", hex_digest(cookie)),
    };
    // Idle for 31 minutes.
    conn.exec(&format!(
        "UPDATE console_sessions SET seen_at = seen_at - 1860 WHERE id_sha256 = {}",
        literal(&idle)
    ))
    .await;
    // Logged in 8 hours ago and active a minute ago.
    conn.exec(&format!(
        "UPDATE console_sessions SET created_at = created_at - 28800, \
         expires_at = expires_at - 28800, seen_at = seen_at - 60 WHERE id_sha256 = {}",
        literal(&old)
    ))
    .await;
    assert_eq!(page(&app, &idle, "/console/events").await.0, 303);
    assert_eq!(page(&app, &old, "/console/events").await.0, 303);
    assert_eq!(page(&app, &fresh, "/console/events").await.0, 200);
    // The reconciler's sweep removes ended sessions' rows.
    let ended_fresh = login(&app, ACME_TOKEN).await;
    conn.exec(&format!(
        "UPDATE console_sessions SET seen_at = seen_at - 3600 WHERE id_sha256 = {}",
        literal(&ended_fresh)
    ))
    .await;
    let report = app.reconciler().sweep().await.unwrap();
    assert_eq!(report.expired_sessions, 1);
    assert_eq!(page(&app, &fresh, "/console/events").await.0, 200);
}
