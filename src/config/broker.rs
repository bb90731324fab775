//! Broker destinations as the gateway uses them: where a NATS JetStream or RabbitMQ
//! destination publishes, every template parsed and every name checked at start-up, so a
//! mistake stops `hookgate check` (which never connects) rather than the first delivery.

use secrecy::{ExposeSecret, SecretString};

use super::secret::resolve_secret;
use super::settings::DestinationSettings;
use super::validate::invalid;
use super::ConfigError;
use crate::delivery::template::{Kind, Template};

/// A JetStream destination.
pub struct NatsTarget {
    /// `nats://host:port` (or `tls://`), several comma-separated; may carry credentials.
    pub url: SecretString,
    pub subject: Template,
    /// The stream that must store each message: sent as `Nats-Expected-Stream`, so a subject
    /// no stream (or another stream) takes is refused rather than acknowledged elsewhere.
    pub stream: Option<String>,
}

/// A RabbitMQ destination.
pub struct RabbitTarget {
    /// `amqp://user:pass@host:port/vhost` (or `amqps://`).
    pub url: SecretString,
    pub exchange: Template,
    pub routing_key: Template,
}

/// Where a URL points, without its credentials: what logs and `Debug` show.
pub fn redacted(url: &SecretString) -> String {
    match url::Url::parse(url.expose_secret().split(',').next().unwrap_or_default()) {
        Ok(u) => format!(
            "{}://{}:{}",
            u.scheme(),
            u.host_str().unwrap_or("?"),
            u.port().map_or_else(|| "-".into(), |p| p.to_string())
        ),
        Err(_) => "(unparsable url)".into(),
    }
}

fn broker_url(
    key: &dyn Fn(&str) -> String,
    dest: &DestinationSettings,
    schemes: &[&str],
) -> Result<SecretString, ConfigError> {
    let url = resolve_secret(&SecretString::from(dest.url.clone()))
        .map_err(|p| invalid(key("url"), p))?;
    for one in url.expose_secret().split(',') {
        let ok = url::Url::parse(one.trim())
            .ok()
            .filter(|u| schemes.contains(&u.scheme()) && u.host_str().is_some());
        if ok.is_none() {
            // The value may hold a password: the message names the schemes, not the value.
            return Err(invalid(
                key("url"),
                format!(
                    "must be a URL with a host and the scheme {}",
                    schemes
                        .iter()
                        .map(|s| format!("{s}://"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            ));
        }
    }
    Ok(url)
}

/// Refuses a key that belongs to another kind, so a typo'd kind is not silently HTTP.
pub(super) fn refuse_keys(
    key: &dyn Fn(&str) -> String,
    dest: &DestinationSettings,
    kind: &str,
    keys: &[&str],
) -> Result<(), ConfigError> {
    for &k in keys {
        let set = match k {
            "subject" => dest.subject.is_some(),
            "stream" => dest.stream.is_some(),
            "exchange" => dest.exchange.is_some(),
            "routing_key" => dest.routing_key.is_some(),
            "headers" => !dest.headers.is_empty(),
            _ => false,
        };
        if set {
            return Err(invalid(
                key(k),
                format!("does not apply to a destination of kind = {kind:?}"),
            ));
        }
    }
    Ok(())
}

pub(super) fn nats(
    key: &dyn Fn(&str) -> String,
    dest: &DestinationSettings,
) -> Result<NatsTarget, ConfigError> {
    refuse_keys(key, dest, "nats", &["exchange", "routing_key", "headers"])?;
    let url = broker_url(key, dest, &["nats", "tls"])?;
    let subject = dest
        .subject
        .as_deref()
        .ok_or_else(|| invalid(key("subject"), "is required for kind = \"nats\""))?;
    let subject =
        Template::parse(subject, Kind::NatsSubject).map_err(|p| invalid(key("subject"), p))?;
    let stream = match &dest.stream {
        None => None,
        Some(s) => {
            // JetStream stream names: no whitespace, `.`, `*`, `>`, path separators.
            let valid = !s.is_empty()
                && s.len() <= 255
                && s.chars()
                    .all(|c| c.is_ascii_graphic() && !matches!(c, '.' | '*' | '>' | '/' | '\\'));
            if !valid {
                return Err(invalid(
                    key("stream"),
                    "must be a JetStream stream name: no spaces, '.', '*', '>', '/' or '\\'",
                ));
            }
            Some(s.clone())
        }
    };
    Ok(NatsTarget {
        url,
        subject,
        stream,
    })
}

pub(super) fn rabbitmq(
    key: &dyn Fn(&str) -> String,
    dest: &DestinationSettings,
) -> Result<RabbitTarget, ConfigError> {
    refuse_keys(key, dest, "rabbitmq", &["subject", "stream", "headers"])?;
    let url = broker_url(key, dest, &["amqp", "amqps"])?;
    let exchange = dest.exchange.as_deref().ok_or_else(|| {
        invalid(
            key("exchange"),
            "is required for kind = \"rabbitmq\" (\"\" is the default exchange)",
        )
    })?;
    let exchange =
        Template::parse(exchange, Kind::Exchange).map_err(|p| invalid(key("exchange"), p))?;
    let routing_key = dest
        .routing_key
        .as_deref()
        .ok_or_else(|| invalid(key("routing_key"), "is required for kind = \"rabbitmq\""))?;
    let routing_key = Template::parse(routing_key, Kind::RoutingKey)
        .map_err(|p| invalid(key("routing_key"), p))?;
    Ok(RabbitTarget {
        url,
        exchange,
        routing_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_the_host_and_drops_credentials() {
        let url = SecretString::from("amqp://user:hunter2@mq.internal:5672/%2f".to_owned());
        assert_eq!(redacted(&url), "amqp://mq.internal:5672");
        let nats = SecretString::from("nats://tok@a:4222,nats://b:4222".to_owned());
        assert_eq!(redacted(&nats), "nats://a:4222");
    }
}
