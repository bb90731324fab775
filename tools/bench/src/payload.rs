//! Realistic signed webhook requests: a Stripe-style or GitHub-style JSON body of a fixed
//! size, each with a unique event id, signed the way the provider signs it.

use std::io::Write as _;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The signature scheme (and body shape) of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Stripe,
    Github,
}

impl std::str::FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stripe" => Ok(Self::Stripe),
            "github" => Ok(Self::Github),
            other => Err(format!("unknown scheme {other:?} (stripe or github)")),
        }
    }
}

/// One ingest endpoint of the gateway under test.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    pub name: String,
    pub scheme: Scheme,
    pub secret: String,
}

/// The sources every generated gateway config has, and the load generator's defaults.
pub fn bench_sources() -> Vec<SourceSpec> {
    vec![
        SourceSpec {
            name: "stripe".into(),
            scheme: Scheme::Stripe,
            secret: "whsec_bench_stripe_secret_0123456789".into(),
        },
        SourceSpec {
            name: "github".into(),
            scheme: Scheme::Github,
            secret: "bench-github-secret-0123456789".into(),
        },
    ]
}

/// A bijection on u64 (the splitmix64 finaliser): distinct inputs give distinct outputs that
/// look random, so generated ids are unique yet spread over the whole key space, as
/// providers' ids are (Stripe's are random base62, GitHub's are GUIDs).
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The provider event id number `x` gets under `scheme`: `evt_` and 24 hex digits for
/// Stripe, a GUID for GitHub. Unique per `x`.
pub fn event_id(scheme: Scheme, x: u64) -> String {
    let (a, b) = (mix(x), mix(x ^ 0x5eed_5eed_5eed_5eed));
    match scheme {
        Scheme::Stripe => format!("evt_{a:016x}{:08x}", b >> 32),
        Scheme::Github => format!(
            "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        ),
    }
}

/// The JSON body for `event_id`, padded to exactly `size` bytes when `size` allows.
pub fn body(scheme: Scheme, event_id: &str, created: i64, size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(size + 64);
    match scheme {
        Scheme::Stripe => {
            let _ = write!(
                b,
                r#"{{"id":"{event_id}","object":"event","api_version":"2024-06-20","created":{created},"type":"invoice.paid","livemode":false,"pending_webhooks":1,"request":{{"id":null,"idempotency_key":null}},"data":{{"object":{{"id":"in_1PbenchAbCdEfGh","object":"invoice","amount_due":2000,"amount_paid":2000,"currency":"usd","customer":"cus_QbenchCustomer01","status":"paid","description":""#
            );
        }
        Scheme::Github => {
            let _ = write!(
                b,
                r#"{{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","created":false,"deleted":false,"forced":false,"delivery":"{event_id}","pushed_at":{created},"repository":{{"id":186853002,"name":"hookgate","full_name":"acme/hookgate","private":true}},"sender":{{"login":"octocat","id":583231,"type":"User"}},"head_commit":{{"message":""#
            );
        }
    }
    let tail: &[u8] = match scheme {
        Scheme::Stripe => br#""}}}"#,
        Scheme::Github => br#""}}"#,
    };
    let pad = size.saturating_sub(b.len() + tail.len());
    b.resize(b.len() + pad, b'x');
    b.extend_from_slice(tail);
    b
}

fn hmac_hex(secret: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// Serialises a complete signed `POST /webhooks/{source}` request into `out` (cleared first).
pub fn build_request(
    out: &mut Vec<u8>,
    host: &str,
    source: &SourceSpec,
    event_id: &str,
    body_size: usize,
) {
    let now = chrono::Utc::now().timestamp();
    let body = body(source.scheme, event_id, now, body_size);
    write_request(out, host, source, event_id, &body, now);
}

/// Serialises a complete `POST /webhooks/{source}` request carrying `body`, signed the
/// provider's way at `now`, into `out` (cleared first).
pub fn write_request(
    out: &mut Vec<u8>,
    host: &str,
    source: &SourceSpec,
    event_id: &str,
    body: &[u8],
    now: i64,
) {
    out.clear();
    let _ = write!(
        out,
        "POST /webhooks/{} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json; charset=utf-8\r\nAccept: */*\r\nContent-Length: {}\r\n",
        source.name,
        body.len()
    );
    match source.scheme {
        Scheme::Stripe => {
            let signed_ts = now.to_string();
            let sig = hmac_hex(
                source.secret.as_bytes(),
                &[signed_ts.as_bytes(), b".", body],
            );
            let _ = write!(
                out,
                "User-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\nStripe-Signature: t={now},v1={sig}\r\n\r\n"
            );
        }
        Scheme::Github => {
            let sig = hmac_hex(source.secret.as_bytes(), &[body]);
            let _ = write!(
                out,
                "User-Agent: GitHub-Hookshot/7c8b3a1\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: {event_id}\r\nX-GitHub-Hook-ID: 492711003\r\nX-Hub-Signature-256: sha256={sig}\r\n\r\n"
            );
        }
    }
    out.extend_from_slice(body);
}

/// Roughly the headers JSON the gateway stores for a request of `scheme` (for SQL baselines
/// that write rows of the same size).
pub fn stored_headers_json(scheme: Scheme, event_id: &str) -> String {
    let sig = "0".repeat(64);
    let mut h: Vec<(&str, String)> = vec![
        ("host", "127.0.0.1:40000".into()),
        ("content-type", "application/json; charset=utf-8".into()),
        ("accept", "*/*".into()),
        ("content-length", "512".into()),
    ];
    match scheme {
        Scheme::Stripe => {
            h.push((
                "user-agent",
                "Stripe/1.0 (+https://stripe.com/docs/webhooks)".into(),
            ));
            h.push(("stripe-signature", format!("t=1700000000,v1={sig}")));
        }
        Scheme::Github => {
            h.push(("user-agent", "GitHub-Hookshot/7c8b3a1".into()));
            h.push(("x-github-event", "push".into()));
            h.push(("x-github-delivery", event_id.into()));
            h.push(("x-github-hook-id", "492711003".into()));
            h.push(("x-hub-signature-256", format!("sha256={sig}")));
        }
    }
    serde_json::to_string(&h).expect("string pairs serialise")
}

/// Extracts `"id":"..."` from the gateway's ingest answer without a JSON parser.
pub fn answer_id(body: &[u8]) -> Option<String> {
    let at = crate::http1::find(body, b"\"id\":\"")? + 6;
    let len = body[at..].iter().position(|&c| c == b'"')?;
    Some(String::from_utf8_lossy(&body[at..at + len]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_of_the_requested_size() {
        for scheme in [Scheme::Stripe, Scheme::Github] {
            let b = body(scheme, "evt_1_2", 1_700_000_000, 512);
            assert_eq!(b.len(), 512);
            let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            assert!(v.is_object());
        }
        let v: serde_json::Value =
            serde_json::from_slice(&body(Scheme::Stripe, "evt_9", 1, 512)).unwrap();
        assert_eq!(v["id"], "evt_9");
        assert_eq!(v["type"], "invoice.paid");
    }

    #[test]
    fn stripe_signature_matches_the_documented_scheme() {
        let src = &bench_sources()[0];
        let mut out = Vec::new();
        build_request(&mut out, "h", src, "evt_x", 512);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let sig = head
            .lines()
            .find_map(|l| l.strip_prefix("Stripe-Signature: "))
            .unwrap();
        let (t, v1) = sig.split_once(",v1=").unwrap();
        let t = t.strip_prefix("t=").unwrap();
        let expect = hmac_hex(
            src.secret.as_bytes(),
            &[t.as_bytes(), b".", body.as_bytes()],
        );
        assert_eq!(v1, expect);
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }

    #[test]
    fn event_ids_are_unique_and_spread() {
        let ids: std::collections::HashSet<String> =
            (0..10_000).map(|x| event_id(Scheme::Stripe, x)).collect();
        assert_eq!(ids.len(), 10_000);
        assert_eq!(event_id(Scheme::Stripe, 7).len(), 28);
        assert_eq!(event_id(Scheme::Github, 7).len(), 36);
        assert_ne!(
            event_id(Scheme::Stripe, 1)[..8],
            event_id(Scheme::Stripe, 2)[..8]
        );
    }

    #[test]
    fn reads_the_id_from_an_answer() {
        let id = answer_id(br#"{"duplicate":false,"id":"0192-abc"}"#);
        assert_eq!(id.as_deref(), Some("0192-abc"));
    }
}
