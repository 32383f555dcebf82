//! The peers a replica subscribes to: one ZMQ SUB subscription and task per peer (the
//! `zeromq` crate cannot disconnect one endpoint of a socket, so removing a peer ends its
//! task), each handing decoded events to the bounded inbound queue without waiting. A peer
//! silent for the quiet period (no event, no heartbeat) is subscribed to afresh
//! ([`Resubscription`], as the engines' listeners do): a peer that restarted on the same
//! endpoint is followed again.

use super::stats::ReplicaStats;
use super::wire::{HEARTBEAT_TOPIC, REPLICA_TOPIC, ScopedBookingEvent};
use crate::engine_events::event_transport::ZmqTransport;
use crate::engine_events::resubscription::{Delivery, Resubscription, ResubscriptionTiming};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Pause before retrying a peer subscription that failed.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Why a peer endpoint was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PeerError {
    /// Not a `tcp://host:port` endpoint.
    #[error(
        "invalid replica peer endpoint `{0}`: expected tcp://HOST:PORT (the peer's --replica-sync-port)"
    )]
    InvalidEndpoint(String),
}

/// One subscribed peer.
struct Peer {
    task: JoinHandle<()>,
    state: Arc<PeerState>,
}

/// What a peer's task reports.
#[derive(Default)]
struct PeerState {
    connected: AtomicBool,
    received: AtomicU64,
    subscriptions: AtomicU64,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A peer as `GET /replica_sync/info` reports it.
#[derive(Clone, Debug, serde::Serialize, PartialEq, Eq)]
pub struct PeerStatus {
    /// Its booking-sync endpoint.
    pub endpoint: String,
    /// Whether the subscription is connected.
    pub connected: bool,
    /// Messages received from it (heartbeats not counted).
    pub received: u64,
    /// Times it was subscribed to (more than once: it went quiet or failed, and came back).
    pub subscriptions: u64,
}

/// The subscribed peers.
pub struct Peers {
    peers: Mutex<BTreeMap<String, Peer>>,
    inbound: mpsc::Sender<ScopedBookingEvent>,
    stats: Arc<ReplicaStats>,
    quiet: Duration,
}

impl Peers {
    /// No peers yet; received events go to `inbound`; a peer silent for `quiet` is
    /// subscribed to afresh.
    pub fn new(
        inbound: mpsc::Sender<ScopedBookingEvent>,
        stats: Arc<ReplicaStats>,
        quiet: Duration,
    ) -> Self {
        Self {
            peers: Mutex::new(BTreeMap::new()),
            inbound,
            stats,
            quiet,
        }
    }

    /// Subscribes to `endpoint`; `Ok(false)` if it already was.
    pub fn add(&self, endpoint: &str) -> Result<bool, PeerError> {
        validate(endpoint)?;
        let mut peers = self.peers.lock();
        if peers.contains_key(endpoint) {
            return Ok(false);
        }
        let state = Arc::new(PeerState::default());
        let subscription = Resubscription::new(
            Arc::new(ZmqTransport),
            endpoint,
            [REPLICA_TOPIC, HEARTBEAT_TOPIC]
                .map(|topic| String::from_utf8_lossy(topic).into_owned())
                .to_vec(),
            ResubscriptionTiming {
                quiet: self.quiet,
                retry_pause: RETRY_PAUSE,
            },
        );
        let task = tokio::spawn(follow(
            subscription,
            self.inbound.clone(),
            Arc::clone(&self.stats),
            Arc::clone(&state),
        ));
        peers.insert(endpoint.to_owned(), Peer { task, state });
        tracing::info!(peer = endpoint, "replica peer added");
        Ok(true)
    }

    /// Unsubscribes from `endpoint`; `Ok(false)` if it was not a peer.
    pub fn remove(&self, endpoint: &str) -> Result<bool, PeerError> {
        validate(endpoint)?;
        let removed = self.peers.lock().remove(endpoint).is_some();
        if removed {
            tracing::info!(peer = endpoint, "replica peer removed");
        }
        Ok(removed)
    }

    /// The peer endpoints, sorted.
    pub fn endpoints(&self) -> Vec<String> {
        self.peers.lock().keys().cloned().collect()
    }

    /// Every peer's status.
    pub fn statuses(&self) -> Vec<PeerStatus> {
        self.peers
            .lock()
            .iter()
            .map(|(endpoint, peer)| PeerStatus {
                endpoint: endpoint.clone(),
                connected: peer.state.connected.load(Ordering::Relaxed),
                received: peer.state.received.load(Ordering::Relaxed),
                subscriptions: peer.state.subscriptions.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// How many peers.
    pub fn len(&self) -> usize {
        self.peers.lock().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn validate(endpoint: &str) -> Result<(), PeerError> {
    let invalid = || PeerError::InvalidEndpoint(endpoint.to_owned());
    let rest = endpoint.strip_prefix("tcp://").ok_or_else(invalid)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(invalid)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(invalid());
    }
    Ok(())
}

/// Follows one peer: its booking events go to `inbound`, its heartbeats only keep the
/// subscription from looking quiet.
async fn follow(
    mut subscription: Resubscription,
    inbound: mpsc::Sender<ScopedBookingEvent>,
    stats: Arc<ReplicaStats>,
    state: Arc<PeerState>,
) {
    loop {
        let frames = match subscription.next().await {
            Delivery::Subscribed => {
                state.subscriptions.fetch_add(1, Ordering::Relaxed);
                state.connected.store(true, Ordering::Relaxed);
                continue;
            }
            Delivery::Lost => {
                state.connected.store(false, Ordering::Relaxed);
                continue;
            }
            Delivery::Message(frames) => frames,
        };
        if frames.first().is_some_and(|topic| topic == HEARTBEAT_TOPIC) {
            continue;
        }
        state.received.fetch_add(1, Ordering::Relaxed);
        let frames: Vec<&[u8]> = frames.iter().map(|frame| frame.as_ref()).collect();
        match ScopedBookingEvent::decode(&frames) {
            Ok(event) => {
                if inbound.try_send(event).is_err() {
                    ReplicaStats::bump(&stats.inbound_dropped);
                }
            }
            Err(error) => {
                ReplicaStats::bump(&stats.garbage);
                tracing::debug!(peer = %subscription.endpoint(), %error, "dropping a replica message");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_tcp_host_port() {
        assert!(validate("tcp://127.0.0.1:5600").is_ok());
        for bad in ["127.0.0.1:5600", "tcp://:5600", "tcp://host", "http://h:1"] {
            assert_eq!(
                validate(bad),
                Err(PeerError::InvalidEndpoint(bad.to_owned()))
            );
        }
    }
}
