//! Every built-in provider, configured as a user would: `hookgate check` accepts the
//! configuration (and names what a provider needs when it is missing), and `hookgate send`
//! signs an event each source accepts and stores under its provider's scheme.

use std::path::Path;
use std::process::Output;

use hookgate::verify::{ProviderDefinition, ProviderRegistry};

use super::{bin, check, spawn_serve};

hookgate_testkit::both_stores!(send_signs_an_event_every_built_in_provider_stores);

const ADMIN_TOKEN: &str = "hg_default_providers_test_token_0123456789abcdef";
/// The private half of every public-key source: an Ed25519 seed or a P-256 scalar.
const SEED: [u8; 32] = [7; 32];

/// One `[[sources]]` table; tests drop a setting to see `check` refuse the result.
struct SourceEntry {
    name: String,
    provider: String,
    secret: String,
    public_url: Option<String>,
    verify_token: Option<String>,
    signing_key: Option<String>,
}

impl SourceEntry {
    fn toml(&self) -> String {
        let mut t = format!(
            "[[sources]]\nname = {:?}\nprovider = {:?}\nsecrets = [{:?}]\n",
            self.name, self.provider, self.secret
        );
        for (key, value) in [
            ("public_url", &self.public_url),
            ("verify_token", &self.verify_token),
            ("signing_key", &self.signing_key),
        ] {
            if let Some(v) = value {
                t.push_str(&format!("{key} = {v:?}\n"));
            }
        }
        t
    }
}

/// Every built-in definition once, under its canonical name (aliases skipped).
fn builtin_definitions() -> Vec<ProviderDefinition> {
    let registry = ProviderRegistry::builtin().expect("the built-in definitions load");
    let defs: Vec<ProviderDefinition> = registry
        .names()
        .filter_map(|n| registry.get(n).filter(|d| d.name == n))
        .map(|d| d.as_ref().clone())
        .collect();
    assert_eq!(
        defs.len(),
        32,
        "built-in providers: {:?}",
        defs.iter().map(|d| &d.name).collect::<Vec<_>>()
    );
    defs
}

/// A source for `def` with what it needs: a secret, or for a provider that verifies public
/// keys only, a public key and its private half as `signing_key`; `public_url` when the URL
/// is signed and `verify_token` when a handshake checks one.
fn entry_for(def: &ProviderDefinition, public_key_source: bool) -> SourceEntry {
    let (secret, signing_key) = match hookgate::verify::test_key_pair(def, &SEED) {
        Some((public, private)) if public_key_source || !def.takes_secrets() => {
            (public, Some(private))
        }
        _ if def.secret.strip_prefix == "whsec_" => {
            ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(), None)
        }
        _ => (format!("{}-test-secret", def.name), None),
    };
    let name = if public_key_source {
        format!("{}-public-key", def.name)
    } else {
        def.name.clone()
    };
    SourceEntry {
        public_url: def
            .needs_public_url()
            .then(|| format!("https://hooks.example.com/webhooks/{name}")),
        verify_token: def
            .needs_verify_token()
            .then(|| format!("{name}-verify-token")),
        name,
        provider: def.name.clone(),
        secret,
        signing_key,
    }
}

/// One source per built-in provider, and one more with a public key for each provider
/// that takes both secrets and public keys (Standard Webhooks' `v1a`).
fn all_provider_sources() -> Vec<SourceEntry> {
    let defs = builtin_definitions();
    let mut entries: Vec<SourceEntry> = defs.iter().map(|d| entry_for(d, false)).collect();
    entries.extend(
        defs.iter()
            .filter(|d| d.asymmetric_algorithm().is_some() && d.takes_secrets())
            .map(|d| entry_for(d, true)),
    );
    entries
}

fn config(database_url: &str, sources: &[SourceEntry]) -> String {
    use sha2::Digest as _;
    let token_sha256 = hex::encode(sha2::Sha256::digest(ADMIN_TOKEN.as_bytes()));
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[database]\nurl = {database_url:?}\n\n\
         [[admin.tokens]]\ntenant = \"default\"\ntoken_sha256 = \"{token_sha256}\"\n\n"
    );
    for s in sources {
        text.push_str(&s.toml());
        text.push('\n');
    }
    text
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_accepts_every_built_in_provider_and_names_what_one_lacks() {
    let sources = all_provider_sources();
    let out = check(&config("sqlite::memory:", &sources), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("{} source(s)", sources.len())),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Without its public URL Twilio's signature cannot be checked; without its verify token
    // Meta's subscribe handshake cannot be answered. `check` says which source lacks what.
    for (provider, key) in [("twilio", "public_url"), ("meta", "verify_token")] {
        let mut broken = all_provider_sources();
        let i = broken.iter().position(|s| s.name == provider).unwrap();
        match key {
            "public_url" => broken[i].public_url = None,
            _ => broken[i].verify_token = None,
        }
        let out = check(&config("sqlite::memory:", &broken), &[]);
        let err = stderr(&out);
        assert!(!out.status.success(), "accepted {provider} without {key}");
        assert!(
            err.contains(&format!("sources[{i}].{key}"))
                && err.contains("is required")
                && err.contains(provider),
            "{provider} without {key}: {err}"
        );
    }
}

fn send_signs_an_event_every_built_in_provider_stores(backend: hookgate_testkit::Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_database, url) = hookgate_testkit::database_for_processes(backend, dir.path());
    let sources = all_provider_sources();
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, config(&url, &sources)).unwrap();
    let mut serve = bin();
    serve
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .arg("--role")
        .arg("api");
    let (_child, address, _) = spawn_serve(serve);

    let mut failures = Vec::new();
    for source in &sources {
        let out = send(&path, &address, &source.name);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !stdout.starts_with('2') {
            failures.push(format!("{}: {stdout} {}", source.name, stderr(&out)));
        }
    }
    assert!(
        failures.is_empty(),
        "send failed for:\n{}",
        failures.join("\n")
    );

    // Each source stored exactly the one event, verified under its provider's scheme.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let get = |path: String| {
            let client = client.clone();
            let url = format!("{address}/admin/v1{path}");
            async move {
                let r = client
                    .get(&url)
                    .bearer_auth(ADMIN_TOKEN)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "GET {url}");
                r.json::<serde_json::Value>().await.unwrap()
            }
        };
        for source in &sources {
            let page = get(format!("/events?source={}", source.name)).await;
            let events = page["data"].as_array().unwrap();
            assert_eq!(events.len(), 1, "{}: {page}", source.name);
            let id = events[0]["id"].as_str().unwrap();
            let event = get(format!("/events/{id}")).await;
            assert_eq!(event["source"], source.name.as_str());
            assert_eq!(
                event["verified_scheme"],
                source.provider.as_str(),
                "{event}"
            );
        }
    });
}

fn send(config: &Path, address: &str, source: &str) -> Output {
    bin()
        .arg("send")
        .arg("--config")
        .arg(config)
        .arg("--url")
        .arg(address)
        .arg("--source")
        .arg(source)
        .output()
        .unwrap()
}
