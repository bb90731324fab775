//! Shared tokens (GitLab's header, Postmark's basic auth, Microsoft Graph's clientState in
//! every notification) compare exactly; Twilio's form parameters are signed in name order,
//! so the order they are sent in does not matter and every value does.

use crate::common::*;
use crate::sources::*;

#[derive(Debug, Clone)]
enum TokenChange {
    Prefix(char),
    Suffix(char),
    /// ASCII case of one letter flipped.
    Case(prop::sample::Index),
    Truncate(prop::sample::Index),
    /// Whitespace around it.
    Pad(&'static str),
    Replace(prop::sample::Index, char),
}

fn token_change() -> impl Strategy<Value = TokenChange> {
    let c = || {
        prop_oneof![
            select(vec!['a', 'A', ' ', '\t', '0', ':', '=']),
            any::<char>()
        ]
    };
    prop_oneof![
        c().prop_map(TokenChange::Prefix),
        c().prop_map(TokenChange::Suffix),
        any::<prop::sample::Index>().prop_map(TokenChange::Case),
        any::<prop::sample::Index>().prop_map(TokenChange::Truncate),
        select(vec![" ", "\t", "  "]).prop_map(TokenChange::Pad),
        (any::<prop::sample::Index>(), c()).prop_map(|(i, c)| TokenChange::Replace(i, c)),
    ]
}

fn apply_token(token: &str, change: &TokenChange) -> String {
    let chars: Vec<char> = token.chars().collect();
    match change {
        TokenChange::Prefix(c) => format!("{c}{token}"),
        TokenChange::Suffix(c) => format!("{token}{c}"),
        TokenChange::Case(i) => {
            let letters: Vec<usize> = (0..chars.len())
                .filter(|&j| chars[j].is_ascii_alphabetic())
                .collect();
            if letters.is_empty() {
                return token.to_owned();
            }
            let mut chars = chars;
            let j = letters[i.index(letters.len())];
            chars[j] = if chars[j].is_ascii_lowercase() {
                chars[j].to_ascii_uppercase()
            } else {
                chars[j].to_ascii_lowercase()
            };
            chars.into_iter().collect()
        }
        TokenChange::Truncate(i) => chars[..i.index(chars.len())].iter().collect(),
        TokenChange::Pad(p) => format!("{p}{token}{p}"),
        TokenChange::Replace(i, c) => {
            let mut chars = chars;
            chars[i.index(token.chars().count())] = *c;
            chars.into_iter().collect()
        }
    }
}

fn token_source(provider: &str, token: &str) -> SourceVerifier {
    SourceVerifier::new(definition(provider), &[token]).expect("a usable token")
}

/// GitLab: the header is the token.
fn gitlab(token: &str) -> RequestHeaders {
    [("x-gitlab-token", token), ("idempotency-key", "gl-1")]
        .into_iter()
        .collect()
}

/// Postmark: `Authorization: Basic base64(user:password)`.
fn postmark(credentials: &str) -> RequestHeaders {
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    [("authorization", format!("Basic {encoded}"))]
        .into_iter()
        .collect()
}

/// Graph: a batch of notifications, each with its clientState (`None`: without one).
fn graph_body(states: &[Option<String>]) -> Vec<u8> {
    let value: Vec<serde_json::Value> = states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut n =
                serde_json::json!({"subscriptionId": format!("sub-{i}"), "changeType": "created"});
            if let Some(s) = s {
                n["clientState"] = serde_json::Value::String(s.clone());
            }
            n
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "value": value })).unwrap()
}

fn verify(
    verifier: &SourceVerifier,
    headers: RequestHeaders,
    body: &[u8],
) -> Result<Verified, VerifyError> {
    verify_signed(verifier, &headers, body, "")
}

