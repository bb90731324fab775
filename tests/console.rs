//! The web console in a real browser: headless Chromium driven over WebDriver. It logs in,
//! finds an event, opens it, retries a dead letter whose destination has recovered, and sees
//! it succeed. It also saves a screenshot: to the test's scratch directory, or to
//! docs/console.png (the README's picture) with `HOOKGATE_UPDATE_SCREENSHOT=1`, so that a
//! test run leaves the checkout as it found it. Every test runs once per store
//! (`both_backends!`).

use hookgate_testkit as support;
use hookgate_testkit::both_backends;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use support::console::{csrf_of, first_cookie, http_login, no_redirects};
use support::sink::{Answer, Sink};
use support::{spawn_app_with_sink, Backend, ACME_TOKEN};

both_backends!(
    an_operator_logs_in_finds_an_event_and_retries_a_dead_letter,
    console_forms_need_the_session_and_its_csrf_token,
    dead_letters_can_be_discarded_in_bulk,
    a_dead_letter_can_be_discarded_alone,
    the_event_page_names_the_secret_that_verified,
    an_operator_pauses_and_resumes_a_destination,
    the_undelivered_page_lists_and_retries,
    the_quarantine_page_lists_verifies_and_discards,
);

struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromedriver() -> (Driver, u16) {
    let which = |name: &str| {
        Command::new("which")
            .arg(name)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let driver = which("chromedriver").unwrap_or_else(|| {
        panic!("chromedriver is not installed: apt-get install chromium chromium-driver (.ci/run does this)")
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (Driver(child), port)
}

async fn browser(port: u16) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut caps = serde_json::Map::new();
    let profile = tempfile::tempdir().unwrap().keep();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     "--window-size=1280,900",
                     format!("--user-data-dir={}", profile.display())]
        }),
    );
    ClientBuilder::rustls()
        .expect("rustls connector")
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a WebDriver session starts")
}

