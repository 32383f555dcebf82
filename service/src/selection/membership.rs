//! Worker membership: `POST`, `PATCH`, `DELETE /workers` and `GET /workers`.

use crate::error::ServiceError;
use crate::partition::Partition;
use crate::selection::selection_service::{CatalogEntry, SelectionService};
use crate::worker_record::{
    MAX_DATA_PARALLEL_RANKS, WorkerCatalogRecord, WorkerLifecycle, WorkerPatchRequest,
    WorkerRequest,
};
use dynamo_kv_router::router::{RouterSetup, WorkerCapabilities, WorkerId, WorkerInfo};
use std::sync::Arc;

impl SelectionService {
    /// `POST /workers`: registers (or re-registers) a worker and answers its stored record. A
    /// worker with missing metadata is stored `incomplete`, with the reasons.
    pub fn upsert_worker(
        &self,
        request: WorkerRequest,
    ) -> Result<WorkerCatalogRecord, ServiceError> {
        let record = WorkerCatalogRecord::new(request);
        let _update = self.catalog_updates.lock();
        self.reconcile(record)
    }

    /// `PATCH /workers/{id}`: changes some fields of a registered worker.
    pub fn patch_worker(
        &self,
        worker_id: u64,
        patch: WorkerPatchRequest,
    ) -> Result<WorkerCatalogRecord, ServiceError> {
        let _update = self.catalog_updates.lock();
        let mut record = self
            .catalog
            .read()
            .get(&worker_id)
            .map(|entry| entry.record.clone())
            .ok_or_else(|| worker_not_found(worker_id))?;
        record.apply_patch(patch);
        self.reconcile(record)
    }

    /// `DELETE /workers/{id}`: stops its event listeners, drops its blocks and the load of its
    /// reservations, and answers its last record (`unschedulable`).
    pub fn delete_worker(&self, worker_id: u64) -> Result<WorkerCatalogRecord, ServiceError> {
        let _update = self.catalog_updates.lock();
        let mut entry = self
            .catalog
            .write()
            .remove(&worker_id)
            .ok_or_else(|| worker_not_found(worker_id))?;
        self.retire(&mut entry);
        let mut record = entry.record;
        record.lifecycle = WorkerLifecycle::Unschedulable;
        record.not_schedulable_reasons.clear();
        Ok(record)
    }

    /// `GET /workers`: the registered workers, by id, optionally of one model and group.
    pub fn list_workers(
        &self,
        model_name: Option<&str>,
        routing_group: Option<&str>,
    ) -> Vec<WorkerCatalogRecord> {
        self.catalog
            .read()
            .values()
            .map(|entry| &entry.record)
            .filter(|record| model_name.is_none_or(|name| record.model_name == name))
            .filter(|record| routing_group.is_none_or(|group| record.routing_group == group))
            .cloned()
            .collect()
    }

    /// Replaces whatever the catalog held for the record's worker with the record, checked.
    pub(crate) fn reconcile(
        &self,
        mut record: WorkerCatalogRecord,
    ) -> Result<WorkerCatalogRecord, ServiceError> {
        if record.dp_size() > MAX_DATA_PARALLEL_RANKS {
            return Err(ServiceError::BadRequest(format!(
                "data_parallel_size {} exceeds the maximum {MAX_DATA_PARALLEL_RANKS}",
                record.dp_size()
            )));
        }
        let previous = self.catalog.write().remove(&record.worker_id);
        if let Some(mut previous) = previous {
            self.retire(&mut previous);
        }
        record.not_schedulable_reasons = record.missing_metadata();
        record
            .not_schedulable_reasons
            .extend(self.ingress.missing_metadata(&record));
        if !self.setup.read().roles.contains_key(&record.role.0) {
            record.not_schedulable_reasons.push(format!(
                "role `{}` has no worker_selection entry in the router configuration",
                record.role.0
            ));
        }
        let mut ingress = None;
        if record.not_schedulable_reasons.is_empty() {
            match self.admit(&record) {
                Ok(attached) => ingress = Some(attached),
                Err(reason) => record
                    .not_schedulable_reasons
                    .push(format!("reconciliation failed: {reason}")),
            }
        }
        record.lifecycle = if record.not_schedulable_reasons.is_empty() {
            WorkerLifecycle::Schedulable
        } else {
            WorkerLifecycle::Incomplete
        };
        self.catalog.write().insert(
            record.worker_id,
            CatalogEntry {
                record: record.clone(),
                ingress,
            },
        );
        Ok(record)
    }

