//! Golden provider fixtures: runs every case in `providers/fixtures/*.toml` through the public
//! verification API, then derives more checks from each successful case (tampered body, wrong
//! secret, rotation, clock shifts). Every mismatch is collected and reported together.
//! The fixture format is described in providers/fixtures/README.md.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use hookgate::verify::{
    ProviderRegistry, RequestHeaders, SourceOverrides, SourceVerifier, Unverified, Verified,
};
use serde::Deserialize;

/// Valid for every built-in scheme (a `whsec_` base64 secret is also a plain UTF-8 one), and
/// used by no fixture: substituting it must make any signature fail.
const WRONG_SECRET: &str = "whsec_aG9va2dhdGUgZml4dHVyZXM6IGEgd3Jvbmcgc2VjcmV0IQ==";

/// Clock shift for the derived checks; for timestamped providers at least 2 * tolerance + 1, so
/// a case signed anywhere within the tolerance of its `now` is surely out of it.
const CLOCK_SHIFT: i64 = 3600;

/// Codes `VerifyError::code` can return; an `expect` outside these (and "ok", "challenge",
/// "config_error") is a typo in the fixture.
const ERROR_CODES: &[&str] = &[
    "missing_signature",
    "invalid_signature",
    "timestamp_out_of_tolerance",
    "missing_event_id",
    "invalid_event_id",
    "malformed_body",
    "unknown_handshake",
    "invalid_verify_token",
    "invalid_handshake",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureFile {
    /// The canonical provider name; the file must be named `<provider>.toml`.
    provider: String,
    /// Seconds, when the scheme signs a timestamp; absent when it has none.
    timestamp_tolerance: Option<i64>,
    /// false for schemes whose signature does not cover the body (tokens, Mailgun): the
    /// flipped-body derived check is skipped.
    #[serde(default = "yes")]
    body_signed: bool,
    /// What the wrong-secret checks substitute; asymmetric schemes need a valid public key.
    wrong_secret: Option<String>,
    #[serde(rename = "case", default)]
    cases: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    /// A provider name or alias; defaults to the file's `provider`.
    provider: Option<String>,
    #[serde(default)]
    overrides: Overrides,
    secrets: Vec<String>,
    now: i64,
    headers: Vec<(String, String)>,
    body: Option<String>,
    body_base64: Option<String>,
    expect: String,
    event_id: Option<String>,
    event_type: Option<String>,
    secret_index: Option<usize>,
    challenge: Option<String>,
    /// The URL the provider called: before `?` the source's public_url, after it the query.
    url: Option<String>,
    method: Option<String>,
    verify_token: Option<String>,
    /// An unsigned handshake: tampering, wrong secrets and clock shifts change nothing.
    #[serde(default)]
    unsigned: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Overrides {
    signature_header: Option<String>,
    signature_encoding: Option<String>,
    signature_prefix: Option<String>,
    event_id: Option<String>,
    event_type: Option<String>,
}

/// What a case should produce.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expected {
    Event {
        event_id: String,
        event_type: Option<String>,
        secret_index: usize,
    },
    Challenge(String),
    ConfigError,
    Error(String),
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Event {
                event_id,
                event_type,
                secret_index,
            } => write!(
                f,
                "ok (event_id {event_id:?}, event_type {event_type:?}, secret_index {secret_index})"
            ),
            Self::Challenge(v) => write!(f, "challenge {v:?}"),
            Self::ConfigError => f.write_str("config_error"),
            Self::Error(code) => f.write_str(code),
        }
    }
}

/// What a case did produce.
#[derive(Debug)]
enum Actual {
    Event {
        event_id: String,
        event_type: Option<String>,
        secret_index: usize,
        scheme: String,
        body: Vec<u8>,
    },
    Challenge(String),
    ConfigError(String),
    Error {
        code: &'static str,
        message: String,
    },
}

impl fmt::Display for Actual {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Event {
                event_id,
                event_type,
                secret_index,
                scheme,
                ..
            } => write!(
                f,
                "ok (event_id {event_id:?}, event_type {event_type:?}, secret_index {secret_index}, scheme {scheme:?})"
            ),
            Self::Challenge(v) => write!(f, "challenge {v:?}"),
            Self::ConfigError(e) => write!(f, "config_error ({e})"),
            Self::Error { code, message } => write!(f, "{code} ({message})"),
        }
    }
}

struct Fixture {
    path: PathBuf,
    file: FixtureFile,
}

