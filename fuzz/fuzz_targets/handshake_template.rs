//! Arbitrary text → handshake answer templates, both as parsed alone (compared with an
//! independent reading of the rules) and as the `text` or a `json` value of a `[[handshake]]`
//! in a definition, answered for a GET that carries an arbitrary query value.
//!
//! Input layout: `[mode, template 0x00 query value 0x00 body...]`; mode bit 0: the template is
//! a JSON answer's value rather than the text answer.
//!
//! Checked: nothing panics; the parser follows the rules; an unsigned handshake may not use
//! an HMAC; an answer never exceeds 4 KiB, and a text answer is exactly what the template
//! renders to.

#![no_main]

use bytes::Bytes;
use hookgate::verify::{
    parse_definition, RequestHeaders, SourceVerifier, Template, TemplateKind, Unverified, Verified,
    VerifyError,
};
use libfuzzer_sys::fuzz_target;

/// A location a handshake answer may read: a header, query parameter or body field.
fn plain_location(s: &str) -> bool {
    match (
        s.strip_prefix("header:"),
        s.strip_prefix("query:"),
        s.strip_prefix("json:"),
    ) {
        (Some(n), _, _) | (_, Some(n), _) => !n.is_empty(),
        (_, _, Some(p)) => p.starts_with('/'),
        _ => false,
    }
}

fn answer_template_is_valid(s: &str) -> bool {
    let mut rest = s;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return false;
        };
        let name = &after[..close];
        let ok = match name.strip_prefix("hmac-sha256-hex:") {
            Some(loc) => plain_location(loc),
            None => plain_location(name),
        };
        if !ok {
            return false;
        }
        rest = &after[close + 1..];
    }
    true
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |b| *b == 0);
    let Ok(template) = std::str::from_utf8(parts.next().unwrap_or_default()) else {
        return;
    };
    let value = parts.next().unwrap_or_default();
    let body = parts.next().unwrap_or_default();

    let parsed = Template::parse(template, TemplateKind::HandshakeAnswer);
    assert_eq!(
        parsed.is_ok(),
        answer_template_is_valid(template),
        "{template:?}: {parsed:?}"
    );
    let uses_hmac = template.contains("{hmac-sha256-hex:");

    let quoted = toml::Value::String(template.to_owned()).to_string();
    let answer = if mode & 1 == 0 {
        format!("text = {quoted}")
    } else {
        format!("json = {{ answer = {quoted}, fixed = 1 }}")
    };
    let text = format!(
        "name = \"hs\"\n[signature]\nheaders = [\"X-Sig\"]\nalgorithm = \"hmac-sha256\"\nencoding = \"hex\"\n[event]\nid = [\"json:/id\"]\n[[handshake]]\nmethod = \"GET\"\nsigned = false\nwhen = {{ \"query:c\" = \"*\" }}\n{answer}\n"
    );
    let def = match parse_definition("hs.toml", &text) {
        Ok(def) => def,
        Err(e) => {
            // Only a template the parser refuses, or an HMAC in an unsigned answer.
            assert!(parsed.is_err() || uses_hmac, "{e}");
            return;
        }
    };
    assert!(parsed.is_ok() && !uses_hmac);
    let verifier = SourceVerifier::new(def, &["k"]).unwrap();
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("c", &String::from_utf8_lossy(value))
        .append_pair("d", "x")
        .finish();
    let mut headers = RequestHeaders::new();
    headers.push("x-h", String::from_utf8_lossy(value).into_owned());
    let result = Unverified::new(headers, Bytes::copy_from_slice(body))
        .with_target("GET", &query)
        .verify(&verifier, 1_700_000_000);
    match result {
        Ok(Verified::Challenge(answer)) => assert!(answer.body.len() <= 4096),
        Ok(Verified::Event(_)) => panic!("a GET handshake became an event"),
        Err(VerifyError::UnknownHandshake | VerifyError::InvalidHandshake(_)) => {}
        Err(e) => panic!("{e:?}"),
    }
});
