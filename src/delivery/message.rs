//! What a broker message carries besides the body: hookgate's headers, the same names an
//! HTTP delivery uses, and the `webhook-*` signature when the destination has a key.

use secrecy::ExposeSecret;

use super::client::Delivery;
use super::sign::sign_standard_webhook;
use crate::config::Destination;

pub struct MessageHeaders {
    /// The job's id: the same on every attempt of one job, new for a replay.
    pub delivery_id: String,
    pairs: Vec<(&'static str, String)>,
}

impl MessageHeaders {
    pub fn new(destination: &Destination, d: &Delivery<'_>, timestamp: i64) -> Self {
        let mut pairs = vec![
            ("hookgate-event-id", d.event_id.to_owned()),
            ("hookgate-delivery-id", d.delivery_id.to_owned()),
            ("hookgate-source", d.source.to_owned()),
            ("hookgate-provider-event-id", d.provider_event_id.to_owned()),
            ("hookgate-attempt", d.attempt.to_string()),
        ];
        if let Some(t) = d.event_type {
            pairs.push(("hookgate-event-type", t.to_owned()));
        }
        if let Some(ct) = d.content_type {
            pairs.push(("content-type", ct.to_owned()));
        }
        if let Some(key) = &destination.signing_key {
            let signed = sign_standard_webhook(key.expose_secret(), d.event_id, timestamp, d.body);
            pairs.push(("webhook-id", signed.webhook_id));
            pairs.push(("webhook-timestamp", signed.webhook_timestamp));
            pairs.push(("webhook-signature", signed.webhook_signature));
        }
        Self {
            delivery_id: d.delivery_id.to_owned(),
            pairs,
        }
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, &String)> {
        self.pairs.iter().map(|(n, v)| (*n, v))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}