impl Fixture {
    fn label(&self, case: &Case) -> String {
        let file = self.path.file_name().unwrap_or_default().to_string_lossy();
        format!("{file} / {:?}", case.name)
    }

    fn provider_of<'a>(&'a self, case: &'a Case) -> &'a str {
        case.provider.as_deref().unwrap_or(&self.file.provider)
    }
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("providers/fixtures")
}

/// Every `*.toml` in the fixtures directory, sorted; panics listing every file that fails to parse.
fn load_fixtures() -> Vec<Fixture> {
    let dir = fixtures_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("reading a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no fixture files in {}", dir.display());

    let mut fixtures = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| toml::from_str::<FixtureFile>(&text).map_err(|e| e.to_string()));
        match parsed {
            Ok(file) => fixtures.push(Fixture { path, file }),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        errors.is_empty(),
        "unreadable fixture files:\n{}",
        errors.join("\n")
    );
    fixtures
}

fn registry() -> ProviderRegistry {
    ProviderRegistry::builtin().expect("built-in provider definitions parse")
}

fn body_bytes(case: &Case) -> Result<Vec<u8>, String> {
    match (&case.body, &case.body_base64) {
        (Some(text), None) => Ok(text.as_bytes().to_vec()),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("body_base64 does not decode: {e}")),
        _ => Err("needs exactly one of body and body_base64".into()),
    }
}

fn expected(case: &Case) -> Result<Expected, String> {
    let extra = |allowed: &[&str]| -> Result<(), String> {
        let present = [
            ("event_id", case.event_id.is_some()),
            ("event_type", case.event_type.is_some()),
            ("secret_index", case.secret_index.is_some()),
            ("challenge", case.challenge.is_some()),
        ];
        match present
            .iter()
            .find(|(key, set)| *set && !allowed.contains(key))
        {
            Some((key, _)) => Err(format!(
                "`{key}` makes no sense with expect = {:?}",
                case.expect
            )),
            None => Ok(()),
        }
    };
    match case.expect.as_str() {
        "ok" => {
            extra(&["event_id", "event_type", "secret_index"])?;
            Ok(Expected::Event {
                event_id: case
                    .event_id
                    .clone()
                    .ok_or("expect = \"ok\" needs event_id")?,
                event_type: case.event_type.clone(),
                secret_index: case
                    .secret_index
                    .ok_or("expect = \"ok\" needs secret_index")?,
            })
        }
        "challenge" => {
            extra(&["challenge"])?;
            Ok(Expected::Challenge(
                case.challenge
                    .clone()
                    .ok_or("expect = \"challenge\" needs challenge")?,
            ))
        }
        "config_error" => {
            extra(&[])?;
            Ok(Expected::ConfigError)
        }
        code if ERROR_CODES.contains(&code) => {
            extra(&[])?;
            Ok(Expected::Error(code.to_owned()))
        }
        other => Err(format!("unknown expect = {other:?}")),
    }
}

/// Runs one case through the public API. `Err` is a problem with the fixture itself.
fn run(registry: &ProviderRegistry, provider: &str, case: &Case) -> Result<Actual, String> {
    let definition = registry
        .get(provider)
        .ok_or_else(|| format!("unknown provider {provider:?}"))?;
    let o = &case.overrides;
    let overrides = SourceOverrides {
        signature_header: o.signature_header.clone(),
        signature_encoding: o.signature_encoding.clone(),
        signature_prefix: o.signature_prefix.clone(),
        event_id: o.event_id.clone(),
        event_type: o.event_type.clone(),
    };
    let definition = match definition.with_overrides(&overrides) {
        Ok(d) => d,
        Err((key, problem)) => return Ok(Actual::ConfigError(format!("{key} {problem}"))),
    };
    let secrets: Vec<&str> = case.secrets.iter().map(String::as_str).collect();
    let mut verifier = match SourceVerifier::new(definition, &secrets) {
        Ok(v) => v,
        Err((index, problem)) => {
            return Ok(Actual::ConfigError(format!("secrets[{index}] {problem}")))
        }
    };
    let (public_url, query) = match &case.url {
        Some(url) => match url.split_once('?') {
            Some((base, query)) => (Some(base), query),
            None => (Some(url.as_str()), ""),
        },
        None => (None, ""),
    };
    if let Some(base) = public_url {
        verifier = match verifier.with_public_url(base) {
            Ok(v) => v,
            Err(problem) => return Ok(Actual::ConfigError(format!("public_url {problem}"))),
        };
    }
    if let Some(token) = &case.verify_token {
        verifier = verifier.with_verify_token(token);
    }
    let headers: RequestHeaders = case
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.clone()))
        .collect();
    let body = bytes::Bytes::from(body_bytes(case)?);
    Ok(
        match Unverified::new(headers, body)
            .with_target(case.method.as_deref().unwrap_or("POST"), query)
            .verify(&verifier, case.now)
        {
            Ok(Verified::Event(ev)) => Actual::Event {
                event_id: ev.provider_event_id().as_str().to_owned(),
                event_type: ev.event_type().map(str::to_owned),
                secret_index: ev.secret_index(),
                scheme: ev.scheme().to_owned(),
                body: ev.body().to_vec(),
            },
            Ok(Verified::Challenge(answer)) => Actual::Challenge(answer.body),
            Err(e) => Actual::Error {
                code: e.code(),
                message: e.to_string(),
            },
        },
    )
}

