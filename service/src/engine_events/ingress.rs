//! How a worker's KV events reach its partition's index: the service attaches an ingress to
//! every schedulable worker and detaches it when the worker leaves or changes.

use crate::partition::Partition;
use crate::worker_record::WorkerCatalogRecord;
use std::sync::Arc;

/// Feeds a worker's KV events into its partition.
pub trait KvEventIngress: Send + Sync {
    /// What `record` must carry before this ingress can feed it; a non-empty answer keeps the
    /// worker `incomplete`.
    fn missing_metadata(&self, record: &WorkerCatalogRecord) -> Vec<String>;

    /// Starts feeding `record`'s ranks into `partition`. The returned guard stops them when
    /// dropped. An error leaves nothing running.
    fn attach(
        &self,
        record: &WorkerCatalogRecord,
        partition: Arc<Partition>,
    ) -> Result<AttachedIngress, String>;

    /// The ingress's own counters in the Prometheus text format (none by default).
    fn prometheus_text(&self) -> String {
        String::new()
    }
}

/// Background tasks feeding one worker; dropping the guard stops them.
#[derive(Default)]
pub struct AttachedIngress {
    tasks: Vec<tokio::task::AbortHandle>,
}

impl AttachedIngress {
    /// A guard over `tasks`.
    pub fn new(tasks: Vec<tokio::task::AbortHandle>) -> Self {
        Self { tasks }
    }
}

impl Drop for AttachedIngress {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// An ingress that feeds nothing: for deployments that book without KV events (every worker
/// then looks cold to the router).
pub struct NoIngress;

impl KvEventIngress for NoIngress {
    fn missing_metadata(&self, _record: &WorkerCatalogRecord) -> Vec<String> {
        Vec::new()
    }

    fn attach(
        &self,
        _record: &WorkerCatalogRecord,
        _partition: Arc<Partition>,
    ) -> Result<AttachedIngress, String> {
        Ok(AttachedIngress::default())
    }
}
