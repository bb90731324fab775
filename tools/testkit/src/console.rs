//! The web console over plain HTTP (redirects not followed): logging in and reading forms.

use super::TestApp;

pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `name=value` of the first cookie a response sets.
pub fn first_cookie(r: &reqwest::Response) -> String {
    r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// The CSRF token of the first form on a page.
pub fn csrf_of(html: &str) -> String {
    html.split(r#"name="csrf" value=""#)
        .nth(1)
        .unwrap_or_else(|| panic!("no csrf field in {html}"))
        .split('"')
        .next()
        .unwrap()
        .to_owned()
}

/// Logs in with `token`; returns the session cookie (`name=value`).
pub async fn login(app: &TestApp, token: &str) -> String {
    let client = no_redirects();
    let r = client.get(app.url("/console/login")).send().await.unwrap();
    let login_cookie = first_cookie(&r);
    let csrf = csrf_of(&r.text().await.unwrap());
    let r = client
        .post(app.url("/console/login"))
        .header("cookie", &login_cookie)
        .form(&[("csrf", csrf.as_str()), ("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "login");
    first_cookie(&r)
}

/// Logs in; returns a client, the session cookie and the CSRF token of the events page.
pub async fn http_login(app: &TestApp, token: &str) -> (reqwest::Client, String, String) {
    let session = login(app, token).await;
    let client = no_redirects();
    let page = client
        .get(app.url("/console/events"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    (client, session, csrf_of(&page))
}
