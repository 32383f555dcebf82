//! The peers a replica subscribes to: one ZMQ SUB socket and task per peer (the `zeromq`
//! crate cannot disconnect one endpoint of a socket, so removing a peer ends its task), each
//! handing decoded events to the bounded inbound queue without waiting.

use super::stats::ReplicaStats;
use super::wire::{REPLICA_TOPIC, ScopedBookingEvent};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{Socket, SocketRecv, SubSocket};

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
    connected: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
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
    /// Messages received from it.
    pub received: u64,
}

/// The subscribed peers.
pub struct Peers {
    peers: Mutex<BTreeMap<String, Peer>>,
    inbound: mpsc::Sender<ScopedBookingEvent>,
    stats: Arc<ReplicaStats>,
}

impl Peers {
    /// No peers yet; received events go to `inbound`.
    pub fn new(inbound: mpsc::Sender<ScopedBookingEvent>, stats: Arc<ReplicaStats>) -> Self {
        Self {
            peers: Mutex::new(BTreeMap::new()),
            inbound,
            stats,
        }
    }

    /// Subscribes to `endpoint`; `Ok(false)` if it already was.
    pub fn add(&self, endpoint: &str) -> Result<bool, PeerError> {
        validate(endpoint)?;
        let mut peers = self.peers.lock();
        if peers.contains_key(endpoint) {
            return Ok(false);
        }
        let connected = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(subscribe(
            endpoint.to_owned(),
            self.inbound.clone(),
            Arc::clone(&self.stats),
            Arc::clone(&connected),
            Arc::clone(&received),
        ));
        peers.insert(
            endpoint.to_owned(),
            Peer {
                task,
                connected,
                received,
            },
        );
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
                connected: peer.connected.load(Ordering::Relaxed),
                received: peer.received.load(Ordering::Relaxed),
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

async fn subscribe(
    endpoint: String,
    inbound: mpsc::Sender<ScopedBookingEvent>,
    stats: Arc<ReplicaStats>,
    connected: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
) {
    let mut socket = SubSocket::new();
    let topic = String::from_utf8_lossy(REPLICA_TOPIC).into_owned();
    if let Err(error) = socket.subscribe(&topic).await {
        tracing::error!(peer = %endpoint, %error, "cannot subscribe to the replica peer");
        return;
    }
    // `connect` retries while the peer refuses connections.
    if let Err(error) = socket.connect(&endpoint).await {
        tracing::warn!(peer = %endpoint, %error, "cannot connect to the replica peer");
        return;
    }
    connected.store(true, Ordering::Relaxed);
    loop {
        let message = match socket.recv().await {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(peer = %endpoint, %error, "replica peer subscription failed");
                connected.store(false, Ordering::Relaxed);
                return;
            }
        };
        received.fetch_add(1, Ordering::Relaxed);
        let frames: Vec<&[u8]> = message.iter().map(|frame| frame.as_ref()).collect();
        match ScopedBookingEvent::decode(&frames) {
            Ok(event) => {
                if inbound.try_send(event).is_err() {
                    ReplicaStats::bump(&stats.inbound_dropped);
                }
            }
            Err(error) => {
                ReplicaStats::bump(&stats.garbage);
                tracing::debug!(peer = %endpoint, %error, "dropping a replica message");
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
