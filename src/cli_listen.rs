//! `hookgate listen`: a small receiver for hookgate's own deliveries (like `stripe listen`).
//! It checks each request's Standard Webhooks signature with a destination's signing secret,
//! answers 200 or 401, and prints one line per delivery.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use anyhow::{bail, Context};
use secrecy::ExposeSecret;
use subtle::ConstantTimeEq;

use crate::config::{GatewayConfig, Settings};
use crate::delivery::sign_standard_webhook;

/// The example configuration's destinations point here.
const DEFAULT_LISTEN: &str = "127.0.0.1:9000";
/// Signatures older or newer than this are refused, as Standard Webhooks libraries do.
const TOLERANCE_SECONDS: i64 = 300;

#[derive(Debug, clap::Args)]
pub struct ListenArgs {
    /// Read the signing secret (and the listen address) of `--destination` from this file.
    #[arg(long, short, env = "HOOKGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The destination whose signing secret verifies deliveries (default: every destination
    /// in the configuration; the line names the one that verified).
    #[arg(long, requires = "config")]
    pub destination: Option<String>,
    /// A signing secret (`whsec_` + base64), instead of or besides the configuration's.
    #[arg(long)]
    pub secret: Option<String>,
    /// The address to bind (default: the destination URL's host and port, else 127.0.0.1:9000).
    #[arg(long)]
    pub listen: Option<String>,
    /// Also print each delivery's body.
    #[arg(long)]
    pub print_body: bool,
}

/// A named signing key.
struct Key {
    name: String,
    key: Vec<u8>,
}

struct Receiver {
    keys: Vec<Key>,
    print_body: bool,
}

pub async fn listen(args: ListenArgs) -> anyhow::Result<()> {
    let mut keys = Vec::new();
    let mut addresses = Vec::new();
    if let Some(path) = &args.config {
        let settings = Settings::load(path)?;
        let gateway = GatewayConfig::from_settings(&settings)?;
        let chosen: Vec<_> = match &args.destination {
            Some(name) => vec![gateway
                .destinations
                .get(name)
                .with_context(|| format!("no destination named {name:?} in {}", path.display()))?],
            None => gateway.destinations.values().collect(),
        };
        for d in chosen {
            let (Some(key), crate::config::Target::Http { url, .. }) = (&d.signing_key, &d.target)
            else {
                continue;
            };
            keys.push(Key {
                name: d.name.to_string(),
                key: key.expose_secret().to_vec(),
            });
            if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
                let address = format!("{host}:{port}");
                if !addresses.contains(&address) {
                    addresses.push(address);
                }
            }
        }
    }
    if let Some(secret) = &args.secret {
        keys.push(Key {
            name: "--secret".into(),
            key: decode_secret(secret)?,
        });
    }
    if keys.is_empty() {
        bail!(
            "nothing to verify with: pass --config PATH [--destination NAME] or --secret whsec_..."
        );
    }
    let address = match (args.listen, addresses.as_slice()) {
        (Some(a), _) => a,
        (None, []) => DEFAULT_LISTEN.to_owned(),
        (None, [one]) => one.clone(),
        (None, many) => bail!(
            "the destinations point at different addresses ({}); choose one with --destination or --listen",
            many.join(", ")
        ),
    };
    let listener =
        TcpListener::bind(&address).with_context(|| format!("cannot listen on {address}"))?;
    let bound = listener.local_addr()?;
    let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
    println!(
        "hookgate listen: receiving on http://{bound} (verifying with {})",
        names.join(", ")
    );
    let _ = std::io::stdout().flush();
    let receiver = web::Data::new(Arc::new(Receiver {
        keys,
        print_body: args.print_body,
    }));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(receiver.clone())
            .app_data(web::PayloadConfig::new(16 * 1024 * 1024))
            .default_service(web::to(receive))
    })
    .workers(1)
    .listen(listener)?
    .run();
    server.await?;
    Ok(())
}

fn decode_secret(secret: &str) -> anyhow::Result<Vec<u8>> {
    secret
        .strip_prefix("whsec_")
        .and_then(|b| crate::verify::decode_base64_lenient(b).ok())
        .filter(|k| !k.is_empty())
        .context("--secret must be \"whsec_\" followed by base64 (a destination's signing_secret)")
}

async fn receive(
    request: HttpRequest,
    body: web::Bytes,
    receiver: web::Data<Arc<Receiver>>,
) -> HttpResponse {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let verdict = verify(
        &receiver.keys,
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
        &body,
        chrono::Utc::now().timestamp(),
    );
    let status = match &verdict {
        Ok(name) => format!("verified ({name})"),
        Err(reason) => format!("NOT VERIFIED ({reason})"),
    };
    let line = format!(
        "{} {} event={:?} source={:?} type={:?} attempt={:?} {status}",
        request.method(),
        request.path(),
        header("webhook-id"),
        header("hookgate-source"),
        header("hookgate-event-type"),
        header("hookgate-attempt"),
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    if receiver.print_body {
        let _ = writeln!(out, "{}", String::from_utf8_lossy(&body));
    }
    let _ = out.flush();
    match verdict {
        Ok(_) => HttpResponse::Ok().finish(),
        Err(reason) => HttpResponse::Unauthorized().body(reason),
    }
}

/// The name of the key that signed the request, or why none did.
fn verify<'k>(
    keys: &'k [Key],
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now: i64,
) -> Result<&'k str, &'static str> {
    if id.is_empty() || timestamp.is_empty() || signatures.is_empty() {
        return Err("missing webhook-id, webhook-timestamp or webhook-signature");
    }
    let ts: i64 = timestamp
        .parse()
        .map_err(|_| "webhook-timestamp is not a number")?;
    if (now - ts).abs() > TOLERANCE_SECONDS {
        return Err("webhook-timestamp is more than 5 minutes away");
    }
    for key in keys {
        let expected = sign_standard_webhook(&key.key, id, ts, body).webhook_signature;
        let matches = signatures
            .split(' ')
            .any(|s| bool::from(s.as_bytes().ct_eq(expected.as_bytes())));
        if matches {
            return Ok(&key.name);
        }
    }
    Err("signature does not match")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_signatures_and_names_the_key() {
        let keys = vec![
            Key {
                name: "a".into(),
                key: b"key-a".to_vec(),
            },
            Key {
                name: "b".into(),
                key: b"key-b".to_vec(),
            },
        ];
        let signed = sign_standard_webhook(b"key-b", "msg_1", 1000, b"{}");
        let list = format!("v1,bm90LWl0 {}", signed.webhook_signature);
        assert_eq!(verify(&keys, "msg_1", "1000", &list, b"{}", 1000), Ok("b"));
        let sig = &signed.webhook_signature;
        assert!(verify(&keys, "msg_1", "1000", sig, b"{ }", 1000).is_err());
        assert!(verify(&keys, "msg_2", "1000", sig, b"{}", 1000).is_err());
        assert!(verify(&keys, "msg_1", "1000", sig, b"{}", 1000 + 301).is_err());
        assert!(verify(&keys, "msg_1", "", sig, b"{}", 1000).is_err());
        assert!(decode_secret("not-whsec").is_err());
    }
}
