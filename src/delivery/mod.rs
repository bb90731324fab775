//! Outbound delivery: sign the stored event Standard-Webhooks style and POST it.

mod client;
mod sign;

pub use client::{AttemptReport, Deliverer, Delivery};
pub use sign::{sign_standard_webhook, SignedHeaders};
