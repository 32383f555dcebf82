//! Swapping a new setup into every partition's router, all or nothing, while no worker
//! registers or leaves.

use crate::selection::selection_service::SelectionService;
use crate::worker_record::WorkerLifecycle;
use dynamo_kv_router::router::{Role, RouterSetup};
use std::sync::Arc;

/// Why the service kept its policies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicySwapError {
    /// The new setup has no entry for a role that schedulable workers serve.
    #[error(
        "role `{role}` has no worker_selection entry in the new configuration, but schedulable workers serve it (worker ids: {}); keep the role, or DELETE /workers/{{id}} for each of them first",
        .worker_ids.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    )]
    RoleInUse {
        /// The role.
        role: Role,
        /// Its schedulable workers.
        worker_ids: Vec<u64>,
    },
    /// A partition's router refused the setup although the catalog allowed it.
    #[error("partition {partition} kept its policies: {message}")]
    Partition {
        /// The partition.
        partition: String,
        /// The router's reason.
        message: String,
    },
}

impl SelectionService {
    /// Replaces the policies of every partition, and of partitions made from now on, with
    /// `setup`'s. Each partition keeps its own block size, index, workers and reservations.
    /// Registrations wait while it runs, so a worker cannot join a role that is going away.
    /// Workers that were kept out because their role had no entry are reconciled again, and
    /// become schedulable when the new setup has one.
    pub fn replace_policies(&self, setup: RouterSetup) -> Result<(), PolicySwapError> {
        let _update = self.catalog_updates.lock();
        self.check_roles_in_use(&setup)?;
        for partition in self.partitions() {
            let mut partition_setup = setup.clone();
            partition_setup.block_size = partition.block_size;
            partition
                .router
                .replace_policies(partition_setup)
                .map_err(|error| PolicySwapError::Partition {
                    partition: partition.key.to_string(),
                    message: error.to_string(),
                })?;
        }
        *self.setup.write() = Arc::new(setup);
        self.admit_roles_now_configured();
        Ok(())
    }

    /// `Err` when a schedulable worker's role has no entry in `setup`.
    fn check_roles_in_use(&self, setup: &RouterSetup) -> Result<(), PolicySwapError> {
        let catalog = self.catalog.read();
        let mut orphaned: Vec<(Role, u64)> = catalog
            .values()
            .map(|entry| &entry.record)
            .filter(|record| record.lifecycle == WorkerLifecycle::Schedulable)
            .filter(|record| !setup.roles.contains_key(&record.role.0))
            .map(|record| (record.role.0, record.worker_id))
            .collect();
        orphaned.sort();
        match orphaned.first() {
            None => Ok(()),
            Some(&(role, _)) => Err(PolicySwapError::RoleInUse {
                role,
                worker_ids: orphaned
                    .iter()
                    .filter(|(other, _)| *other == role)
                    .map(|(_, id)| *id)
                    .collect(),
            }),
        }
    }

    /// Reconciles again the incomplete workers whose role the setup now configures.
    fn admit_roles_now_configured(&self) {
        let setup = Arc::clone(&self.setup.read());
        let waiting: Vec<_> = self
            .catalog
            .read()
            .values()
            .map(|entry| &entry.record)
            .filter(|record| record.lifecycle != WorkerLifecycle::Schedulable)
            .filter(|record| setup.roles.contains_key(&record.role.0))
            .cloned()
            .collect();
        for record in waiting {
            let worker_id = record.worker_id;
            match self.reconcile(record) {
                Ok(record) => tracing::info!(
                    worker_id,
                    lifecycle = ?record.lifecycle,
                    "worker reconciled after a configuration reload"
                ),
                Err(error) => tracing::warn!(
                    worker_id,
                    %error,
                    "worker could not be reconciled after a configuration reload"
                ),
            }
        }
    }
}
