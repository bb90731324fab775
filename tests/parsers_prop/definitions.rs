//! The provider-definition parser.

use crate::common::*;
use crate::sources::usable_key;
use hookgate::verify::SignatureSource;

/// A definition that parsed must be internally consistent and usable.
fn check_definition(def: ProviderDefinition, value: &str, body: &[u8]) {
    assert!(!def.name.is_empty());
    let body_signed = matches!(def.signature.source, SignatureSource::Body(_));
    assert_eq!(def.signature.headers().is_empty(), body_signed);
    for h in def.signature.headers() {
        assert_eq!(h, &h.to_ascii_lowercase());
    }
    assert!(!def.event_id.is_empty());
    if let Some(ts) = &def.timestamp {
        assert!(ts.tolerance_seconds > 0);
        if format!("{:?}", ts.source).starts_with("Signature") {
            assert!(
                matches!(
                    def.signature.format,
                    SignatureFormat::KeyValue {
                        timestamp_key: Some(_),
                        ..
                    }
                ),
                "timestamp from the signature without a timestamp_key: {def:?}"
            );
        }
    }
    match &def.signature.format {
        SignatureFormat::Raw => {}
        SignatureFormat::KeyValue {
            pair_separator,
            kv_separator,
            signature_keys,
            ..
        } => assert!(
            !pair_separator.is_empty() && !kv_separator.is_empty() && !signature_keys.is_empty()
        ),
        SignatureFormat::List {
            list_separator,
            item_separator,
            versions,
        } => assert!(
            !list_separator.is_empty() && !item_separator.is_empty() && !versions.is_empty()
        ),
    }
    let mut names: Vec<String> = def.signature.headers().to_vec();
    for loc in def.event_id.iter().chain(&def.event_type) {
        if let Location::Header(h) = loc {
            names.push(h.clone());
        }
    }
    // Timestamp headers: those of the shipped definitions and of `generated_definition`.
    names.extend(
        ["webhook-timestamp", "x-slack-request-timestamp", "x-ts"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    // A key written as the definition says; only a public key that UTF-8 cannot hold (a
    // mutated `[public_key]`) has none, and then loading must fail cleanly.
    let asymmetric = def.asymmetric_algorithm().is_some();
    let verifier = match usable_key(&def).map(|k| SourceVerifier::new(def, &[&k])) {
        Some(Ok(v)) => v,
        None if asymmetric => return,
        other => panic!("no usable key: {other:?}"),
    };
    let mut request = RequestHeaders::new();
    for name in &names {
        request.push(name, value);
    }
    let _ = Unverified::new(request, Bytes::copy_from_slice(body)).verify(&verifier, NOW);
}

#[derive(Debug, Clone)]
enum TextMutation {
    DeleteRange(usize, usize),
    Insert(usize, String),
    ReplaceLine(usize, usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
}

/// Lines from every shipped definition, to splice into another (key/value crossover).
fn definition_lines() -> Vec<&'static str> {
    definition_texts()
        .iter()
        .flat_map(|(_, t)| t.lines())
        .collect()
}

fn text_mutation() -> impl Strategy<Value = TextMutation> {
    let snippet = prop_oneof![
        any::<String>(),
        select(vec![
            "\"",
            "'",
            "[",
            "]",
            "[[",
            "]]",
            "=",
            "\n",
            "\n[signature]\n",
            "\n[timestamp]\n",
            "{",
            "}",
            "{body}",
            "{timestamp}",
            "{id}",
            "{header:X}",
            "{header:}",
            "-1",
            "0",
            "9223372036854775807",
            "-9223372036854775808",
            "\"kv\"",
            "\"list\"",
            "\"raw\"",
            "\"signature\"",
            "\"header:\"",
            "\"json:\"",
            "\"json:id\"",
            "[]",
            "\"\"",
            "#",
            "\\u0000",
            "\"\"\"",
        ])
        .prop_map(str::to_owned),
    ];
    prop_oneof![
        (any::<usize>(), 0usize..40).prop_map(|(a, n)| TextMutation::DeleteRange(a, n)),
        (any::<usize>(), snippet).prop_map(|(a, s)| TextMutation::Insert(a, s)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TextMutation::ReplaceLine(a, b)),
        any::<usize>().prop_map(TextMutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TextMutation::SwapLines(a, b)),
    ]
}

fn mutate_text(text: &str, m: &TextMutation) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match m {
        TextMutation::DeleteRange(a, n) => {
            let start = a % (chars.len() + 1);
            let end = (start + n).min(chars.len());
            chars[..start].iter().chain(&chars[end..]).collect()
        }
        TextMutation::Insert(a, s) => {
            let at = a % (chars.len() + 1);
            let mut out: String = chars[..at].iter().collect();
            out.push_str(s);
            out.extend(&chars[at..]);
            out
        }
        TextMutation::ReplaceLine(a, b) if !lines.is_empty() => {
            let pool = definition_lines();
            let i = a % lines.len();
            lines[i] = pool[b % pool.len()].to_owned();
            lines.join("\n")
        }
        TextMutation::DuplicateLine(a) if !lines.is_empty() => {
            let i = a % lines.len();
            let line = lines[i].clone();
            lines.insert(i, line);
            lines.join("\n")
        }
        TextMutation::SwapLines(a, b) if !lines.is_empty() => {
            let (i, j) = (a % lines.len(), b % lines.len());
            lines.swap(i, j);
            lines.join("\n")
        }
        _ => text.to_owned(),
    }
}

/// `key = value` lines, each present or not.
fn opt_line(key: &'static str, value: BoxedStrategy<String>) -> BoxedStrategy<String> {
    proptest::option::of(value)
        .prop_map(move |v| v.map(|v| format!("{key} = {v}\n")).unwrap_or_default())
        .boxed()
}

fn quoted(regex: &'static str) -> BoxedStrategy<String> {
    regex.prop_map(|v| format!("{v:?}")).boxed()
}

fn string_list(regex: &'static str, len: std::ops::Range<usize>) -> BoxedStrategy<String> {
    proptest::collection::vec(regex, len)
        .prop_map(|v| format!("{v:?}"))
        .boxed()
}

/// The layout keys of `[signature]`: mostly a coherent raw, kv or list layout, sometimes any
/// mix of keys (including empty separators and an unknown format).
fn signature_layout() -> BoxedStrategy<String> {
    let raw = opt_line("prefix", quoted("[a-z0-9]{0,4}=?"))
        .prop_map(|p| format!("format = \"raw\"\n{p}"));
    let kv = (
        quoted("[,;]"),
        quoted("[=:]"),
        string_list("v[0-9]", 1..3),
        opt_line("timestamp_key", quoted("[a-z]{1,2}")),
    )
        .prop_map(|(ps, kvs, keys, tk)| {
            format!("format = \"kv\"\npair_separator = {ps}\nkv_separator = {kvs}\nsignature_keys = {keys}\n{tk}")
        });
    let list = (
        quoted("[ ;]"),
        quoted("[,=]"),
        string_list("v[0-9]a?", 1..3),
    )
        .prop_map(|(ls, is, v)| {
            format!(
                "format = \"list\"\nlist_separator = {ls}\nitem_separator = {is}\nversions = {v}\n"
            )
        });
    let junk = (
        opt_line("format", quoted("raw|kv|list|[a-z]{0,4}")),
        opt_line("prefix", quoted("[a-z0-9=]{0,5}")),
        opt_line("pair_separator", quoted("[,; =]{0,2}")),
        opt_line("kv_separator", quoted("[,; =]{0,2}")),
        opt_line("signature_keys", string_list("[a-z0-9]{0,3}", 0..3)),
        opt_line("timestamp_key", quoted("[a-z]{0,2}")),
        opt_line("list_separator", quoted("[,; ]{0,2}")),
        opt_line("item_separator", quoted("[,; ]{0,2}")),
        opt_line("versions", string_list("v[0-9a]{0,2}", 0..3)),
    )
        .prop_map(|(a, b, c, d, e, f, g, h, i)| format!("{a}{b}{c}{d}{e}{f}{g}{h}{i}"));
    prop_oneof![2 => raw, 2 => kv, 2 => list, 1 => junk].boxed()
}

fn signed_payload() -> BoxedStrategy<String> {
    prop_oneof![
        4 => select(vec![
            "{body}",
            "{timestamp}.{body}",
            "v0:{timestamp}:{body}",
            "{id}.{timestamp}.{body}",
            "{header:X-Extra}:{body}",
            "{body}{id}",
        ])
        .prop_map(str::to_owned),
        1 => "(\\{(body|timestamp|id|header:[A-Za-z-]{0,5}|[a-z]{0,4})\\}|[a-z.:]{0,3}){0,5}",
        1 => any::<String>(),
    ]
    .prop_map(|s| format!("{s:?}"))
    .boxed()
}

fn locations() -> BoxedStrategy<String> {
    let location = prop_oneof![
        4 => select(vec!["header:X-Id", "json:/id", "json:/data/id", "header:webhook-id"]).prop_map(str::to_owned),
        1 => "header:[A-Za-z-]{0,8}",
        1 => "json:/?[a-z/~01]{0,8}",
        1 => "[a-z:/]{0,8}",
    ]
    .prop_map(|s| format!("{s:?}"));
    prop_oneof![
        6 => proptest::collection::vec(location.clone(), 1..3),
        1 => proptest::collection::vec(location, 0..1),
    ]
    .prop_map(|v| format!("[{}]", v.join(", ")))
    .boxed()
}

/// Definitions assembled from pieces, mostly well-formed, to reach the validation past the
/// TOML layer (formats, separators, templates, timestamps, locations) and, when they parse,
/// a verification with them.
fn generated_definition() -> impl Strategy<Value = String> {
    let signature = (
        prop_oneof![4 => string_list("[A-Za-z-]{1,12}", 1..3), 1 => string_list("[A-Za-z-]{0,3}", 0..2)],
        prop_oneof![
            9 => Just("hmac-sha256"),
            1 => select(vec!["hmac-sha1", "hmac-sha512", "md5"])
        ],
        prop_oneof![9 => select(vec!["hex", "base64"]), 1 => Just("HEX")],
        opt_line("signed_payload", signed_payload()),
        signature_layout(),
    )
        .prop_map(|(headers, alg, enc, payload, layout)| {
            format!("[signature]\nheaders = {headers}\nalgorithm = {alg:?}\nencoding = {enc:?}\n{payload}{layout}")
        });
    let timestamp = proptest::option::of((
        prop_oneof![
            2 => Just("[\"signature\"]".to_owned()),
            2 => Just("[\"header:X-Ts\"]".to_owned()),
            1 => string_list("header:(X-Ts|webhook-timestamp|)|signature|json:/t", 0..3),
        ],
        prop_oneof![4 => Just(300i64), 1 => any::<i64>()],
    ))
    .prop_map(|t| {
        t.map(|(from, tol)| format!("[timestamp]\nfrom = {from}\ntolerance_seconds = {tol}\n"))
            .unwrap_or_default()
    });
    let secret = proptest::option::of((
        prop_oneof![9 => select(vec!["utf8", "base64"]), 1 => Just("hex")],
        "[a-z_]{0,6}",
    ))
    .prop_map(|s| {
        s.map(|(e, p)| format!("[secret]\nencoding = {e:?}\nstrip_prefix = {p:?}\n"))
            .unwrap_or_default()
    });
    (
        prop_oneof![19 => "[a-z-]{1,8}", 1 => Just(String::new())],
        signature,
        secret,
        timestamp,
        locations(),
        locations(),
        prop_oneof![
            12 => Just(None),
            4 => Just(Some("slack_url_verification")),
            1 => Just(Some("other")),
        ],
    )
        .prop_map(|(name, signature, secret, timestamp, id, ty, challenge)| {
            let challenge = challenge.map(|c| format!("challenge = {c:?}\n")).unwrap_or_default();
            format!("name = {name:?}\n{challenge}\n{signature}\n{secret}\n{timestamp}\n[event]\nid = {id}\ntype = {ty}\n")
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn definition_parser_never_panics_on_arbitrary_text(text in any::<String>()) {
        if let Err(e) = parse_definition("prop.toml", &text) {
            let _ = e.to_string();
        }
    }

    /// Shipped definitions with a few edits: parse or fail cleanly; a definition that parses
    /// is consistent and verifies a request without panicking.
    #[test]
    fn mutated_definitions_parse_or_fail_cleanly(
        which in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(text_mutation(), 1..4),
        value in header_like(),
        body in filler(),
    ) {
        let texts = definition_texts();
        let (origin, text) = &texts[which.index(texts.len())];
        let origin = origin.as_str();
        let mut text = text.clone();
        for m in &mutations {
            text = mutate_text(&text, m);
        }
        match parse_definition(origin, &text) {
            Ok(def) => check_definition(def, &value, &body),
            Err(e) => prop_assert!(e.to_string().contains(origin), "{}", e),
        }
    }

    /// Definitions assembled from pieces: the same, deeper into validation.
    #[test]
    fn generated_definitions_parse_or_fail_cleanly(text in generated_definition(), value in header_like(), body in filler()) {
        match parse_definition("gen.toml", &text) {
            Ok(def) => check_definition(def, &value, &body),
            Err(e) => prop_assert!(e.to_string().contains("gen.toml"), "{}", e),
        }
    }
}

#[test]
fn every_shipped_definition_passes_the_consistency_check() {
    let texts = definition_texts();
    // Every built-in provider is shipped as a file, and every file is built in.
    assert_eq!(texts.len(), crate::sources::providers().len());
    for (origin, text) in texts {
        let def = parse_definition(origin, text).expect("shipped definitions parse");
        check_definition(def, "v1,AAAA", b"{}");
    }
}
