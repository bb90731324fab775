//! `hookgate.example.toml` documents every configuration key. The keys are read from the
//! settings structs themselves (each refuses unknown fields and names the ones it expects),
//! so a key added later and not documented fails this test.

use std::collections::BTreeSet;

use hookgate::config::Settings;
use toml::{Table, Value};

const PROBE: &str = "__probe_unknown_key__";

/// One step of a key's path: a table, or an array of tables (`[[sources]]`).
#[derive(Clone)]
enum Step {
    Table(String),
    Array(String),
}

/// A document that reaches `path` and puts `leaf` there.
fn nest(path: &[Step], leaf: Value) -> Value {
    path.iter().rev().fold(leaf, |inner, step| {
        let (name, value) = match step {
            Step::Table(n) => (n, inner),
            Step::Array(n) => (n, Value::Array(vec![inner])),
        };
        Value::Table(Table::from_iter([(name.clone(), value)]))
    })
}

/// The fields the struct at `path` expects, or `None` when no struct is there.
fn fields_at(path: &[Step]) -> Option<Vec<String>> {
    let probe = Value::Table(Table::from_iter([(PROBE.to_owned(), Value::Integer(1))]));
    let text = toml::to_string(&nest(path, probe)).unwrap();
    let error = toml::from_str::<Settings>(&text)
        .expect_err("the probe key is unknown")
        .to_string();
    let at = error.find(&format!("unknown field `{PROBE}`"))?;
    let rest = &error[at..];
    if rest.contains("there are no fields") {
        return Some(Vec::new());
    }
    let expected = &rest[rest.find("expected").unwrap()..];
    let expected = &expected[..expected.find('\n').unwrap_or(expected.len())];
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Every key, as `section.key` with the section as written in TOML (`admin.tokens.tenant`).
fn keys(path: &mut Vec<Step>, out: &mut BTreeSet<String>) {
    let fields = fields_at(path).expect("a struct");
    for field in fields {
        path.push(Step::Table(field.clone()));
        if fields_at(path).is_some() {
            keys(path, out);
            path.pop();
            continue;
        }
        path.pop();
        path.push(Step::Array(field.clone()));
        if fields_at(path).is_some() {
            keys(path, out);
            path.pop();
            continue;
        }
        path.pop();
        let mut key: Vec<String> = path
            .iter()
            .map(|s| match s {
                Step::Table(n) | Step::Array(n) => n.clone(),
            })
            .collect();
        key.push(field);
        out.insert(key.join("."));
    }
}

/// The keys the example file mentions, set or commented out, under the section it is in.
fn documented(text: &str) -> BTreeSet<String> {
    let mut section = String::new();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches('#').trim();
        if let Some(name) = line.strip_prefix('[') {
            let name = name.trim_start_matches('[');
            if let Some(end) = name.find(']') {
                section = name[..end].trim().to_owned();
                continue;
            }
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(match section.as_str() {
                "" => key.to_owned(),
                s => format!("{s}.{key}"),
            });
        }
    }
    out
}

#[test]
fn the_example_config_documents_every_key() {
    let mut all = BTreeSet::new();
    keys(&mut Vec::new(), &mut all);
    // The walk finds the keys it must (a guard against a walk that finds nothing).
    for key in [
        "server.listen",
        "providers_dir",
        "sources.event_type",
        "admin.tokens.token_sha256",
        "destinations.signing_secret",
    ] {
        assert!(
            all.contains(key),
            "{key} not found in the settings: {all:?}"
        );
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/hookgate.example.toml");
    let example = documented(&std::fs::read_to_string(path).unwrap());
    let missing: Vec<&String> = all.difference(&example).collect();
    assert!(
        missing.is_empty(),
        "hookgate.example.toml does not mention {missing:?}"
    );
}
