//! Warm start: the state of the first peer that answers (`GET /workers`, `GET /dump`),
//! applied before the replica reports ready; with no peer, or none answering, a cold start.

use crate::http::loopback_client::LoopbackClient;
use crate::selection::selection_service::SelectionService;
use crate::selection::snapshot::{Restored, RouterState};
use std::time::{Duration, Instant};

/// How long one peer may take, by default, to answer both requests, bodies included (the
/// `--peer-timeout-secs` flag changes it; parsing and applying the state are not bounded). A 64 × 16,384-block warm start
/// took 3.3–5.8 s on a loaded 2-core machine (BENCHMARKS.md), so this leaves ample room.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest answer body a warm start accepts from a peer, by default (1 GiB; the
/// `--peer-dump-max-mib` flag changes it). The dump of 64 workers × 16,384 cached blocks is
/// about 76 MB (BENCHMARKS.md; more where workers report shared blocks under engine ids of
/// their own), so this leaves ample room; it bounds what a starting replica allocates for a
/// peer's answer (held whole, then parsed) when the peer is much larger than expected or not
/// a router at all. A larger answer is refused before it is read and the replica starts cold
/// (or from its snapshot), saying so.
pub const DEFAULT_MAX_DUMP_BYTES: usize = 1 << 30;

/// What a warm start accepts from one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// The largest answer body ([`DEFAULT_MAX_DUMP_BYTES`] by default).
    pub max_dump_bytes: usize,
    /// How long the peer may take to answer both requests
    /// ([`DEFAULT_PEER_TIMEOUT`] by default).
    pub timeout: Duration,
}

impl Default for PeerLimits {
    fn default() -> Self {
        Self {
            max_dump_bytes: DEFAULT_MAX_DUMP_BYTES,
            timeout: DEFAULT_PEER_TIMEOUT,
        }
    }
}

/// How the replica started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartKind {
    /// From a peer's state.
    Warm {
        /// The peer's HTTP address.
        peer: String,
        /// What was applied.
        restored: Restored,
        /// Fetch and apply time.
        took: Duration,
    },
    /// Without a peer's state.
    Cold {
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for StartKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartKind::Warm {
                peer,
                restored,
                took,
            } => write!(
                f,
                "warm start from {peer}: {} workers, {} blocks in {} ms",
                restored.workers,
                restored.blocks,
                took.as_millis()
            ),
            StartKind::Cold { reason } => write!(f, "cold start: {reason}"),
        }
    }
}

/// Asks each of `peers` (HTTP addresses, `host:port` or `http://host:port`) in turn for its
/// state and applies the first one received; an answer larger than `limits.max_dump_bytes`
/// is refused, and a peer not done within `limits.timeout` given up on (either counts as not
/// answering).
pub async fn warm_start(
    service: &SelectionService,
    peers: &[String],
    limits: PeerLimits,
) -> StartKind {
    if peers.is_empty() {
        return StartKind::Cold {
            reason: "no --peer to warm from".to_owned(),
        };
    }
    let mut failures = Vec::new();
    for peer in peers {
        let started = Instant::now();
        let fetched =
            tokio::time::timeout(limits.timeout, fetch_state(peer, limits.max_dump_bytes)).await;
        let state = match fetched {
            Ok(Ok(state)) => state,
            Ok(Err(error)) => {
                failures.push(format!("{peer}: {error}"));
                continue;
            }
            Err(_) => {
                failures.push(format!(
                    "{peer}: no answer within {:?}; raise --peer-timeout-secs to wait longer",
                    limits.timeout
                ));
                continue;
            }
        };
        match state.apply(service) {
            Ok(restored) => {
                return StartKind::Warm {
                    peer: peer.clone(),
                    restored,
                    took: started.elapsed(),
                };
            }
            Err(error) => failures.push(format!("{peer}: {error}")),
        }
    }
    StartKind::Cold {
        reason: format!("no peer gave its state ({})", failures.join("; ")),
    }
}

async fn fetch_state(peer: &str, max_dump_bytes: usize) -> Result<RouterState, String> {
    let address = peer.strip_prefix("http://").unwrap_or(peer);
    let address = tokio::net::lookup_host(address)
        .await
        .map_err(|error| format!("cannot resolve: {error}"))?
        .next()
        .ok_or_else(|| "resolves to no address".to_owned())?;
    let mut client = LoopbackClient::connect(address)
        .await
        .map_err(|error| format!("cannot connect: {error}"))?
        .with_body_limit(max_dump_bytes);
    let too_large = |route: &str, error: std::io::Error| {
        if error.kind() == std::io::ErrorKind::InvalidData {
            format!("{route}: {error}; raise --peer-dump-max-mib to accept it")
        } else {
            format!("{route}: {error}")
        }
    };
    let workers = client
        .get("/workers")
        .await
        .map_err(|error| too_large("GET /workers", error))?;
    let dump = client
        .get("/dump")
        .await
        .map_err(|error| too_large("GET /dump", error))?;
    if workers.status != 200 || dump.status != 200 {
        return Err(format!(
            "answered {} to GET /workers and {} to GET /dump",
            workers.status, dump.status
        ));
    }
    RouterState::from_answers(&workers.body, &dump.body).map_err(|error| error.to_string())
}
