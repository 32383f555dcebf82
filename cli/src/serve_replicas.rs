//! `kv-router serve` as one of several replicas: `--replica-sync-port` publishes this
//! replica's bookings, `--peer tcp://…` subscribes to a peer's, `--peer http://…` names a peer
//! to warm start from, and `--snapshot PATH` starts from and keeps a snapshot file.

use crate::command_error::CommandError;
use crate::serve_args::ServeArgs;
use kv_router_service::SelectionService;
use kv_router_service::nats::NatsIngress;
use kv_router_service::replica::warm_start::{PeerLimits, StartKind, warm_start};
use kv_router_service::replica::{ReplicaOptions, ReplicaSync};
use kv_router_service::selection::snapshot::{EventPlanePosition, RouterState, SnapshotError};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The replica flags, checked.
pub struct ReplicaSetup {
    sync_port: Option<u16>,
    sync_peers: Vec<String>,
    http_peers: Vec<String>,
    snapshot: Option<PathBuf>,
    snapshot_interval: Duration,
    peer_limits: PeerLimits,
}

/// What runs while the service serves: the replica layer and the snapshot writer.
pub struct StartedReplica {
    _sync: Option<Arc<ReplicaSync>>,
    snapshot: Option<(PathBuf, JoinHandle<()>)>,
    nats: Option<Arc<NatsIngress>>,
}

fn error(message: String) -> CommandError {
    CommandError::Serve { message }
}

impl ReplicaSetup {
    /// Reads the flags; a `--peer` that is neither `tcp://` nor `http://` is an error.
    pub fn from_args(args: &ServeArgs) -> Result<Self, CommandError> {
        let (mut sync_peers, mut http_peers) = (Vec::new(), Vec::new());
        for peer in &args.peers {
            if peer.starts_with("tcp://") {
                sync_peers.push(peer.clone());
            } else if peer.starts_with("http://") {
                http_peers.push(peer.clone());
            } else {
                return Err(error(format!(
                    "--peer {peer}: give a peer's booking-sync endpoint (tcp://host:port) or \
                     its HTTP address (http://host:port)"
                )));
            }
        }
        if !sync_peers.is_empty() && args.replica_sync_port.is_none() {
            return Err(error(
                "--peer tcp://… needs --replica-sync-port (this replica's own booking-sync port)"
                    .to_owned(),
            ));
        }
        if args.snapshot_interval == 0 {
            return Err(error(
                "--snapshot-interval must be at least 1 second".to_owned(),
            ));
        }
        if args.peer_timeout_secs == 0 {
            return Err(error(
                "--peer-timeout-secs must be at least 1 second".to_owned(),
            ));
        }
        Ok(Self {
            sync_port: args.replica_sync_port,
            sync_peers,
            http_peers,
            snapshot: args.snapshot.clone(),
            snapshot_interval: Duration::from_secs(args.snapshot_interval),
            peer_limits: PeerLimits {
                max_dump_bytes: usize::try_from(args.peer_dump_max_mib.saturating_mul(1 << 20))
                    .unwrap_or(usize::MAX),
                timeout: Duration::from_secs(args.peer_timeout_secs),
            },
        })
    }

    /// Starts the booking sync, then the state: from a peer, else the snapshot, else cold;
    /// then the NATS consumer, if any, after the restored checkpoint's position (or from the
    /// stream's start). Prints what it did.
    pub async fn start(
        self,
        service: &Arc<SelectionService>,
        host: &str,
        nats: Option<&Arc<NatsIngress>>,
        out: &mut dyn Write,
    ) -> Result<StartedReplica, CommandError> {
        let sync = match self.sync_port {
            Some(port) => {
                let options =
                    ReplicaOptions::new(format!("tcp://{host}:{port}"), self.sync_peers.clone());
                let sync = ReplicaSync::start(service, &options)
                    .await
                    .map_err(|e| error(e.to_string()))?;
                writeln!(
                    out,
                    "replica {:016x} publishing bookings on {}",
                    sync.replica_id(),
                    sync.endpoint()
                )?;
                Some(sync)
            }
            None => None,
        };
        if let Some(sync) = &sync {
            sync.set_ready(false);
        }
        let spinner = spinner("warm start: asking the peers for their state");
        let mut start = warm_start(service, &self.http_peers, self.peer_limits).await;
        let mut position = None;
        if let (StartKind::Cold { .. }, Some(path)) = (&start, &self.snapshot) {
            spinner.set_message(format!("warm start: loading {}", path.display()));
            (start, position) = load_snapshot(service, path, &start, out)?;
        }
        spinner.finish_and_clear();
        writeln!(out, "{start}")?;
        if let Some(nats) = nats {
            let resumed = nats
                .begin(position.as_ref())
                .await
                .map_err(|e| error(e.to_string()))?;
            writeln!(out, "NATS consumer {}: {resumed}", nats.options().consumer)?;
        }
        if let Some(sync) = &sync {
            sync.set_ready(true);
        }
        let snapshot = self.snapshot.map(|path| {
            let task = tokio::spawn(write_periodically(
                Arc::clone(service),
                path.clone(),
                self.snapshot_interval,
                nats.cloned(),
            ));
            (path, task)
        });
        Ok(StartedReplica {
            _sync: sync,
            snapshot,
            nats: nats.cloned(),
        })
    }
}

