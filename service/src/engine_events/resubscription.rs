//! A subscription that outlives its publisher's restarts: the pure-Rust `zeromq` SUB socket
//! never notices a publisher that went away and never reconnects to one that came back on the
//! same endpoint, so a subscription that stays quiet for its `quiet` period (or fails) drops
//! its socket and subscribes afresh. Both the engines' KV-event listeners and the replicas'
//! booking-sync subscriptions run on it; publishers that send something at least once per
//! `quiet` period (replicas send heartbeats) are never resubscribed while they live.

use crate::engine_events::event_transport::{EventStream, EventTransport};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// What [`Resubscription::next`] delivers.
#[derive(Debug, PartialEq, Eq)]
pub enum Delivery {
    /// A (new) socket is subscribed: what was published while none was may be lost.
    Subscribed,
    /// A message's frames.
    Message(Vec<Bytes>),
    /// The socket was dropped, after a failure or a quiet period; a new one follows.
    Lost,
}

/// Timing of a [`Resubscription`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResubscriptionTiming {
    /// Subscribe afresh after this long without a message.
    pub quiet: Duration,
    /// Pause before retrying a failed subscription.
    pub retry_pause: Duration,
}

/// One publisher's subscription, re-created after a failure or a quiet period.
pub struct Resubscription {
    transport: Arc<dyn EventTransport>,
    endpoint: String,
    topics: Vec<String>,
    timing: ResubscriptionTiming,
    stream: Option<Box<dyn EventStream>>,
}

impl Resubscription {
    /// Subscribes (on the first [`next`](Self::next)) to `topics` of the publisher at
    /// `endpoint` (the empty topic is every message).
    pub fn new(
        transport: Arc<dyn EventTransport>,
        endpoint: impl Into<String>,
        topics: Vec<String>,
        timing: ResubscriptionTiming,
    ) -> Self {
        Self {
            transport,
            endpoint: endpoint.into(),
            topics,
            timing,
            stream: None,
        }
    }

    /// The publisher's endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next thing that happened to the subscription; subscribing waits until the
    /// publisher is reachable, retrying failures after the retry pause.
    pub async fn next(&mut self) -> Delivery {
        let Some(stream) = &mut self.stream else {
            loop {
                match self.transport.subscribe(&self.endpoint, &self.topics).await {
                    Ok(stream) => {
                        self.stream = Some(stream);
                        return Delivery::Subscribed;
                    }
                    Err(error) => {
                        tracing::warn!(endpoint = %self.endpoint, %error, "subscription failed; retrying");
                        tokio::time::sleep(self.timing.retry_pause).await;
                    }
                }
            }
        };
        match tokio::time::timeout(self.timing.quiet, stream.next()).await {
            Ok(Ok(frames)) => Delivery::Message(frames),
            Ok(Err(error)) => {
                tracing::warn!(endpoint = %self.endpoint, %error, "subscription failed; subscribing afresh");
                self.stream = None;
                tokio::time::sleep(self.timing.retry_pause).await;
                Delivery::Lost
            }
            Err(_) => {
                tracing::debug!(endpoint = %self.endpoint, quiet = ?self.timing.quiet, "publisher quiet; subscribing afresh");
                self.stream = None;
                Delivery::Lost
            }
        }
    }
}
