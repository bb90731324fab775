//! Every `jsonc` example in docs/ROUTING.md, checked: a block is a `// match` or
//! `// match_headers` filter followed by bodies (or headers) under `// matches` and
//! `// does not match`, or by the message under `// error`. A change in the language that
//! the page does not follow fails here.

use serde_json::Value;

use super::Filter;

/// The page, read when the tests run: docs are not a build input of the gateway (the
/// Dockerfile's build stage does not copy them).
fn page() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ROUTING.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

#[derive(Debug)]
struct Example {
    line: usize,
    headers: bool,
    filter: String,
    outcomes: Vec<(Outcome, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Matches,
    DoesNotMatch,
    Error,
}

fn examples() -> Vec<Example> {
    let mut examples = Vec::new();
    let page = page();
    let mut lines = page.lines().enumerate();
    while let Some((start, line)) = lines.next() {
        if line.trim() != "```jsonc" {
            continue;
        }
        let mut sections: Vec<(String, String)> = Vec::new();
        for (_, line) in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            match line.strip_prefix("// ") {
                Some(title) => sections.push((title.to_owned(), String::new())),
                None => {
                    let (_, text) = sections
                        .last_mut()
                        .unwrap_or_else(|| panic!("line {}: text before a title", start + 1));
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        let mut sections = sections.into_iter();
        let (title, filter) = sections.next().expect("an empty example");
        let headers = match title.as_str() {
            "match" => false,
            "match_headers" => true,
            other => panic!("line {}: an example starts with {other:?}", start + 1),
        };
        let outcomes = sections
            .map(|(title, text)| {
                let outcome = match title.as_str() {
                    "matches" => Outcome::Matches,
                    "does not match" => Outcome::DoesNotMatch,
                    "error" => Outcome::Error,
                    other => panic!("line {}: unknown section {other:?}", start + 1),
                };
                (outcome, text.trim().to_owned())
            })
            .collect::<Vec<_>>();
        assert!(!outcomes.is_empty(), "line {}: no outcome", start + 1);
        examples.push(Example {
            line: start + 1,
            headers,
            filter,
            outcomes,
        });
    }
    examples
}

fn json(text: &str, line: usize) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("line {line}: {e}: {text}"))
}

/// Headers written as an object (`{"X-A": "1"}`) or as pairs (`[["X-A", "1"], ...]`).
fn headers(value: &Value) -> Vec<(String, String)> {
    let pair = |name: &str, value: &Value| (name.to_owned(), value.as_str().unwrap().to_owned());
    match value {
        Value::Object(map) => map.iter().map(|(n, v)| pair(n, v)).collect(),
        Value::Array(pairs) => pairs
            .iter()
            .map(|p| pair(p[0].as_str().unwrap(), &p[1]))
            .collect(),
        other => panic!("headers are an object or pairs, not {other}"),
    }
}

#[test]
fn every_example_on_the_routing_page_holds() {
    let examples = examples();
    assert!(examples.len() >= 25, "only {} examples", examples.len());
    let mut checked = 0;
    for example in &examples {
        let line = example.line;
        let filter_json = json(&example.filter, line);
        let compiled = if example.headers {
            Filter::compile_headers(&filter_json)
        } else {
            Filter::compile(&filter_json)
        };
        for (outcome, text) in &example.outcomes {
            checked += 1;
            if *outcome == Outcome::Error {
                let err = compiled
                    .as_ref()
                    .expect_err(&format!("line {line}: compiles"));
                assert_eq!(&err.to_string(), text, "line {line}");
                continue;
            }
            let filter = compiled
                .as_ref()
                .unwrap_or_else(|e| panic!("line {line}: {e}"));
            let subject = json(text, line);
            let matched = if example.headers {
                filter.matches_headers(&headers(&subject))
            } else {
                filter.matches(&subject)
            };
            assert_eq!(
                matched,
                *outcome == Outcome::Matches,
                "line {line}: {} against {text}",
                example.filter.trim()
            );
        }
    }
    assert!(checked >= 60, "only {checked} outcomes");
}

#[test]
fn every_event_type_in_the_table_holds() {
    let page = page();
    let table = page
        .split("## Event types")
        .nth(1)
        .and_then(|s| s.split("\n\n").find(|p| p.starts_with("| Pattern")))
        .expect("the event type table");
    let ticked = |cell: &str| -> Vec<String> {
        cell.split(',')
            .filter_map(|t| t.trim().strip_prefix('`')?.strip_suffix('`'))
            .map(str::to_owned)
            .collect()
    };
    let mut rows = 0;
    for row in table.lines().skip(2) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let pattern = super::EventTypePattern::parse(&ticked(cells[1])[0]).unwrap();
        for t in ticked(cells[2]) {
            assert!(pattern.matches(&t), "{pattern} should match {t}");
        }
        for t in ticked(cells[3]) {
            assert!(!pattern.matches(&t), "{pattern} should not match {t}");
        }
        rows += 1;
    }
    assert_eq!(rows, 5);
}
