//! `[sources.reconcile]`: reconciliation against the provider's API (docs/RECOVERY.md), as
//! written and as validated. Only providers with an API that lists past events can have it.

use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::github_app::GitHubApp;
use super::secret::resolve_secret;
use super::validate::{duration, invalid};
use super::ConfigError;

/// `[sources.reconcile]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileSettings {
    /// The provider API credential (literal, `env:` or `file:`): Stripe's secret or
    /// restricted key, a GitHub token, a Paddle API key; with `app = true`, the GitHub App's
    /// PEM private key (normally `file:`), which signs the JWT each call carries. Never logged.
    pub api_key: SecretString,
    /// How often the background task reconciles this source (`"10m"`).
    #[serde(default = "default_interval")]
    pub interval: String,
    /// How far back a run looks; at most what the provider keeps (Stripe 30 days, GitHub 3
    /// days, Paddle 30 days). Defaults to that limit.
    pub lookback: Option<String>,
    /// The provider's API root; defaults to its real API (tests point it at a fake).
    pub api_base: Option<String>,
    /// Pages one run reads at most; the next run resumes from the stored cursor.
    #[serde(default = "default_max_pages")]
    pub max_pages: u32,
    /// Timeout of each call to the provider's API.
    #[serde(default = "default_timeout")]
    pub timeout: String,
    /// GitHub: the repository (`owner/name`) whose hook is reconciled, with `hook_id`.
    pub repository: Option<String>,
    /// GitHub: the organization whose hook is reconciled, with `hook_id`.
    pub organization: Option<String>,
    /// GitHub: the webhook's id (repository and organization hooks).
    pub hook_id: Option<u64>,
    /// GitHub: the App's own webhook (`/app/hook`), with `app_id`; `api_key` is then the
    /// App's private key. Calls carry a JWT signed with it.
    #[serde(default)]
    pub app: bool,
    /// GitHub, with `app = true`: the App's numeric id (the JWT's `iss`).
    pub app_id: Option<u64>,
    /// Paddle: only notifications of this notification setting (destination), `ntfset_...`.
    pub notification_setting_id: Option<String>,
}

fn default_interval() -> String {
    "10m".into()
}
fn default_max_pages() -> u32 {
    10
}
fn default_timeout() -> String {
    "10s".into()
}

/// The provider API a source is reconciled against, and what it needs to address it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReconcileProvider {
    /// `GET /v1/events`; missing events are ingested from the API's JSON.
    Stripe,
    /// A hook's deliveries under `hook_path` (`/repos/o/r/hooks/1`, `/orgs/o/hooks/1`, an
    /// App's `/app/hook`); missing ones are redelivered by GitHub.
    GitHub { hook_path: String },
    /// `GET /notifications?status=failed`; missing ones are replayed by Paddle.
    Paddle {
        notification_setting_id: Option<String>,
    },
}

impl ReconcileProvider {
    /// How far back the provider's API lists what it sent.
    pub fn max_lookback(&self) -> Duration {
        const DAY: u64 = 24 * 3600;
        match self {
            Self::Stripe => Duration::from_secs(30 * DAY),
            Self::GitHub { .. } => Duration::from_secs(3 * DAY),
            Self::Paddle { .. } => Duration::from_secs(30 * DAY),
        }
    }

    pub fn default_api_base(&self) -> &'static str {
        match self {
            Self::Stripe => "https://api.stripe.com",
            Self::GitHub { .. } => "https://api.github.com",
            Self::Paddle { .. } => "https://api.paddle.com",
        }
    }

    /// The name runs and metrics show (`stripe`, `github`, `paddle`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::GitHub { .. } => "github",
            Self::Paddle { .. } => "paddle",
        }
    }
}

/// `[sources.reconcile]` validated. Debug never shows the key.
#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    pub provider: ReconcileProvider,
    pub api_key: SecretString,
    /// GitHub with `app = true`: the App whose JWT authenticates each call, made from
    /// `api_key` (the private key); the key itself is then never sent.
    pub github_app: Option<GitHubApp>,
    pub interval: Duration,
    pub lookback: Duration,
    /// Without a trailing slash.
    pub api_base: String,
    pub max_pages: u32,
    pub timeout: Duration,
}