/// The text of the first element matching `css`, waiting for it: a click does not wait for
/// the page it navigates to.
async fn text_of(c: &Client, css: &str) -> String {
    c.wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Waits until the element at `css` contains `wanted`. After a click, the element may still be
/// the previous page's (a notice of the previous action) or go stale as the new page loads,
/// so it is looked up again until the new page shows the text.
async fn wait_for_text(c: &Client, css: &str, wanted: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(element) = c.find(Locator::Css(css)).await {
            if element.text().await.is_ok_and(|t| t.contains(wanted)) {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{css} never showed {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A gateway on `backend` whose `billing` destination answers 410 to everything, so its jobs
/// become dead letters on their first attempt. The sink lives as long as the returned value.
async fn app_where_billing_is_gone(backend: Backend) -> (Sink, support::TestApp) {
    let sink = Sink::start().await;
    sink.always("/billing", Answer::status(410));
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    (sink, app)
}

async fn an_operator_logs_in_finds_an_event_and_retries_a_dead_letter(backend: Backend) {
    let (sink, app) = app_where_billing_is_gone(backend).await;
    let event = app.ingest_stripe("evt_console").await;
    app.worker().run_once().await.unwrap();
    let job = app.job(event, "billing").await;
    assert_eq!(
        job.status,
        hookgate::queue::JobStatus::Failed,
        "a dead letter"
    );
    sink.always("/billing", Answer::status(200)); // the destination recovers

    let (_driver, port) = chromedriver();
    let c = browser(port).await;
    let result = async {
        // Not logged in: sent to the login page; a wrong token is refused.
        c.goto(&app.url("/console/events")).await?;
        assert!(c.current_url().await?.path().ends_with("/console/login"));
        c.find(Locator::Id("token"))
            .await?
            .send_keys("not-a-token")
            .await?;
        c.find(Locator::Id("login")).await?.click().await?;
        assert!(text_of(&c, "#error").await.contains("not valid"));
        c.goto(&app.url("/console/login")).await?;
        c.find(Locator::Id("token"))
            .await?
            .send_keys(ACME_TOKEN)
            .await?;
        c.find(Locator::Id("login")).await?.click().await?;

        // Find the event and open it.
        let events = text_of(&c, "#events").await;
        assert!(c.current_url().await?.path().ends_with("/console/events"));
        assert!(events.contains("evt_console"), "{events}");
        c.find(Locator::LinkText("evt_console"))
            .await?
            .click()
            .await?;
        let body = text_of(&c, "#body").await;
        assert!(
            body.contains(r#""id": "evt_console""#),
            "pretty JSON: {body}"
        );
        assert!(text_of(&c, "#headers").await.contains("stripe-signature"));
        let page = text_of(&c, "main").await;
        assert!(page.contains("410"), "the failed attempt is shown");

        // Retry the dead letter.
        c.goto(&app.url("/console/dead-letters")).await?;
        assert!(text_of(&c, "#dead-letters").await.contains("evt_console"));
        let png = c.screenshot().await?;
        // The README's picture is SQLite's; each store's run also keeps its own.
        let path = if backend == Backend::Sqlite
            && std::env::var_os("HOOKGATE_UPDATE_SCREENSHOT").is_some()
        {
            concat!(env!("CARGO_MANIFEST_DIR"), "/docs/console.png").to_owned()
        } else {
            format!("{}/console-{backend:?}.png", env!("CARGO_TARGET_TMPDIR"))
        };
        std::fs::write(path, png).unwrap();
        c.wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css("button.retry"))
            .await?
            .click()
            .await?;
        wait_for_text(&c, "#notice", "retried").await;
        assert!(text_of(&c, "#empty").await.contains("No dead letters"));
        Ok::<_, fantoccini::error::CmdError>(())
    }
    .await;
    if let Err(e) = result {
        let _ = c.close().await;
        panic!("browser step failed: {e}");
    }

    // The worker delivers it; the event page shows the success.
    app.worker().run_once().await.unwrap();
    assert_eq!(
        app.job(event, "billing").await.status,
        hookgate::queue::JobStatus::Succeeded
    );
    c.goto(&app.url(&format!("/console/events/{event}")))
        .await
        .unwrap();
    let page = text_of(&c, "main").await;
    assert!(page.contains("succeeded"), "{page}");
    c.close().await.unwrap();
}

async fn console_forms_need_the_session_and_its_csrf_token(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let event = app.ingest_stripe("evt_csrf").await;
    let client = no_redirects();
    // No session: every page and form sends the visitor to log in.
    let r = client.get(app.url("/console/events")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let r = client
        .post(app.url(&format!("/console/events/{event}/replay")))
        .form(&[("csrf", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    // Log in (the login form is CSRF-protected too).
    let r = client.get(app.url("/console/login")).send().await.unwrap();
    let login_cookie = first_cookie(&r);
    let csrf = csrf_of(&r.text().await.unwrap());
    let r = client
        .post(app.url("/console/login"))
        .header("cookie", &login_cookie)
        .form(&[("csrf", "wrong"), ("token", ACME_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "login CSRF");
    let r = client
        .post(app.url("/console/login"))
        .header("cookie", &login_cookie)
        .form(&[("csrf", csrf.as_str()), ("token", ACME_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let session = set.split(';').next().unwrap().to_owned();
    // A form without the session's CSRF token is refused and changes nothing.
    let r = client
        .post(app.url(&format!("/console/events/{event}/replay")))
        .header("cookie", &session)
        .form(&[("csrf", "forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(app.store.jobs_for_event(event).await.unwrap().len(), 2);
    // With it, the replay happens.
    let page = client
        .get(app.url(&format!("/console/events/{event}")))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = csrf_of(&page);
    let r = client
        .post(app.url(&format!("/console/events/{event}/replay")))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(app.store.jobs_for_event(event).await.unwrap().len(), 4);
}

async fn dead_letters_can_be_discarded_in_bulk(backend: Backend) {
    let (_sink, app) = app_where_billing_is_gone(backend).await;
    for i in 0..3 {
        app.ingest_stripe(&format!("evt_bulk_discard_{i}")).await;
    }
    app.worker().run_once().await.unwrap();
    assert_eq!(
        app.store
            .count_jobs(hookgate::queue::JobStatus::Failed)
            .await
            .unwrap(),
        3
    );
    let (client, session, csrf) = http_login(&app, ACME_TOKEN).await;
    let r = client
        .post(app.url("/console/dead-letters/discard"))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str()), ("destination", "billing")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let page = client
        .get(app.url("/console/dead-letters"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("No dead letters."), "{page}");
    let listed = app.admin_json(ACME_TOKEN, "/dead-letters").await;
    assert!(
        listed["data"].as_array().unwrap().is_empty(),
        "out of the list, kept in history"
    );
    assert_eq!(
        app.store
            .count_jobs(hookgate::queue::JobStatus::Failed)
            .await
            .unwrap(),
        3
    );
}

async fn a_dead_letter_can_be_discarded_alone(backend: Backend) {
    let (_sink, app) = app_where_billing_is_gone(backend).await;
    let kept = app.ingest_stripe("evt_discard_kept").await;
    let gone = app.ingest_stripe("evt_discard_gone").await;
    app.worker().run_once().await.unwrap();
    let billing_job = |jobs: Vec<hookgate::store::StoredJob>| {
        jobs.into_iter()
            .find(|j| j.destination == "billing")
            .unwrap()
    };
    let job = billing_job(app.store.jobs_for_event(gone).await.unwrap());
    assert_eq!(job.status, hookgate::queue::JobStatus::Failed);
    let (client, session, csrf) = http_login(&app, ACME_TOKEN).await;
    let r = client
        .post(app.url(&format!("/console/dead-letters/{}/discard", job.id)))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(
        r.headers()["location"],
        "/console/dead-letters?done=discarded"
    );
    let listed = app.admin_json(ACME_TOKEN, "/dead-letters").await;
    let listed = listed["data"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let kept_job = billing_job(app.store.jobs_for_event(kept).await.unwrap());
    assert_eq!(listed[0]["id"], kept_job.id.to_string());
    let discarded = billing_job(app.store.jobs_for_event(gone).await.unwrap());
    assert_eq!(
        discarded.status,
        hookgate::queue::JobStatus::Failed,
        "not retried"
    );
    assert!(discarded.discarded_at.is_some());
}

async fn the_event_page_names_the_secret_that_verified(backend: Backend) {
    let (_sink, app) = app_where_billing_is_gone(backend).await;
    let body = r#"{"id":"evt_old_secret","type":"invoice.paid"}"#;
    let headers = support::signing::stripe_headers(
        support::STRIPE_OLD_SECRET,
        support::signing::now(),
        body.as_bytes(),
    );
    let r = app.post_webhook("stripe", &headers, body.to_owned()).await;
    let id = r.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (client, session, _) = http_login(&app, ACME_TOKEN).await;
    let page = client
        .get(app.url(&format!("/console/events/{id}")))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(r#"<strong id="verified-secret-index">1</strong>"#),
        "{page}"
    );
}

/// The destinations page: billing is paused with its button, its next job is held, and
/// resumed with the same button, after which the job is delivered.
async fn an_operator_pauses_and_resumes_a_destination(backend: Backend) {
    let sink = Sink::start().await;
    sink.script("/audit", &[Answer::status(500)]);
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    // Some history for the charts: deliveries, one failed, and a lag sample.
    app.ingest_stripes("evt_console_chart", 3).await;
    app.worker().run_once().await.unwrap();
    app.reconciler().sweep().await.unwrap();
    let before = sink.received("/billing").len();
    let (_driver, port) = chromedriver();
    let c = browser(port).await;
    let state = "#destination-billing td.state-";
    let button = "#destination-billing button";
    let result = async {
        c.goto(&app.url("/console/login")).await?;
        c.find(Locator::Id("token"))
            .await?
            .send_keys(ACME_TOKEN)
            .await?;
        c.find(Locator::Id("login")).await?.click().await?;
        text_of(&c, "#events").await;
        c.goto(&app.url("/console/destinations")).await?;
        assert_eq!(text_of(&c, &format!("{state}active")).await, "active");
        assert_eq!(text_of(&c, button).await, "Pause");
        c.find(Locator::Css(button)).await?.click().await?;
        wait_for_text(&c, "#notice", "paused").await;
        assert_eq!(text_of(&c, &format!("{state}paused")).await, "paused");
        assert_eq!(app.store.held_destinations().await.unwrap(), ["billing"]);

        app.ingest_stripe("evt_console_held").await;
        app.worker().run_once().await.unwrap();
        assert_eq!(sink.received("/billing").len(), before, "held while paused");
        c.refresh().await?;
        let row = text_of(&c, "#destination-billing").await;
        assert!(row.contains("paused 1"), "one job due: {row}");
        // The three deliveries, whichever minutes they fell in: the bars' values sum to 3.
        let html = c.source().await?;
        let chart = html
            .split(r#"id="deliveries-billing""#)
            .nth(1)
            .and_then(|rest| rest.split("</figure>").next())
            .unwrap_or_default();
        let delivered: f64 = chart
            .split("<title>")
            .skip(1)
            .filter_map(|t| t.split("</title>").next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(delivered, 3.0, "{chart}");
        let png = c.screenshot().await?;
        // The README's picture of this page is SQLite's.
        let path = if backend == Backend::Sqlite
            && std::env::var_os("HOOKGATE_UPDATE_SCREENSHOT").is_some()
        {
            concat!(env!("CARGO_MANIFEST_DIR"), "/docs/console-destinations.png").to_owned()
        } else {
            format!(
                "{}/console-destinations-{backend:?}.png",
                env!("CARGO_TARGET_TMPDIR")
            )
        };
        std::fs::write(path, png).unwrap();

        assert_eq!(text_of(&c, button).await, "Resume");
        c.find(Locator::Css(button)).await?.click().await?;
        wait_for_text(&c, "#notice", "resumed").await;
        assert_eq!(text_of(&c, &format!("{state}active")).await, "active");
        Ok::<_, fantoccini::error::CmdError>(())
    }
    .await;
    let _ = c.close().await;
    if let Err(e) = result {
        panic!("browser step failed: {e}");
    }
    assert!(app.store.held_destinations().await.unwrap().is_empty());
    app.worker().run_once().await.unwrap();
    assert_eq!(sink.received("/billing").len(), before + 1);
}

/// The undelivered page lists a dead letter with its reason, and its button retries it.
async fn the_undelivered_page_lists_and_retries(backend: Backend) {
    let (_sink, app) = app_where_billing_is_gone(backend).await;
    let event = app.ingest_stripe("evt_console_undelivered").await;
    app.worker().run_once().await.unwrap();
    let (client, session, _) = http_login(&app, ACME_TOKEN).await;
    let get = || {
        client
            .get(app.url("/console/undelivered?destination=billing"))
            .header("cookie", &session)
            .send()
    };
    let page = get().await.unwrap().text().await.unwrap();
    assert!(page.contains("evt_console_undelivered"), "{page}");
    assert!(page.contains(r#"class="reason-dead_letter""#), "{page}");
    let r = client
        .post(app.url("/console/undelivered/retry"))
        .header("cookie", &session)
        .form(&[
            ("csrf", csrf_of(&page).as_str()),
            ("destination", "billing"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let job = app.job(event, "billing").await;
    assert_eq!(
        (job.status, job.attempts),
        (hookgate::queue::JobStatus::Pending, 0)
    );
    let page = get().await.unwrap().text().await.unwrap();
    assert!(page.contains("Nothing is undelivered."), "{page}");
}

/// The quarantine page lists a refused request; "verify all" keeps it (still refused, checked
/// once more); its discard button removes it.
async fn the_quarantine_page_lists_verifies_and_discards(backend: Backend) {
    let sink = Sink::start().await;
    let app = spawn_app_with_sink(backend, &sink, |_| {}).await;
    let body = r#"{"id":"evt_console_quarantined","type":"invoice.paid"}"#;
    let headers = support::signing::stripe_headers(
        "whsec_rotated_at_stripe",
        support::signing::now(),
        body.as_bytes(),
    );
    assert_eq!(
        app.post_webhook("stripe", &headers, body).await.status(),
        401
    );
    app.quarantine.flush().await;
    let (client, session, _) = http_login(&app, ACME_TOKEN).await;
    let get = || {
        client
            .get(app.url("/console/quarantine?source=stripe"))
            .header("cookie", &session)
            .send()
    };
    let page = get().await.unwrap().text().await.unwrap();
    assert!(
        page.contains(r#"class="reason-invalid_signature""#),
        "{page}"
    );
    let r = client
        .post(app.url("/console/quarantine/verify"))
        .header("cookie", &session)
        .form(&[("csrf", csrf_of(&page).as_str()), ("source", "stripe")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let listed = app.admin_json(ACME_TOKEN, "/quarantine").await;
    assert_eq!(listed["data"][0]["checks"], 2, "verified once more");
    let id = listed["data"][0]["id"].as_str().unwrap().to_owned();
    let r = client
        .post(app.url(&format!("/console/quarantine/{id}/discard")))
        .header("cookie", &session)
        .form(&[("csrf", csrf_of(&page).as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let page = get().await.unwrap().text().await.unwrap();
    assert!(page.contains("The quarantine is empty."), "{page}");
}
