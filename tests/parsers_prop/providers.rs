//! Every built-in provider, by name from the registry: arbitrary requests are never accepted
//! as events, what `hookgate send` signs is, a signed body changed afterwards is not, and no
//! handshake answer exceeds 4 KiB.

use crate::common::*;
use crate::sources::*;

/// The most a handshake answer may hold (`MAX_ANSWER_BYTES` in src/verify/handshake.rs).
const MAX_ANSWER: usize = 4096;

/// Bodies an arbitrary request may carry: bytes, and JSON shaped like the providers' (ids,
/// types, Graph's `value` array, Mailgun's signature object, handshake fields).
fn any_body() -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![
        Just("{}".to_owned()),
        "\\{\"(id|type|event_id|event|challenge|object_kind)\":(\"[a-z0-9._]{0,12}\"|[0-9]{1,3})\\}",
        "\\{\"value\":\\[(\\{\"clientState\":\"[a-z-]{0,12}\"\\},?){0,4}\\]\\}",
        "\\{\"signature\":\\{\"timestamp\":\"[0-9]{0,10}\",\"token\":\"[a-z0-9]{0,8}\",\"signature\":\"[0-9a-f]{0,64}\"\\}\\}",
        "\\[(\\{\"eventId\":[0-9]{1,4}\\},?){0,4}\\]",
        "[A-Za-z0-9=&%+]{0,60}",
        any::<String>(),
    ];
    prop_oneof![
        3 => text.prop_map(String::into_bytes),
        1 => filler(),
    ]
}

fn any_query() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-zA-Z.=&%0-9]{0,40}",
        "bodySHA256=[0-9a-f]{0,64}",
        "validationToken=[a-zA-Z0-9%]{0,20}",
        "hub.mode=subscribe&hub.verify_token=[a-z-]{0,10}&hub.challenge=[a-z0-9]{0,10}",
        "challenge=[a-z0-9%]{0,20}",
    ]
}

/// Challenges to echo: short printable ones, and long runs of characters JSON escapes.
fn challenge() -> impl Strategy<Value = String> {
    (
        "[!-~]{0,40}",
        select(vec!['a', '"', '\\', '\u{1}', 'é', '\u{2028}']),
        prop_oneof![0usize..64, 600usize..6000],
    )
        .prop_map(|(head, c, n)| format!("{head}{}", c.to_string().repeat(n)))
}

fn json_len(value: serde_json::Value) -> usize {
    value.to_string().len()
}