/// Validates source `i`'s `[sources.reconcile]`; `definition` is its provider definition's
/// canonical name, `event_id_overridden` whether the source reads its dedupe id elsewhere.
pub(super) fn reconcile_config(
    i: usize,
    definition: &str,
    event_id_overridden: bool,
    r: &ReconcileSettings,
) -> Result<ReconcileConfig, ConfigError> {
    let key = |k: &str| format!("sources[{i}].reconcile.{k}");
    let provider = match definition {
        "stripe" => ReconcileProvider::Stripe,
        "github" => github(r, &key)?,
        "paddle" => ReconcileProvider::Paddle {
            notification_setting_id: r.notification_setting_id.clone(),
        },
        other => {
            return Err(invalid(
                format!("sources[{i}].reconcile"),
                format!(
                    "is not available for provider {other:?}: reconciliation supports stripe, github and paddle"
                ),
            ))
        }
    };
    if event_id_overridden {
        // Recovered events carry the provider's own id; another dedupe key would not match it.
        return Err(invalid(
            format!("sources[{i}].event_id"),
            "cannot be set on a reconciled source: reconciliation dedupes on the provider's own event id",
        ));
    }
    let check_only = |name: &str, set: bool, only: &str| {
        if set {
            Err(invalid(key(name), format!("applies to {only} only")))
        } else {
            Ok(())
        }
    };
    if !matches!(provider, ReconcileProvider::GitHub { .. }) {
        check_only("repository", r.repository.is_some(), "github")?;
        check_only("organization", r.organization.is_some(), "github")?;
        check_only("hook_id", r.hook_id.is_some(), "github")?;
        check_only("app", r.app, "github")?;
        check_only("app_id", r.app_id.is_some(), "github")?;
    }
    if !matches!(provider, ReconcileProvider::Paddle { .. }) {
        check_only(
            "notification_setting_id",
            r.notification_setting_id.is_some(),
            "paddle",
        )?;
    }
    let api_key = resolve_secret(&r.api_key).map_err(|p| invalid(key("api_key"), p))?;
    let github_app = match (r.app, r.app_id) {
        (true, Some(app_id)) => Some(
            GitHubApp::new(app_id, &api_key)
                .map_err(|p| invalid(key("api_key"), format!("(the App's private key) {p}")))?,
        ),
        _ => None,
    };
    let interval = duration(&key("interval"), &r.interval)?;
    if interval < Duration::from_secs(1) {
        return Err(invalid(key("interval"), "must be at least 1s"));
    }
    let max = provider.max_lookback();
    let lookback = match &r.lookback {
        Some(l) => duration(&key("lookback"), l)?,
        None => max,
    };
    if lookback > max {
        return Err(invalid(
            key("lookback"),
            format!(
                "is {}, longer than the {} {} keeps its history",
                humantime::format_duration(lookback),
                humantime::format_duration(max),
                provider.name()
            ),
        ));
    }
    if lookback.is_zero() {
        return Err(invalid(key("lookback"), "must be positive"));
    }
    let api_base = r
        .api_base
        .as_deref()
        .unwrap_or(provider.default_api_base())
        .trim_end_matches('/')
        .to_owned();
    match url::Url::parse(&api_base) {
        Ok(u) if u.scheme() == "https" && u.query().is_none() => {}
        // The credential travels in clear over http: only to this machine (a local fake).
        Ok(u) if u.scheme() == "http" && u.query().is_none() && loopback(&u) => {}
        _ => {
            return Err(invalid(
                key("api_base"),
                format!(
                    "is {api_base:?}, not an https URL without a query (http only to a loopback address)"
                ),
            ))
        }
    }
    if r.max_pages == 0 {
        return Err(invalid(key("max_pages"), "must be positive"));
    }
    let timeout = duration(&key("timeout"), &r.timeout)?;
    if timeout.is_zero() {
        return Err(invalid(key("timeout"), "must be positive"));
    }
    Ok(ReconcileConfig {
        provider,
        api_key,
        github_app,
        interval,
        lookback,
        api_base,
        max_pages: r.max_pages,
        timeout,
    })
}