/// A spinner on standard error while the state loads (seconds for a large cluster), hidden
/// when standard error is not a terminal.
fn spinner(message: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Restores the snapshot at `path`; returns how the replica started and, when the snapshot
/// was restored, the event-plane position it recorded.
fn load_snapshot(
    service: &SelectionService,
    path: &std::path::Path,
    cold: &StartKind,
    out: &mut dyn Write,
) -> Result<(StartKind, Option<EventPlanePosition>), CommandError> {
    let started = Instant::now();
    let unusable = || StartKind::Cold {
        reason: format!("the snapshot {} was not usable", path.display()),
    };
    let state = match RouterState::read(path) {
        Ok(Some(state)) => state,
        Ok(None) => {
            writeln!(out, "no snapshot at {} yet", path.display())?;
            return Ok((cold.clone(), None));
        }
        Err(problem) => {
            writeln!(out, "{problem}")?;
            return Ok((unusable(), None));
        }
    };
    let position = state.event_plane.clone();
    match state.apply(service) {
        Ok(restored) => Ok((
            StartKind::Warm {
                peer: format!("snapshot {}", path.display()),
                restored,
                took: started.elapsed(),
            },
            position,
        )),
        Err(problem) => {
            writeln!(out, "{problem}")?;
            Ok((unusable(), None))
        }
    }
}

/// Writes the snapshot (through the NATS ingress when there is one: a checkpoint, then its
/// acknowledgement); returns what to print.
async fn write_snapshot(
    service: &Arc<SelectionService>,
    path: &std::path::Path,
    nats: Option<&NatsIngress>,
) -> Result<String, SnapshotError> {
    if let Some(nats) = nats {
        let written = nats.write_checkpoint(service, path).await?;
        return Ok(format!(
            "snapshot written to {} ({} blocks, stream sequence {}{})",
            path.display(),
            written.blocks,
            written.stream_seq,
            if written.acknowledged {
                ", acknowledged"
            } else {
                ""
            }
        ));
    }
    let state = RouterState::capture(service)?;
    let blocks = state.blocks();
    state.write_off_runtime(path).await?;
    Ok(format!(
        "snapshot written to {} ({blocks} blocks)",
        path.display()
    ))
}

async fn write_periodically(
    service: Arc<SelectionService>,
    path: PathBuf,
    every: Duration,
    nats: Option<Arc<NatsIngress>>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        match write_snapshot(&service, &path, nats.as_deref()).await {
            Ok(_) => {}
            Err(problem) => eprintln!("warning: cannot write the snapshot: {problem}"),
        }
    }
}

/// Completes at Ctrl-C (SIGINT) or, on Unix, SIGTERM (what orchestrators send), so that a
/// stopping replica writes its final snapshot either way.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

impl StartedReplica {
    /// Stops the periodic writer and writes the final snapshot.
    pub async fn shut_down(self, service: &Arc<SelectionService>, out: &mut dyn Write) {
        if let Some((path, task)) = self.snapshot {
            task.abort();
            let _ = match write_snapshot(service, &path, self.nats.as_deref()).await {
                Ok(written) => writeln!(out, "{written}"),
                Err(problem) => writeln!(out, "{problem}"),
            };
            let _ = out.flush();
        }
    }
}