/// A handshake request for `name` carrying `challenge`, with the answer's exact length when
/// it is answered: (method, query, headers, body, answer length).
fn handshake(
    verifier: &SourceVerifier,
    challenge: &str,
) -> (&'static str, String, RequestHeaders, Vec<u8>, usize) {
    let encoded: String = url::form_urlencoded::byte_serialize(challenge.as_bytes()).collect();
    let signed = |body: serde_json::Value| {
        let body = serde_json::to_vec(&body).unwrap();
        sign_request(verifier, body, "hs-1", "t", NOW).expect("signs")
    };
    match verifier.provider_name() {
        "dropbox" => (
            "GET",
            format!("challenge={encoded}"),
            RequestHeaders::new(),
            Vec::new(),
            challenge.len(),
        ),
        "meta" => (
            "GET",
            format!("hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge={encoded}"),
            RequestHeaders::new(),
            Vec::new(),
            challenge.len(),
        ),
        "microsoft-graph" => (
            "POST",
            format!("validationToken={encoded}"),
            RequestHeaders::new(),
            b"{}".to_vec(),
            challenge.len(),
        ),
        "slack" => {
            let s = signed(serde_json::json!({"type": "url_verification", "challenge": challenge}));
            let len = json_len(serde_json::json!({ "challenge": challenge }));
            ("POST", s.query, s.headers, s.body, len)
        }
        "zoom" => {
            let s = signed(serde_json::json!({
                "event": "endpoint.url_validation",
                "payload": {"plainToken": challenge},
            }));
            let len = json_len(
                serde_json::json!({"plainToken": challenge, "encryptedToken": "0".repeat(64)}),
            );
            ("POST", s.query, s.headers, s.body, len)
        }
        "twitch" => {
            let mut s = signed(serde_json::json!({ "challenge": challenge }));
            s.headers.push(
                "twitch-eventsub-message-type",
                "webhook_callback_verification",
            );
            ("POST", s.query, s.headers, s.body, challenge.len())
        }
        "discord" => {
            let s = signed(serde_json::json!({ "type": 1 }));
            ("POST", s.query, s.headers, s.body, r#"{"type":1}"#.len())
        }
        other => panic!("no handshake written for {other}"),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary headers (every name the definition reads, some repeated), body, query and
    /// method: no panic, never an event; an unsigned handshake may be answered, within 4 KiB.
    #[test]
    fn arbitrary_requests_are_never_accepted(
        name in provider(),
        public_key in any::<bool>(),
        headers in proptest::collection::vec((any::<prop::sample::Index>(), header_like()), 0..8),
        body in any_body(),
        query in any_query(),
        method in select(vec!["POST", "POST", "GET", "PUT"]),
    ) {
        let verifier = source(&name, public_key);
        let names = header_names(&name);
        let mut request = RequestHeaders::new();
        for (at, value) in headers {
            request.push(&names[at.index(names.len())], value);
        }
        let result = Unverified::new(request, Bytes::from(body))
            .with_target(method, &query)
            .verify(&verifier, NOW);
        match result {
            Ok(Verified::Event(event)) => prop_assert!(false, "{} accepted {:?}", name, event),
            Ok(Verified::Challenge(answer)) => prop_assert!(answer.body.len() <= MAX_ANSWER),
            Err(e) => prop_assert!(!e.code().is_empty()),
        }
    }

    /// Signed as the provider signs (by `hookgate send`, with a secret or a public key):
    /// accepted; one bit of the body flipped afterwards: refused wherever the body is signed.
    #[test]
    fn signed_requests_verify_and_a_changed_body_is_refused(
        name in provider(),
        public_key in any::<bool>(),
        id in "[A-Za-z0-9_-]{1,32}",
        filler in "[ -~é]{0,64}",
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let verifier = source(&name, public_key);
        let signed = signed_request(&verifier, &id, &filler);
        match verify_signed(&verifier, &signed.headers, &signed.body, &signed.query) {
            Ok(Verified::Event(event)) => {
                let stored = event.provider_event_id().as_str();
                // The id signed, or one the definition derives (a digest, or a fresh one).
                prop_assert!(
                    stored == id || stored.starts_with("sha256:") || stored.starts_with("random:"),
                    "{}: {}",
                    name,
                    stored
                );
            }
            other => prop_assert!(false, "{} refused what it signed: {:?}", name, other),
        }
        if body_is_signed(verifier.definition()) {
            let mut body = signed.body.clone();
            let i = at.index(body.len());
            body[i] ^= 1 << bit;
            let result = verify_signed(&verifier, &signed.headers, &body, &signed.query);
            prop_assert!(result.is_err(), "{} accepted a changed body: {:?}", name, result);
        }
    }

    /// Every handshake echoing a value, with short and long values (and characters JSON
    /// escapes): answered exactly when the answer fits in 4 KiB, refused otherwise.
    #[test]
    fn handshake_answers_never_exceed_4_kib(
        name in select(vec!["dropbox", "meta", "microsoft-graph", "slack", "zoom", "twitch", "discord"]),
        challenge in challenge(),
    ) {
        let verifier = source(name, false);
        let (method, query, headers, body, len) = handshake(&verifier, &challenge);
        let result = Unverified::new(headers, Bytes::from(body))
            .with_target(method, &query)
            .verify(&verifier, NOW);
        match result {
            Ok(Verified::Challenge(answer)) => {
                prop_assert!(answer.body.len() <= MAX_ANSWER, "{}: {} bytes", name, answer.body.len());
                prop_assert_eq!(answer.body.len(), len, "{}", name);
            }
            // An empty challenge is no handshake at all for the providers that need one.
            Err(VerifyError::UnknownHandshake) if challenge.is_empty() => {}
            Err(VerifyError::InvalidHandshake(_)) => {
                prop_assert!(len > MAX_ANSWER, "{}: a {}-byte answer refused", name, len)
            }
            other => prop_assert!(false, "{}: {:?}", name, other),
        }
    }
}