fn loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    }
}

fn github(
    r: &ReconcileSettings,
    key: &dyn Fn(&str) -> String,
) -> Result<ReconcileProvider, ConfigError> {
    if r.app {
        if r.app_id.is_none() {
            return Err(invalid(
                key("app_id"),
                "is required with app = true: the GitHub App's numeric id, which the JWT is issued for",
            ));
        }
        for (name, set) in [
            ("repository", r.repository.is_some()),
            ("organization", r.organization.is_some()),
            ("hook_id", r.hook_id.is_some()),
        ] {
            if set {
                return Err(invalid(
                    key(name),
                    "cannot be set with app = true: an App has one hook, its own",
                ));
            }
        }
        return Ok(ReconcileProvider::GitHub {
            hook_path: "/app/hook".into(),
        });
    }
    if r.app_id.is_some() {
        return Err(invalid(key("app_id"), "applies to app = true only"));
    }
    let hook_id = r
        .hook_id
        .ok_or_else(|| invalid(key("hook_id"), "is required for github"))?;
    let hook_path = match (&r.repository, &r.organization) {
        (Some(repo), None) => {
            let ok = |p: &str| {
                !p.is_empty()
                    && p != "."
                    && p != ".."
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            };
            match repo.split_once('/') {
                Some((owner, name)) if ok(owner) && ok(name) => {
                    format!("/repos/{owner}/{name}/hooks/{hook_id}")
                }
                _ => {
                    return Err(invalid(
                        key("repository"),
                        format!("is {repo:?}, not \"owner/name\""),
                    ))
                }
            }
        }
        (None, Some(org)) => {
            if org.is_empty() || !org.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(invalid(
                    key("organization"),
                    format!("is {org:?}, not an organization login"),
                ));
            }
            format!("/orgs/{org}/hooks/{hook_id}")
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                key("organization"),
                "cannot be set with repository: a hook belongs to one",
            ))
        }
        (None, None) => {
            return Err(invalid(
                key("repository"),
                "is required for github (or organization)",
            ))
        }
    };
    Ok(ReconcileProvider::GitHub { hook_path })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(extra: &str) -> ReconcileSettings {
        toml::from_str(&format!("api_key = \"sk_test_secret_value\"\n{extra}")).unwrap()
    }

    fn problem(definition: &str, extra: &str) -> String {
        reconcile_config(0, definition, false, &settings(extra))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn defaults_to_the_providers_limit_and_real_api() {
        let c = reconcile_config(0, "stripe", false, &settings("")).unwrap();
        assert_eq!(c.lookback, Duration::from_secs(30 * 24 * 3600));
        assert_eq!(c.api_base, "https://api.stripe.com");
        assert_eq!(c.interval, Duration::from_secs(600));
        assert!(!format!("{c:?}").contains("sk_test_secret_value"));
    }

    #[test]
    fn refuses_what_cannot_work_with_clear_messages() {
        assert!(problem("slack", "").contains("not available for provider \"slack\""));
        assert!(problem("stripe", "lookback = \"31days\"").contains("longer than"));
        assert!(problem("github", "repository = \"o/r\"").contains("hook_id"));
        assert!(problem("github", "hook_id = 1").contains("repository"));
        let e = problem("github", "app = true");
        assert!(e.contains("app_id") && e.contains("is required"), "{e}");
        assert!(problem(
            "github",
            "hook_id = 1\nrepository = \"o/r\"\nlookback = \"4days\""
        )
        .contains("longer than"));
        assert!(problem("stripe", "hook_id = 1").contains("github only"));
        assert!(problem("stripe", "max_pages = 0").contains("positive"));
        assert!(problem("stripe", "api_base = \"http://api.example.com\"").contains("loopback"));
        assert!(problem("stripe", "api_base = \"https://x/?q=1\"").contains("https URL"));
        let local = reconcile_config(
            0,
            "stripe",
            false,
            &settings("api_base = \"http://127.0.0.1:9/\""),
        );
        assert_eq!(local.unwrap().api_base, "http://127.0.0.1:9");
        let e = reconcile_config(0, "stripe", true, &settings(""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sources[0].event_id"), "{e}");
        let missing: Result<ReconcileSettings, _> = toml::from_str("interval = \"1m\"");
        assert!(missing.unwrap_err().to_string().contains("api_key"));
    }

    #[test]
    fn the_lookback_stays_within_the_dedupe_window() {
        let config = |window: &str| {
            let text = format!(
                "[retention]\ndedupe_window = \"{window}\"\n\n[[sources]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n\n[sources.reconcile]\napi_key = \"sk_test_x\"\n"
            );
            let settings = crate::config::Settings::from_toml_str(&text).unwrap();
            crate::config::GatewayConfig::from_settings(&settings).map(|_| ())
        };
        let e = config("10days").unwrap_err().to_string();
        assert!(e.contains("sources[0].reconcile.lookback"), "{e}");
        assert!(e.contains("dedupe_window"), "{e}");
        config("30days").unwrap();
    }

    #[test]
    fn github_hooks_are_addressed_by_repository_or_organization() {
        let c = reconcile_config(
            0,
            "github",
            false,
            &settings("repository = \"octo/hello\"\nhook_id = 7"),
        )
        .unwrap();
        assert_eq!(
            c.provider,
            ReconcileProvider::GitHub {
                hook_path: "/repos/octo/hello/hooks/7".into()
            }
        );
        let c = reconcile_config(
            0,
            "github",
            false,
            &settings("organization = \"octo\"\nhook_id = 8"),
        )
        .unwrap();
        assert_eq!(
            c.provider,
            ReconcileProvider::GitHub {
                hook_path: "/orgs/octo/hooks/8".into()
            }
        );
        assert!(problem("github", "repository = \"../x\"\nhook_id = 1").contains("owner/name"));
    }

    #[test]
    fn a_github_apps_hook_needs_its_id_and_a_private_key_that_parses() {
        const PEM: &str = include_str!("../../tools/testkit/keys/github-app-test.pem");
        let app = |extra: &str| {
            let text = format!("api_key = {PEM:?}\napp = true\n{extra}");
            reconcile_config(0, "github", false, &toml::from_str(&text).unwrap())
        };
        let c = app("app_id = 12345").unwrap();
        assert_eq!(
            c.provider,
            ReconcileProvider::GitHub {
                hook_path: "/app/hook".into()
            }
        );
        assert_eq!(c.github_app.as_ref().map(|a| a.app_id), Some(12345));
        assert!(!format!("{c:?}").contains("PRIVATE KEY"));
        let e = app("").unwrap_err().to_string();
        assert!(e.contains("sources[0].reconcile.app_id"), "{e}");
        let e = app("app_id = 1\nhook_id = 2").unwrap_err().to_string();
        assert!(e.contains("hook_id") && e.contains("app = true"), "{e}");
        let e = problem("github", "app = true\napp_id = 1");
        assert!(e.contains("sources[0].reconcile.api_key"), "{e}");
        assert!(e.contains("not a PEM RSA private key"), "{e}");
        assert!(!e.contains("sk_test_secret_value"), "{e}");
        let broken = PEM.replace("MII", "MIX");
        let text = format!("api_key = {broken:?}\napp = true\napp_id = 1");
        let e = reconcile_config(0, "github", false, &toml::from_str(&text).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("api_key") && e.contains("PKCS#1"), "{e}");
        let e = problem("github", "repository = \"o/r\"\nhook_id = 1\napp_id = 1");
        assert!(e.contains("app_id") && e.contains("app = true only"), "{e}");
        assert!(problem("stripe", "app_id = 1").contains("github only"));
    }
}