    /// Registers a complete record's ranks in its partition and attaches its event ingress.
    /// On error nothing stays registered.
    fn admit(
        &self,
        record: &WorkerCatalogRecord,
    ) -> Result<crate::engine_events::ingress::AttachedIngress, String> {
        let partition = self.ensure_partition(record)?;
        let mut registered = Vec::new();
        for rank in record.dp_ranks() {
            let id = WorkerId::new(record.worker_id, rank);
            let capabilities = WorkerCapabilities {
                router_hint: record.accepts_hints(),
                router_hint_source_control_endpoint: record
                    .router_hint_source_control_endpoints
                    .get(&rank)
                    .filter(|endpoint| !endpoint.is_empty())
                    .cloned(),
            };
            match partition
                .router
                .register_worker(WorkerInfo::new(id, record.role.0, capabilities))
            {
                Ok(()) => registered.push(id),
                Err(error) => {
                    unregister(&partition, &registered);
                    return Err(error.to_string());
                }
            }
        }
        self.ingress
            .attach(record, Arc::clone(&partition))
            .inspect_err(|_| unregister(&partition, &registered))
    }

    /// The record's partition, created on first use; its block size must match.
    fn ensure_partition(&self, record: &WorkerCatalogRecord) -> Result<Arc<Partition>, String> {
        let key = record.partition();
        let block_size = record.block_size.unwrap_or_default();
        let eagle = record.is_eagle.unwrap_or(false);
        let mut partitions = self.partitions.write();
        let partition = partitions.entry(key.clone()).or_insert_with(|| {
            let partition = Arc::new(Partition::new(
                key.clone(),
                RouterSetup::clone(&self.setup.read()),
                self.options,
                block_size,
                eagle,
            ));
            crate::shadow::shadow_evaluator::start_shadow_evaluator(&partition);
            partition
        });
        if partition.block_size != block_size {
            return Err(format!(
                "block_size mismatch for {key}: existing={} requested={block_size}",
                partition.block_size
            ));
        }
        if partition.eagle != eagle {
            return Err(format!(
                "is_eagle mismatch for {key}: existing={} requested={eagle}",
                partition.eagle
            ));
        }
        Ok(Arc::clone(partition))
    }

    /// Takes a departing (or replaced) worker out: stops its ingress, drops its ranks with
    /// their blocks, and releases its reservations.
    fn retire(&self, entry: &mut CatalogEntry) {
        drop(entry.ingress.take());
        let record = &entry.record;
        if record.lifecycle != WorkerLifecycle::Schedulable {
            return;
        }
        let Some(partition) = self.partition(&record.partition()) else {
            return;
        };
        let ranks: Vec<WorkerId> = record
            .dp_ranks()
            .map(|rank| WorkerId::new(record.worker_id, rank))
            .collect();
        unregister(&partition, &ranks);
        for id in self.reservations.lock().remove_worker(record.worker_id) {
            partition.router.release(&id);
        }
    }
}

fn unregister(partition: &Partition, ranks: &[WorkerId]) {
    for rank in ranks {
        // A rank that is not registered has nothing to drop.
        let _ = partition.router.deregister_worker(*rank);
    }
}

fn worker_not_found(worker_id: u64) -> ServiceError {
    ServiceError::NotFound(format!("worker {worker_id} not found"))
}
