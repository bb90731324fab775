//! The broker connections of one process: one link per broker destination, opened on first
//! use, shared by its deliveries and by `/readyz`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::client::Delivery;
use super::message::MessageHeaders;
use super::nats::{NatsLink, Published};
use super::rabbitmq::RabbitLink;
use super::template::{self, Kind, Values};
use crate::config::{Destination, Target};
use crate::queue::Verdict;

enum Link {
    Nats(NatsLink),
    RabbitMq(RabbitLink),
}

pub struct Brokers {
    links: BTreeMap<String, Link>,
    destinations: BTreeMap<String, Arc<Destination>>,
}

/// One broker destination's readiness.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BrokerCheck {
    pub destination: String,
    pub kind: &'static str,
    /// Where it points, without credentials.
    pub location: String,
    pub ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Brokers {
    pub fn new(destinations: &BTreeMap<String, Arc<Destination>>) -> Self {
        let links = destinations
            .iter()
            .filter_map(|(name, d)| {
                let link = match &d.target {
                    Target::Http { .. } => return None,
                    Target::Nats(_) => Link::Nats(NatsLink::new()),
                    Target::RabbitMq(_) => Link::RabbitMq(RabbitLink::new()),
                };
                Some((name.clone(), link))
            })
            .collect();
        Self {
            links,
            destinations: destinations.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    pub(super) async fn publish(
        &self,
        destination: &Destination,
        d: &Delivery<'_>,
        timestamp: i64,
    ) -> Published {
        let values = Values {
            source: d.source,
            event_type: d.event_type,
            destination: d.destination,
        };
        let headers = MessageHeaders::new(destination, d, timestamp);
        let link = self.links.get(destination.name.as_str());
        match (&destination.target, link) {
            (Target::Nats(target), Some(Link::Nats(link))) => {
                let subject = target.subject.render(&values);
                let body = Bytes::copy_from_slice(d.body);
                link.publish(target, destination.timeout, subject, &headers, body)
                    .await
            }
            (Target::RabbitMq(target), Some(Link::RabbitMq(link))) => {
                let exchange = target.exchange.render(&values);
                let routing_key = target.routing_key.render(&values);
                // An escaped event type can make a key longer than AMQP carries: no
                // retry changes that, so the job is dead-lettered at once.
                if let Err(problem) = template::check(&routing_key, Kind::RoutingKey) {
                    return Published {
                        verdict: Verdict::Gone,
                        error: Some(format!("the rendered routing key {problem}")),
                    };
                }
                link.publish(
                    target,
                    destination.timeout,
                    exchange,
                    routing_key,
                    &headers,
                    d.body,
                )
                .await
            }
            _ => Published {
                verdict: Verdict::Retry { retry_after: None },
                error: Some("no broker link for this destination".into()),
            },
        }
    }

    /// Each broker destination's readiness, checked at once, each within `timeout`.
    pub async fn check(&self, timeout: Duration) -> Vec<BrokerCheck> {
        let checks = self.links.iter().map(|(name, link)| async move {
            let destination = &self.destinations[name];
            let check = async {
                match (&destination.target, link) {
                    (Target::Nats(t), Link::Nats(l)) => l.check(t, timeout).await,
                    (Target::RabbitMq(t), Link::RabbitMq(l)) => l.check(t, timeout).await,
                    _ => Err("no broker link for this destination".into()),
                }
            };
            let result = tokio::time::timeout(timeout, check)
                .await
                .unwrap_or_else(|_| Err(format!("timeout: no answer within {timeout:?}")));
            BrokerCheck {
                destination: name.clone(),
                kind: destination.target.kind(),
                location: destination.target.location(),
                ready: result.is_ok(),
                error: result.err(),
            }
        });
        futures_util::future::join_all(checks).await
    }
}
