//! Forwards one job: over HTTP (no redirects, a timeout per attempt, and a classification
//! of the answer that never keeps the receiver's response body), or to a broker
//! (`nats`, `rabbitmq`), done when the broker acknowledges it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use secrecy::ExposeSecret;

use super::brokers::Brokers;
use super::sign::sign_standard_webhook;
use crate::config::{Destination, Target};
use crate::queue::Verdict;

/// What is sent: one stored event to one destination, as attempt number `attempt`.
#[derive(Debug)]
pub struct Delivery<'a> {
    pub event_id: &'a str,
    /// The job's id: stable across the job's attempts, new for a replay. Brokers use it to
    /// absorb a republish (`Nats-Msg-Id`, AMQP `message_id`).
    pub delivery_id: &'a str,
    pub destination: &'a str,
    pub source: &'a str,
    pub event_type: Option<&'a str>,
    pub provider_event_id: &'a str,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
    pub attempt: i32,
}

#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub started_at: DateTime<Utc>,
    pub duration: Duration,
    pub status_code: Option<u16>,
    /// A short summary: the status, or the transport error's kind. Never a response body.
    pub error: Option<String>,
    pub verdict: Verdict,
}

#[derive(Clone)]
pub struct Deliverer {
    client: reqwest::Client,
    brokers: Arc<Brokers>,
}

impl Deliverer {
    /// A deliverer for `destinations`: broker connections open on first use and are shared
    /// by every delivery through this deliverer (and by readiness checks, see `brokers`).
    pub fn new(destinations: &BTreeMap<String, Arc<Destination>>) -> Self {
        Self::with_brokers(Arc::new(Brokers::new(destinations)))
    }

    pub fn with_brokers(brokers: Arc<Brokers>) -> Self {
        let client = reqwest::Client::builder()
            // A redirect is a failure: following it could send the payload somewhere unvetted.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .expect("the HTTP client builds with static settings");
        Self { client, brokers }
    }

    pub fn brokers(&self) -> &Arc<Brokers> {
        &self.brokers
    }

    pub async fn deliver(&self, destination: &Destination, d: &Delivery<'_>) -> AttemptReport {
        let started_at = Utc::now();
        let clock = Instant::now();
        let (status_code, error, verdict) = match &destination.target {
            Target::Http { url, headers } => {
                self.post(destination, url, headers, d, started_at.timestamp())
                    .await
            }
            _ => {
                let published = self
                    .brokers
                    .publish(destination, d, started_at.timestamp())
                    .await;
                (None, published.error, published.verdict)
            }
        };
        AttemptReport {
            started_at,
            duration: clock.elapsed(),
            status_code,
            error,
            verdict,
        }
    }

    async fn post(
        &self,
        destination: &Destination,
        url: &url::Url,
        extra_headers: &HeaderMap,
        d: &Delivery<'_>,
        timestamp: i64,
    ) -> (Option<u16>, Option<String>, Verdict) {
        let key = destination
            .signing_key
            .as_ref()
            .expect("an HTTP destination always has a signing key (checked at load)");
        let signed = sign_standard_webhook(key.expose_secret(), d.event_id, timestamp, d.body);
        // The destination's own headers first: hookgate's, set below, are never replaced.
        let mut headers = extra_headers.clone();
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        };
        put("webhook-id", &signed.webhook_id);
        put("webhook-timestamp", &signed.webhook_timestamp);
        put("webhook-signature", &signed.webhook_signature);
        put("hookgate-source", d.source);
        put("hookgate-event-type", d.event_type.unwrap_or(""));
        put("hookgate-provider-event-id", d.provider_event_id);
        put("hookgate-attempt", &d.attempt.to_string());
        if let Some(ct) = d.content_type.and_then(|ct| HeaderValue::from_str(ct).ok()) {
            headers.insert(CONTENT_TYPE, ct);
        }

        let result = self
            .client
            .post(url.clone())
            .headers(headers)
            .timeout(destination.timeout)
            .body(d.body.to_vec())
            .send()
            .await;
        match result {
            Ok(response) => classify(response.status().as_u16(), response.headers()),
            Err(e) => (
                None,
                Some(transport_error(e)),
                Verdict::Retry { retry_after: None },
            ),
        }
    }
}

fn classify(status: u16, headers: &HeaderMap) -> (Option<u16>, Option<String>, Verdict) {
    let verdict = match status {
        200..=299 => Verdict::Delivered,
        410 => Verdict::Gone,
        429 | 503 => Verdict::Retry {
            retry_after: headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after),
        },
        _ => Verdict::Retry { retry_after: None },
    };
    let error = match verdict {
        Verdict::Delivered => None,
        _ => Some(format!("HTTP {status}")),
    };
    (Some(status), error, verdict)
}

/// `Retry-After` is either delay-seconds or an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&Utc) - Utc::now()).to_std().ok()
}

fn transport_error(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_redirect() {
        "redirect"
    } else {
        "transport error"
    };
    // The URL may carry credentials; the error's own text is enough without it.
    format!("{kind}: {}", e.without_url())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_statuses() {
        let h = HeaderMap::new();
        assert_eq!(classify(204, &h).2, Verdict::Delivered);
        assert_eq!(classify(410, &h).2, Verdict::Gone);
        assert_eq!(classify(302, &h).2, Verdict::Retry { retry_after: None });
        assert_eq!(classify(500, &h).1.as_deref(), Some("HTTP 500"));
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("120"));
        assert_eq!(
            classify(429, &h).2,
            Verdict::Retry {
                retry_after: Some(Duration::from_secs(120))
            }
        );
        // Retry-After is honoured only on 429 and 503.
        assert_eq!(classify(500, &h).2, Verdict::Retry { retry_after: None });
    }

    #[test]
    fn parses_retry_after_dates() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        let future = (Utc::now() + chrono::Duration::seconds(100)).to_rfc2822();
        let d = parse_retry_after(&future).unwrap();
        assert!(d > Duration::from_secs(90) && d <= Duration::from_secs(100));
        assert_eq!(parse_retry_after("soon"), None);
    }
}
