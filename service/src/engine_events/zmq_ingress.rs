//! The ingress that feeds each worker rank from its engine's ZMQ publisher.

use crate::engine_events::event_transport::{EventTransport, validate_endpoint};
use crate::engine_events::ingest_stats::IngestStats;
use crate::engine_events::ingress::{AttachedIngress, KvEventIngress};
use crate::engine_events::kv_listener::{KvListener, ListenerOptions, ListenerSpec};
use crate::partition::Partition;
use crate::worker_record::WorkerCatalogRecord;
use std::sync::Arc;
use tokio::runtime::Handle;

/// One listener per worker rank, on `transport`.
pub struct ZmqIngress {
    transport: Arc<dyn EventTransport>,
    options: ListenerOptions,
    stats: Arc<IngestStats>,
    /// Where the listeners run: this runtime (an [`IngestThread`]'s), or, when `None`, the
    /// runtime that attaches them.
    ///
    /// [`IngestThread`]: super::ingest_thread::IngestThread
    runtime: Option<Handle>,
}

impl ZmqIngress {
    /// An ingress connecting through `transport` with `options`.
    pub fn new(transport: Arc<dyn EventTransport>, options: ListenerOptions) -> Self {
        Self {
            transport,
            options,
            stats: Arc::default(),
            runtime: None,
        }
    }

    /// Runs the listeners on `runtime` (an [`IngestThread`]'s) instead of the runtime that
    /// attaches them, so that engines' events do not take the threads serving requests.
    ///
    /// [`IngestThread`]: super::ingest_thread::IngestThread
    pub fn on_runtime(self, runtime: Handle) -> Self {
        Self {
            runtime: Some(runtime),
            ..self
        }
    }

    /// What the listeners did so far.
    pub fn stats(&self) -> Arc<IngestStats> {
        Arc::clone(&self.stats)
    }
}

impl KvEventIngress for ZmqIngress {
    fn missing_metadata(&self, record: &WorkerCatalogRecord) -> Vec<String> {
        record.missing_event_metadata()
    }

    fn attach(
        &self,
        record: &WorkerCatalogRecord,
        partition: Arc<Partition>,
    ) -> Result<AttachedIngress, String> {
        let endpoints = record.listener_endpoints();
        let ranks: Vec<(u32, String)> = record
            .dp_ranks()
            .filter_map(|rank| {
                endpoints
                    .get(&rank)
                    .map(|endpoint| (rank, endpoint.clone()))
            })
            .collect();
        for (rank, endpoint) in &ranks {
            validate_endpoint(endpoint).map_err(|error| {
                format!(
                    "invalid kv_events endpoint for worker {} dp_rank {rank}: {error}",
                    record.worker_id
                )
            })?;
        }
        if let Some(endpoint) = &record.replay_endpoint {
            validate_endpoint(endpoint).map_err(|error| {
                format!(
                    "invalid replay endpoint for worker {}: {error}",
                    record.worker_id
                )
            })?;
        }
        let tasks = ranks
            .into_iter()
            .map(|(dp_rank, events_endpoint)| {
                let listener = KvListener::new(
                    ListenerSpec {
                        worker_id: record.worker_id,
                        dp_rank,
                        events_endpoint,
                        replay_endpoint: record.replay_endpoint.clone(),
                    },
                    self.options,
                    Arc::clone(&partition),
                    Arc::clone(&self.transport),
                    Arc::clone(&self.stats),
                );
                match &self.runtime {
                    Some(runtime) => runtime.spawn(listener.run()).abort_handle(),
                    None => tokio::spawn(listener.run()).abort_handle(),
                }
            })
            .collect();
        Ok(AttachedIngress::new(tasks))
    }

    fn prometheus_text(&self) -> String {
        self.stats.prometheus_text()
    }
}
