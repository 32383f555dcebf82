//! The engine side of the event plane, as upstream's worker publishes it (`dynamo-llm` 1.6.1
//! `KvEventPublisher` through `dynamo-runtime`'s `EventPublisher`): envelopes numbered per
//! publisher, each holding a `Vec<RouterEvent>`, on the endpoint's `kv-events` subject.
//!
//! Upstream publishes on core NATS (fire and forget); this publisher goes through JetStream
//! and waits for the stream's acknowledgement, retrying (with the same `Nats-Msg-Id`, which
//! the stream deduplicates within its window) while the server is away, so tests and benches
//! lose nothing across a server restart. Used by tests, benches and simulated engines.

use super::envelope::{EventEnvelope, encode_kv_events};
use super::subjects::{KV_EVENT_TOPIC, endpoint_subject};
use super::{NatsError, connect};
use dynamo_kv_router::kv::RouterEvent;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a publish keeps retrying while the server is away.
pub const PUBLISH_PATIENCE: Duration = Duration::from_secs(30);

/// One worker endpoint's KV-event publisher.
pub struct NatsKvPublisher {
    client: async_nats::Client,
    jetstream: async_nats::jetstream::Context,
    subject: String,
    publisher_id: u64,
    sequence: AtomicU64,
}

impl NatsKvPublisher {
    /// A publisher `publisher_id` for endpoint `namespace.component.endpoint` on `url`.
    pub async fn connect(
        url: &str,
        namespace: &str,
        component: &str,
        endpoint: &str,
        publisher_id: u64,
    ) -> Result<Self, NatsError> {
        let client = connect(url).await?;
        let jetstream = async_nats::jetstream::new(client.clone());
        Ok(Self {
            client,
            jetstream,
            subject: endpoint_subject(namespace, component, endpoint, KV_EVENT_TOPIC),
            publisher_id,
            sequence: AtomicU64::new(0),
        })
    }

    /// The subject it publishes on.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The envelope of `events` as the next message, in upstream's bytes.
    pub fn envelope(&self, events: &[RouterEvent]) -> Result<(u64, Vec<u8>), NatsError> {
        let payload = encode_kv_events(events).map_err(|e| NatsError::Encode(e.to_string()))?;
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let published_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64);
        let envelope = EventEnvelope {
            publisher_id: self.publisher_id,
            sequence,
            published_at,
            topic: KV_EVENT_TOPIC.to_owned(),
            payload,
        };
        let bytes = envelope
            .encode()
            .map_err(|e| NatsError::Encode(e.to_string()))?;
        Ok((sequence, bytes))
    }

    /// Publishes `events` as one envelope and waits until the stream stored it.
    pub async fn publish(&self, events: &[RouterEvent]) -> Result<(), NatsError> {
        let (sequence, bytes) = self.envelope(events)?;
        self.publish_bytes(&format!("{}-{sequence}", self.publisher_id), bytes)
            .await
    }

    /// Publishes `bytes` on the subject as message `message_id`, retrying for
    /// [`PUBLISH_PATIENCE`] until the stream acknowledges it.
    pub async fn publish_bytes(&self, message_id: &str, bytes: Vec<u8>) -> Result<(), NatsError> {
        let payload = bytes::Bytes::from(bytes);
        let deadline = tokio::time::Instant::now() + PUBLISH_PATIENCE;
        let mut last_error = String::new();
        while tokio::time::Instant::now() < deadline {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", message_id);
            let sent = self
                .jetstream
                .publish_with_headers(self.subject.clone(), headers, payload.clone())
                .await;
            let acked = match sent {
                Ok(ack) => tokio::time::timeout(Duration::from_secs(2), ack).await,
                Err(error) => {
                    last_error = error.to_string();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match acked {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(error)) => last_error = error.to_string(),
                Err(_) => last_error = "no acknowledgement within 2s".to_owned(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(NatsError::JetStream {
            operation: "publish",
            message: last_error,
        })
    }

    /// Publishes `bytes` on core NATS, as upstream does (no acknowledgement).
    pub async fn publish_core(&self, bytes: Vec<u8>) -> Result<(), NatsError> {
        self.client
            .publish(self.subject.clone(), bytes.into())
            .await
            .map_err(|error| NatsError::JetStream {
                operation: "core publish",
                message: error.to_string(),
            })?;
        self.client
            .flush()
            .await
            .map_err(|error| NatsError::JetStream {
                operation: "flush",
                message: error.to_string(),
            })
    }
}
