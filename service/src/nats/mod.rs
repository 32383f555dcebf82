//! NATS JetStream as the event plane, beside ZMQ.
//!
//! **Enters:** upstream Dynamo's event-plane messages on NATS, as `dynamo-runtime` 1.6.1's
//! `EventPublisher` writes them: subject `namespace.{ns}.component.{c}.endpoint.{e}.kv-events`
//! ([`subjects`]), payload a msgpack `EventEnvelope` whose `payload` is a msgpack
//! `Vec<RouterEvent>` ([`envelope`]). A JetStream stream captures those subjects (upstream
//! publishes them on core NATS; the stream stores them as they pass), and each router replica
//! reads it through a durable pull consumer of its own ([`ingress`]).
//!
//! **Leaves:** the events, into the partition index of the worker they name (the index's
//! per-rank `event_id` check rejects what was already applied, so a redelivery changes
//! nothing); acknowledgements back to the consumer once applied; counters into `/metrics`
//! (`kv_router_nats_*`). [`publisher`] is the engine side, for tests, benches and simulations:
//! it publishes the same envelopes through JetStream with a publish acknowledgement.
//! [`replica_sync`] is the router replicas' booking sync over core NATS (upstream's
//! `active_sequences_events`), joining without a peer list.
//!
//! Network code stays here: core sees only `RouterEvent`s.

pub mod checkpoint;
pub mod envelope;
pub mod ingress;
pub mod publisher;
pub mod replica_sync;
pub mod subjects;

use dynamo_kv_router::config::nats_section::{nats_name_problem, nats_url_problem};
use std::time::Duration;

pub use checkpoint::{CheckpointWritten, ResumeKind};
pub use ingress::{NatsIngress, NatsStats};
pub use publisher::NatsKvPublisher;
pub use replica_sync::{NatsReplicaOptions, NatsReplicaSync};

/// The JetStream stream that stores the KV events by default.
pub const DEFAULT_STREAM: &str = "DYNAMO_KV_EVENTS";
/// Upstream's default namespace (`DYN_NAMESPACE`).
pub const DEFAULT_NAMESPACE: &str = "dynamo";
/// How long the stream keeps an event (upstream's `NatsQueue` default, `DYN_NATS_STREAM_MAX_AGE`).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(60 * 60);

/// Where and how a router reads the event plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsOptions {
    /// The server, `nats://host:port`.
    pub url: String,
    /// The Dynamo namespace whose workers' events this router reads (default `dynamo`).
    pub namespace: String,
    /// The JetStream stream holding the events (created if absent).
    pub stream: String,
    /// This replica's durable consumer; replicas need distinct names (each reads every event).
    pub consumer: String,
    /// How long a delivered event may stay unacknowledged before the server redelivers it.
    pub ack_wait: Duration,
    /// How long the stream keeps an event.
    pub max_age: Duration,
    /// Events fetched per pull request.
    pub batch: usize,
    /// Pause after a failed pull or connection before the next try.
    pub retry_pause: Duration,
    /// Events held for workers not registered yet (beyond it they are dropped and counted).
    pub pending_limit: usize,
    /// Acknowledge only what a written checkpoint holds ([`NatsIngress::write_checkpoint`]),
    /// so that a restarted process resumes from its acknowledgement; otherwise each pull is
    /// acknowledged once applied.
    pub checkpointed: bool,
}

impl NatsOptions {
    /// Reading `url` as consumer `consumer`, with the defaults for the rest.
    pub fn new(url: impl Into<String>, consumer: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            stream: DEFAULT_STREAM.to_owned(),
            consumer: consumer.into(),
            ack_wait: Duration::from_secs(10),
            max_age: DEFAULT_MAX_AGE,
            batch: 512,
            retry_pause: Duration::from_millis(200),
            pending_limit: 65_536,
            checkpointed: false,
        }
    }

    /// Checks the URL and names before anything connects.
    pub fn validate(&self) -> Result<(), NatsError> {
        validate_url(&self.url)?;
        let names = [
            ("stream", &self.stream),
            ("consumer", &self.consumer),
            ("namespace", &self.namespace),
        ];
        for (what, name) in names {
            if nats_name_problem(name).is_some() {
                return Err(NatsError::InvalidName {
                    what,
                    name: name.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Checks that `url` is a `nats://host:port` the router can connect to.
pub fn validate_url(url: &str) -> Result<(), NatsError> {
    match nats_url_problem(url) {
        Some(reason) => Err(NatsError::InvalidUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        }),
        None => Ok(()),
    }
}

/// What went wrong on the event plane.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The URL is not a `nats://host:port`.
    #[error("invalid NATS URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A stream, consumer or namespace name NATS would refuse.
    #[error(
        "invalid NATS {what} name `{name}`: it must be non-empty, without spaces, `.`, `*`, `>`, `/` or `\\`"
    )]
    InvalidName {
        /// Which name.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The server could not be reached.
    #[error("cannot connect to NATS at {url}: {message}")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// A JetStream request (stream, consumer, publish) failed.
    #[error("JetStream {operation} failed: {message}")]
    JetStream {
        /// What was asked.
        operation: &'static str,
        /// Why it failed.
        message: String,
    },
    /// An event could not be encoded.
    #[error("cannot encode the event envelope: {0}")]
    Encode(String),
}

/// Connects to `url`, retrying in the background when the server is away (async-nats
/// reconnects by itself after that).
pub async fn connect(url: &str) -> Result<async_nats::Client, NatsError> {
    validate_url(url)?;
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(2))
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis((50 * attempts as u64).min(1_000))
        })
        .connect(url)
        .await
        .map_err(|error| NatsError::Connect {
            url: url.to_owned(),
            message: error.to_string(),
        })
}

/// The stream holding every namespace's KV events (`namespace.*.component.*.endpoint.*.kv-events`),
/// on file storage, created if absent (an existing stream is used as it is).
pub async fn ensure_stream(
    jetstream: &async_nats::jetstream::Context,
    name: &str,
    max_age: Duration,
) -> Result<async_nats::jetstream::stream::Stream, NatsError> {
    let config = async_nats::jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![subjects::all_namespaces(subjects::KV_EVENT_TOPIC)],
        storage: async_nats::jetstream::stream::StorageType::File,
        max_age,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    jetstream
        .get_or_create_stream(config)
        .await
        .map_err(|error| NatsError::JetStream {
            operation: "create stream",
            message: error.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_names_are_checked() {
        assert!(validate_url("nats://127.0.0.1:4222").is_ok());
        for bad in ["127.0.0.1:4222", "nats://:4222", "nats://h:x", "tcp://h:1"] {
            assert!(validate_url(bad).is_err(), "{bad}");
        }
        let mut options = NatsOptions::new("nats://127.0.0.1:4222", "router-a");
        assert!(options.validate().is_ok());
        options.consumer = "a.b".to_owned();
        assert!(options.validate().is_err());
    }
}
