//! The service's state: the worker catalog, one router per partition, the reservation index
//! and the cache of `/select` results. What each route does with it is in the files named
//! after the route's concept (`worker_choice.rs`, `selection_answer.rs`, `booking_lifecycle.rs`,
//! `membership.rs`, `queries.rs`).

use crate::engine_events::ingress::{AttachedIngress, KvEventIngress};
use crate::error::ServiceError;
use crate::partition::Partition;
use crate::replica::hook::{LocalBooking, ReplicaHook};
use crate::selection::reservations::{PendingSelections, ReservationIndex};
use crate::worker_record::{PartitionKey, WorkerCatalogRecord, WorkerLifecycle};
use dynamo_kv_router::router::{RouterOptions, RouterSetup, WorkerId};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// One registered worker: its record and, when schedulable, the ingress feeding its events.
pub(crate) struct CatalogEntry {
    pub(crate) record: WorkerCatalogRecord,
    pub(crate) ingress: Option<AttachedIngress>,
}

/// The selection service: everything the HTTP routes read and change.
pub struct SelectionService {
    /// The configuration's roles and policies, for partitions made from now on (replaced by
    /// a configuration reload, see `admin`).
    pub(crate) setup: RwLock<Arc<RouterSetup>>,
    pub(crate) options: RouterOptions,
    pub(crate) ingress: Arc<dyn KvEventIngress>,
    pub(crate) catalog: RwLock<BTreeMap<u64, CatalogEntry>>,
    pub(crate) catalog_updates: Mutex<()>,
    pub(crate) partitions: RwLock<BTreeMap<PartitionKey, Arc<Partition>>>,
    pub(crate) reservations: Mutex<ReservationIndex>,
    pub(crate) pending: Mutex<PendingSelections>,
    pub(crate) observer: Option<Arc<dyn BookingObserver>>,
    /// The replica layer, when this service is one of several replicas.
    pub(crate) replica: OnceLock<Arc<dyn ReplicaHook>>,
    /// Other layers reporting on `/metrics` (the OpenAI gateway).
    pub(crate) metric_sources: RwLock<Vec<Arc<dyn MetricsSource>>>,
}

/// A layer over the service that adds its own samples to `GET /metrics`.
pub trait MetricsSource: Send + Sync {
    /// Its samples, in Prometheus text format, `HELP`/`TYPE` lines included.
    fn prometheus_text(&self) -> String;
}

/// A booking as `/select_and_reserve` made it, for in-process observers (the simulated
/// engines of `serve --simulate` compute what they are booked for).
#[derive(Clone, Debug, PartialEq)]
pub struct BookedRequest {
    /// The booking id.
    pub selection_id: String,
    /// The booked worker rank.
    pub worker: WorkerId,
    /// The prompt's tokens, when the request carried them.
    pub token_ids: Option<Vec<u32>>,
    /// The hint the worker was sent.
    pub hint: Option<dynamo_kv_router::wire::KvHint>,
}

/// Told of every booking `/select_and_reserve` makes.
pub trait BookingObserver: Send + Sync {
    /// Called after the booking is installed.
    fn booked(&self, booking: BookedRequest);
}

impl SelectionService {
    /// A service running `setup` (the configuration's roles and policies) for every partition,
    /// fed by `ingress`.
    pub fn new(
        setup: RouterSetup,
        options: RouterOptions,
        ingress: Arc<dyn KvEventIngress>,
    ) -> Self {
        Self {
            setup: RwLock::new(Arc::new(setup)),
            options,
            ingress,
            catalog: RwLock::new(BTreeMap::new()),
            catalog_updates: Mutex::new(()),
            partitions: RwLock::new(BTreeMap::new()),
            reservations: Mutex::new(ReservationIndex::default()),
            pending: Mutex::new(PendingSelections::default()),
            observer: None,
            replica: OnceLock::new(),
            metric_sources: RwLock::new(Vec::new()),
        }
    }

    /// Adds `source`'s samples to `GET /metrics`.
    pub fn add_metrics_source(&self, source: Arc<dyn MetricsSource>) {
        self.metric_sources.write().push(source);
    }

    /// The same service telling `observer` of every booking.
    pub fn with_observer(mut self, observer: Arc<dyn BookingObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The partition `key`, if a worker ever made it.
    pub fn partition(&self, key: &PartitionKey) -> Option<Arc<Partition>> {
        self.partitions.read().get(key).cloned()
    }

    /// Every partition, by key.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    /// Records, in every partition, the cache predictions its bookings queued
    /// ([`Router::settle_predictions`](dynamo_kv_router::router::Router::settle_predictions)):
    /// for a caller with time to spare, such as the gateway while a booked worker computes.
    /// Otherwise the next booking or event of the partition records them.
    pub fn settle_predictions(&self) {
        for partition in self.partitions.read().values() {
            partition.router.settle_predictions();
        }
    }

    pub(crate) fn tell_replica(
        &self,
        partition: &Partition,
        selection_id: &str,
        worker: WorkerId,
        change: LocalBooking<'_>,
    ) {
        if let Some(replica) = self.replica.get() {
            replica.local_booking(partition, selection_id, worker, change);
        }
    }

    pub(crate) fn claim(&self, selection_id: &str, key: &PartitionKey) -> Result<(), ServiceError> {
        let now = Instant::now();
        let mut reservations = self.reservations.lock();
        if reservations.due_for_sweep() {
            reservations.expire(now, self.options.booking_ttl);
        }
        reservations.claim(selection_id, key, now).map_err(|_| {
            ServiceError::Conflict(format!(
                "selection {selection_id} is already reserved or being reserved"
            ))
        })
    }

    /// The partition `key` if it has a schedulable worker; otherwise 503 as upstream.
    pub(crate) fn ready_partition(
        &self,
        key: &PartitionKey,
    ) -> Result<Arc<Partition>, ServiceError> {
        let catalog = self.catalog.read();
        let schedulable =
            |entry: &&CatalogEntry| entry.record.lifecycle == WorkerLifecycle::Schedulable;
        let ready = catalog
            .values()
            .filter(schedulable)
            .any(|entry| entry.record.is_in(key));
        if ready && let Some(partition) = self.partition(key) {
            return Ok(partition);
        }
        if catalog.values().filter(schedulable).count() == 0 {
            Err(ServiceError::NotReady(
                "no schedulable workers are available".to_owned(),
            ))
        } else {
            Err(ServiceError::NotReady(format!(
                "no schedulable workers for {key}"
            )))
        }
    }

    /// The endpoint of `worker` if that rank is schedulable in `key`.
    pub(crate) fn schedulable_endpoint(
        &self,
        worker: WorkerId,
        key: &PartitionKey,
    ) -> Result<String, ServiceError> {
        self.catalog
            .read()
            .get(&worker.worker_id)
            .map(|entry| &entry.record)
            .filter(|record| {
                record.lifecycle == WorkerLifecycle::Schedulable
                    && record.is_in(key)
                    && record.dp_ranks().contains(&worker.dp_rank)
            })
            .and_then(|record| record.endpoint.clone())
            .ok_or_else(|| {
                ServiceError::NotFound(format!(
                    "schedulable worker {} (dp_rank {}) not found for {key}",
                    worker.worker_id, worker.dp_rank
                ))
            })
    }
}