/// Compares an outcome with the expectation; `Some` describes the mismatch.
fn mismatch(
    registry: &ProviderRegistry,
    provider: &str,
    case: &Case,
    expected: &Expected,
    actual: &Actual,
) -> Option<String> {
    let matches = match (expected, actual) {
        (
            Expected::Event {
                event_id,
                event_type,
                secret_index,
            },
            Actual::Event {
                event_id: got_id,
                event_type: got_type,
                secret_index: got_index,
                scheme,
                body,
            },
        ) => {
            let canonical = registry.get(provider).map(|d| d.name.as_str());
            if canonical != Some(scheme.as_str()) {
                return Some(format!(
                    "scheme is {scheme:?}, expected the canonical name {canonical:?}"
                ));
            }
            if body_bytes(case).ok().as_ref() != Some(body) {
                return Some("the verified event's body differs from the request body".into());
            }
            // "random:*": a definition that gives every request a fresh id.
            let id_matches = match event_id.strip_suffix('*') {
                Some(prefix) => got_id.starts_with(prefix) && got_id.len() > prefix.len(),
                None => event_id == got_id,
            };
            id_matches && event_type == got_type && secret_index == got_index
        }
        (Expected::Challenge(want), Actual::Challenge(got)) => want == got,
        (Expected::ConfigError, Actual::ConfigError(_)) => true,
        (Expected::Error(want), Actual::Error { code, .. }) => want == code,
        _ => false,
    };
    (!matches).then(|| format!("expected {expected}, got {actual}"))
}

/// Runs `case` and records a failure under `label` unless it produces `expected`.
fn check(
    registry: &ProviderRegistry,
    provider: &str,
    label: &str,
    case: &Case,
    expected: &Expected,
    failures: &mut Vec<String>,
) {
    match run(registry, provider, case) {
        Err(problem) => failures.push(format!("{label}: bad fixture: {problem}")),
        Ok(actual) => {
            if let Some(m) = mismatch(registry, provider, case, expected, &actual) {
                failures.push(format!("{label}: {m}"));
            }
        }
    }
}

fn report(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} {what} failed:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

#[test]
fn golden_fixtures() {
    let registry = registry();
    let mut failures = Vec::new();
    let mut checked = 0;
    for fixture in load_fixtures() {
        let mut names = HashSet::new();
        for case in &fixture.file.cases {
            checked += 1;
            let label = fixture.label(case);
            if !names.insert(case.name.as_str()) {
                failures.push(format!("{label}: duplicate case name"));
            }
            let provider = fixture.provider_of(case);
            match expected(case) {
                Err(problem) => failures.push(format!("{label}: bad fixture: {problem}")),
                Ok(want) => check(&registry, provider, &label, case, &want, &mut failures),
            }
        }
    }
    report(&format!("of {checked} golden fixture cases"), &failures);
}

