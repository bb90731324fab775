//! Forwarding a stored event to one destination: signed HTTP, or a broker's acknowledged
//! publish.

mod brokers;
mod client;
mod message;
mod nats;
mod rabbitmq;
mod sign;
pub mod template;

pub use brokers::{BrokerCheck, Brokers};
pub use client::{AttemptReport, Deliverer, Delivery};
pub use sign::{sign_standard_webhook, SignedHeaders};