/// Twilio's signature, written from its documentation: base64 HMAC-SHA1 of the URL followed
/// by every parameter's name and value, sorted by name.
fn twilio_signature(token: &str, url: &str, params: &[(String, String)]) -> String {
    use hmac::Mac as _;
    let mut sorted = params.to_vec();
    sorted.sort();
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(token.as_bytes()).unwrap();
    mac.update(url.as_bytes());
    for (k, v) in &sorted {
        mac.update(k.as_bytes());
        mac.update(v.as_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

fn form(params: &[(String, String)]) -> Vec<u8> {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish()
        .into_bytes()
}

proptest! {
    #![proptest_config(config())]

    /// GitLab and Postmark: the exact token is accepted; with anything added, removed,
    /// replaced or re-cased it is refused.
    #[test]
    fn header_tokens_compare_exactly(
        postmark_scheme in any::<bool>(),
        token in "[!-~]{1,40}",
        change in token_change(),
    ) {
        let changed = apply_token(&token, &change);
        prop_assume!(changed != token);
        let (provider, headers): (&str, fn(&str) -> RequestHeaders) = if postmark_scheme {
            ("postmark", postmark)
        } else {
            ("gitlab", gitlab)
        };
        let verifier = token_source(provider, &token);
        let body = br#"{"object_kind":"push","RecordType":"Bounce"}"#;
        let result = verify(&verifier, headers(&token), body);
        prop_assert!(matches!(result, Ok(Verified::Event(_))), "{}: {:?}", provider, result);
        let result = verify(&verifier, headers(&changed), body);
        prop_assert!(
            matches!(result, Err(ref e) if e.code() == "invalid_signature" || (changed.trim().is_empty() && e.code() == "missing_signature")),
            "{} accepted {:?} for {:?}: {:?}", provider, changed, token, result
        );
    }

    /// Postmark's scheme word is matched exactly as Postmark sends it.
    #[test]
    fn postmark_needs_its_exact_scheme(token in "[!-~]{1,40}", scheme in "(basic|BASIC|Basic |Bearer|Basic\t)") {
        let verifier = token_source("postmark", &token);
        let encoded = base64::engine::general_purpose::STANDARD.encode(&token);
        let headers: RequestHeaders = [("authorization", format!("{scheme} {encoded}"))].into_iter().collect();
        let result = verify(&verifier, headers, b"{}");
        prop_assert_eq!(result.err().map(|e| e.code()), Some("invalid_signature"));
    }

    /// Graph: every notification in the batch must carry the exact clientState. One changed
    /// or missing among good ones refuses the batch.
    #[test]
    fn every_graph_client_state_must_match(
        token in "[!-~]{1,40}",
        n in 1usize..6,
        at in any::<prop::sample::Index>(),
        change in prop::option::of(token_change()),
    ) {
        let verifier = token_source("microsoft-graph", &token);
        let mut states = vec![Some(token.clone()); n];
        let result = verify(&verifier, RequestHeaders::new(), &graph_body(&states));
        prop_assert!(matches!(result, Ok(Verified::Event(_))), "{:?}", result);
        let i = at.index(n);
        states[i] = change.map(|c| apply_token(&token, &c));
        prop_assume!(states[i].as_ref() != Some(&token));
        let result = verify(&verifier, RequestHeaders::new(), &graph_body(&states));
        let code = result.as_ref().err().map(VerifyError::code);
        // A batch of one without a clientState has no signature at all.
        let missing = n == 1 && states[i].as_deref().is_none_or(|s| s.trim().is_empty());
        prop_assert_eq!(code, Some(if missing { "missing_signature" } else { "invalid_signature" }), "{:?}", result);
    }

    /// Twilio: the parameters in any order verify; any one value changed does not.
    #[test]
    fn twilio_form_params_sign_by_name_not_by_order(
        token in "[0-9a-f]{32}",
        params in proptest::collection::btree_map("[A-Z][A-Za-z]{0,8}", "[ -~é]{0,16}", 1..8)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle(),
        reorder in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        new_value in "[ -~é]{0,16}",
    ) {
        let verifier = token_source("twilio", &token).with_public_url(PUBLIC_URL).unwrap();
        let sig = twilio_signature(&token, PUBLIC_URL, &params);
        let headers: RequestHeaders =
            [("x-twilio-signature", sig.as_str()), ("i-twilio-idempotency-token", "tw-1")]
                .into_iter()
                .collect();
        let result = verify(&verifier, headers.clone(), &form(&params));
        prop_assert!(matches!(result, Ok(Verified::Event(_))), "{:?}", result);

        let mut rotated = params.clone();
        rotated.rotate_left(reorder.index(params.len()));
        let result = verify(&verifier, headers.clone(), &form(&rotated));
        prop_assert!(matches!(result, Ok(Verified::Event(_))), "reordered: {:?}", result);

        let i = at.index(params.len());
        prop_assume!(params[i].1 != new_value);
        let mut changed = rotated;
        let j = changed.iter().position(|(k, _)| *k == params[i].0).unwrap();
        changed[j].1 = new_value;
        let result = verify(&verifier, headers, &form(&changed));
        prop_assert_eq!(result.err(), Some(VerifyError::InvalidSignature));
    }
}