/// The tampered, wrong-secret, rotation and clock-shift variants of every successful case.
#[test]
fn derived_checks() {
    let registry = registry();
    let mut failures = Vec::new();
    let mut checked = 0;
    let invalid = Expected::Error("invalid_signature".into());
    for fixture in load_fixtures() {
        for case in &fixture.file.cases {
            let Ok(want) = expected(case) else {
                continue; // reported by golden_fixtures
            };
            if !matches!(want, Expected::Event { .. } | Expected::Challenge(_)) {
                continue;
            }
            let label = fixture.label(case);
            let provider = fixture.provider_of(case);
            let wrong_secret = fixture.file.wrong_secret.as_deref().unwrap_or(WRONG_SECRET);
            if case.secrets.iter().any(|s| s == wrong_secret) {
                failures.push(format!(
                    "{label}: bad fixture: uses the test's wrong secret"
                ));
                continue;
            }
            let base = run(&registry, provider, case);
            let passes = base
                .as_ref()
                .is_ok_and(|actual| mismatch(&registry, provider, case, &want, actual).is_none());
            let (true, Ok(body)) = (passes, body_bytes(case)) else {
                continue; // reported by golden_fixtures; its variants would only repeat it
            };
            let mut variants: Vec<(String, Case, Expected)> = Vec::new();
            // An unsigned handshake is answered whatever the secrets, body or clock.
            let failed = |e: &Expected| {
                if case.unsigned {
                    want.clone()
                } else {
                    e.clone()
                }
            };

            // (a) One byte of the body changed.
            // (An unsigned handshake is recognised by its body, so changing it changes what
            // the request is; only signed bodies are tampered with.)
            if fixture.file.body_signed && !body.is_empty() && !case.unsigned {
                let mut tampered = body.clone();
                let n = tampered.len();
                tampered[n / 2] ^= 0x01;
                let mut c = case.clone();
                c.body = None;
                c.body_base64 = Some(base64::engine::general_purpose::STANDARD.encode(&tampered));
                variants.push(("body byte flipped".into(), c, failed(&invalid)));
            }

            // (b) Every secret replaced by a wrong one.
            let mut c = case.clone();
            c.secrets = vec![wrong_secret.to_owned()];
            variants.push(("wrong secret".into(), c, failed(&invalid)));

            // (c) A wrong secret listed first: the match moves one place down.
            let mut c = case.clone();
            c.secrets.insert(0, wrong_secret.to_owned());
            let shifted = match &want {
                Expected::Event {
                    event_id,
                    event_type,
                    secret_index,
                } => Expected::Event {
                    event_id: event_id.clone(),
                    event_type: event_type.clone(),
                    secret_index: secret_index + 1,
                },
                other => other.clone(),
            };
            variants.push(("wrong secret listed first".into(), c, shifted));

            // (d) The receiver's clock moved: only timestamped schemes care.
            let shift = fixture
                .file
                .timestamp_tolerance
                .map_or(CLOCK_SHIFT, |t| CLOCK_SHIFT.max(2 * t + 1));
            for delta in [shift, -shift] {
                let mut c = case.clone();
                c.now += delta;
                let outcome = match fixture.file.timestamp_tolerance {
                    Some(_) => failed(&Expected::Error("timestamp_out_of_tolerance".into())),
                    None => want.clone(),
                };
                variants.push((format!("now {delta:+}"), c, outcome));
            }

            for (what, variant, outcome) in variants {
                checked += 1;
                let label = format!("{label} [derived: {what}]");
                check(
                    &registry,
                    provider,
                    &label,
                    &variant,
                    &outcome,
                    &mut failures,
                );
            }
        }
    }
    report(&format!("of {checked} derived checks"), &failures);
}

/// A provider (or alias) cannot ship without at least one passing fixture.
#[test]
fn every_provider_and_alias_has_an_ok_case() {
    let registry = registry();
    let fixtures = load_fixtures();
    let mut failures = Vec::new();

    for fixture in &fixtures {
        let stem = fixture
            .path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy();
        let declared = &fixture.file.provider;
        if stem != declared.as_str() {
            failures.push(format!(
                "{}: declares provider {declared:?}; the file must be named {declared}.toml",
                fixture.path.display()
            ));
        }
        match registry.get(declared) {
            Some(d) if d.name == *declared => {}
            Some(d) => failures.push(format!(
                "{}: {declared:?} is an alias; name the file after {:?}",
                fixture.path.display(),
                d.name
            )),
            None => failures.push(format!(
                "{}: unknown provider {declared:?}",
                fixture.path.display()
            )),
        }
        for case in &fixture.file.cases {
            let provider = fixture.provider_of(case);
            if let Some(d) = registry.get(provider) {
                if d.name != *declared {
                    failures.push(format!(
                        "{}: provider {provider:?} is {:?}, not this file's {declared:?}",
                        fixture.label(case),
                        d.name
                    ));
                }
            }
        }
    }

    for name in registry.names() {
        let ok_cases = fixtures
            .iter()
            .flat_map(|f| f.file.cases.iter().map(move |c| (f, c)))
            .filter(|(f, c)| f.provider_of(c) == name && c.expect == "ok")
            .count();
        if ok_cases == 0 {
            failures.push(format!(
                "provider {name:?} has no expect = \"ok\" case in {}",
                fixtures_dir().display()
            ));
        }
    }
    report("fixture coverage checks", &failures);
}
