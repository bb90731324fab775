//! Operational alerts (`[alerts] destination = "ops"`): `destination.tripped`,
//! `destination.recovered`, `job.dead_lettered` (one per destination per minute, with the
//! count), `delivery.lagging` and `source.rejections`. Each alert is stored as an event of
//! the reserved source `hookgate-alerts` with one job to the alerts destination, so it is
//! signed, retried and dead-lettered like any delivery. Its provider event id is its dedupe
//! key (kind, subject and time window): however many processes notice the same thing, the
//! database keeps one. Nothing about the alerts destination itself raises an alert.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::config::{GatewayConfig, ALERTS_SOURCE};
use crate::domain::{EventId, Name, ProviderEventId};
use crate::store::{InsertOutcome, NewEvent, Store, StoreError};

/// Raises alerts. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Alerts {
    store: Store,
    config: Arc<GatewayConfig>,
    /// Rejected requests per source in the current minute (this process's count).
    rejections: Arc<Mutex<HashMap<String, (i64, u32)>>>,
}

fn unix_minute(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}

impl Alerts {
    pub fn new(store: Store, config: Arc<GatewayConfig>) -> Self {
        Self {
            store,
            config,
            rejections: Arc::default(),
        }
    }

    /// Whether alerts about `destination` are raised: alerts are on, and it is not the
    /// alerts destination.
    fn watches(&self, destination: &str) -> bool {
        self.config
            .alerts
            .as_ref()
            .is_some_and(|a| a.destination.as_str() != destination)
    }

    /// Stores the alert `kind` once per `key`; true if this call stored it.
    async fn raise(
        &self,
        kind: &str,
        key: &str,
        mut body: serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let Some(alerts) = &self.config.alerts else {
            return Ok(false);
        };
        let (Ok(source), Ok(id)) = (
            Name::parse("source", ALERTS_SOURCE),
            ProviderEventId::parse(&format!("{kind}:{key}")),
        ) else {
            return Ok(false);
        };
        body["type"] = json!(kind);
        body["at"] = json!(now);
        let body = body.to_string();
        let destinations = [alerts.destination.clone()];
        let outcome = self
            .store
            .insert_event(&NewEvent {
                id: EventId::generate(),
                tenant: &alerts.tenant,
                source: &source,
                provider_event_id: &id,
                event_type: Some(kind),
                received_at: now,
                content_type: Some("application/json"),
                headers_json: "[]".into(),
                body: body.as_bytes(),
                verified_scheme: "hookgate",
                verified_secret_index: 0,
                destinations: &destinations,
                delays: &[],
                claims: &[],
                orderings: &[],
                route_digest: None,
            })
            .await?;
        let raised = matches!(outcome, InsertOutcome::Created(_));
        if raised {
            tracing::warn!(alert = kind, key, "alert raised");
        }
        Ok(raised)
    }

    /// `destination.tripped`, once per trip.
    pub async fn destination_tripped(
        &self,
        destination: &str,
        failures: u32,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if self.watches(destination) {
            let key = format!("{destination}:{}", now.timestamp_millis());
            let body = json!({"destination": destination, "failures": failures});
            self.raise("destination.tripped", &key, body, now).await?;
        }
        Ok(())
    }

    /// `destination.recovered`, once per recovery.
    pub async fn destination_recovered(
        &self,
        destination: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if self.watches(destination) {
            let key = format!("{destination}:{}", now.timestamp_millis());
            let body = json!({"destination": destination});
            self.raise("destination.recovered", &key, body, now).await?;
        }
        Ok(())
    }

    /// `job.dead_lettered` for each destination with dead letters in the complete minutes
    /// from `from_minute` up to the one before `now`'s: one alert per destination and
    /// minute, with the count. Returns the first minute not yet looked at.
    pub async fn dead_letters(
        &self,
        from_minute: i64,
        now: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        let current = unix_minute(now);
        if self.config.alerts.is_none() {
            return Ok(current);
        }
        for minute in from_minute.max(current - 10)..current {
            let start = DateTime::from_timestamp(minute * 60, 0).unwrap_or(now);
            let end = start + chrono::Duration::minutes(1);
            for (destination, count) in self.store.dead_letters_between(start, end).await? {
                if self.watches(&destination) {
                    let key = format!("{destination}:{minute}");
                    let body = json!({"destination": destination, "count": count, "minute": start});
                    self.raise("job.dead_lettered", &key, body, now).await?;
                }
            }
        }
        Ok(current)
    }

    /// `delivery.lagging` for each destination whose oldest due job is older than
    /// `[alerts] max_lag`: at most one per destination per `max_lag`.
    pub async fn lagging(
        &self,
        ages: &[(String, i64)],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let Some(alerts) = &self.config.alerts else {
            return Ok(());
        };
        let max_lag = alerts.max_lag.as_secs().max(1) as i64;
        for (destination, age) in ages {
            if *age > max_lag && self.watches(destination) {
                let key = format!("{destination}:{}", now.timestamp().div_euclid(max_lag));
                let body = json!({"destination": destination, "oldest_due_seconds": age});
                self.raise("delivery.lagging", &key, body, now).await?;
            }
        }
        Ok(())
    }

    /// Counts a rejected request of a configured source; the `rejections_per_minute`-th in
    /// a minute raises `source.rejections` (in the background: the request's answer does not
    /// wait for it).
    pub fn rejected(&self, source: &str) {
        let Some(alerts) = &self.config.alerts else {
            return;
        };
        let now = Utc::now();
        let minute = unix_minute(now);
        let count = {
            let mut counts = self.rejections.lock().expect("rejection counts");
            let entry = counts.entry(source.to_owned()).or_insert((minute, 0));
            if entry.0 != minute {
                *entry = (minute, 0);
            }
            entry.1 += 1;
            entry.1
        };
        if count == alerts.rejections_per_minute {
            let (alerts, source) = (self.clone(), source.to_owned());
            tokio::spawn(async move {
                let key = format!("{source}:{minute}");
                let body = json!({"source": source, "rejected_at_least": count});
                if let Err(e) = alerts.raise("source.rejections", &key, body, now).await {
                    tracing::warn!(error = %e, "could not store the source.rejections alert");
                }
            });
        }
    }
}
