//! The service's state and what each route does with it: the worker catalog, one router per
//! partition, the reservation index and the cache of `/select` results.

use crate::error::ServiceError;
use crate::ingress::{AttachedIngress, KvEventIngress};
use crate::partition::Partition;
use crate::replica::LocalBooking;
use crate::reservations::{PendingSelection, PendingSelections, ReservationIndex};
use crate::selection_request::{ReservationRequest, SelectRequest, WorkerRank};
use crate::selection_response::{OverlapSummary, ReservationResponse, SelectResponse};
use crate::worker_record::{PartitionKey, WorkerCatalogRecord, WorkerLifecycle};
use dynamo_kv_router::kv::SequenceHash;
use dynamo_kv_router::router::{
    BookError, Booking, Prompt, Role, RouteRequest, RouterOptions, RouterSetup, WorkerId,
};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// One registered worker: its record and, when schedulable, the ingress feeding its events.
pub(crate) struct CatalogEntry {
    pub(crate) record: WorkerCatalogRecord,
    pub(crate) ingress: Option<AttachedIngress>,
}

/// The selection service: everything the HTTP routes read and change.
pub struct SelectionService {
    pub(crate) setup: RouterSetup,
    pub(crate) options: RouterOptions,
    pub(crate) ingress: Arc<dyn KvEventIngress>,
    pub(crate) catalog: RwLock<BTreeMap<u64, CatalogEntry>>,
    pub(crate) catalog_updates: Mutex<()>,
    pub(crate) partitions: RwLock<BTreeMap<PartitionKey, Arc<Partition>>>,
    pub(crate) reservations: Mutex<ReservationIndex>,
    pub(crate) pending: Mutex<PendingSelections>,
    pub(crate) observer: Option<Arc<dyn BookingObserver>>,
    /// The replica layer, when this service is one of several replicas.
    pub(crate) replica: std::sync::OnceLock<Arc<dyn crate::replica::ReplicaHook>>,
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

/// Whether a selection books load or only chooses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Admission {
    Book,
    Query,
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
            setup,
            options,
            ingress,
            catalog: RwLock::new(BTreeMap::new()),
            catalog_updates: Mutex::new(()),
            partitions: RwLock::new(BTreeMap::new()),
            reservations: Mutex::new(ReservationIndex::default()),
            pending: Mutex::new(PendingSelections::default()),
            observer: None,
            replica: std::sync::OnceLock::new(),
        }
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

    /// `POST /select`: chooses a worker without booking. With a `selection_id`, the choice is
    /// cached so that `POST /reservations` can book it.
    pub fn select(&self, request: SelectRequest) -> Result<SelectResponse, ServiceError> {
        self.run_selection(request, Admission::Query)
    }

    /// `POST /select_and_reserve`: chooses a worker, books load on it and runs the role's hint
    /// policies.
    pub fn select_and_reserve(
        &self,
        request: SelectRequest,
    ) -> Result<SelectResponse, ServiceError> {
        self.run_selection(request, Admission::Book)
    }

    fn run_selection(
        &self,
        mut request: SelectRequest,
        admission: Admission,
    ) -> Result<SelectResponse, ServiceError> {
        let key = PartitionKey {
            model_name: std::mem::take(&mut request.model_name),
            routing_group: std::mem::take(&mut request.routing_group),
        };
        let prompt_request = request.take_prompt();
        let partition = self.ready_partition(&key)?;
        let role = request.role.unwrap_or_default().0;
        let selection_id = match admission {
            Admission::Book => Some(
                request
                    .selection_id
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            ),
            Admission::Query => request.selection_id.clone(),
        };
        if admission == Admission::Book
            && let Some(id) = &selection_id
        {
            self.claim(id, &key)?;
        }
        let result = self.select_on(
            &partition,
            &request,
            &prompt_request,
            role,
            admission,
            selection_id.clone(),
        );
        if admission == Admission::Book
            && let Some(id) = &selection_id
        {
            let mut reservations = self.reservations.lock();
            match &result {
                Ok((booking, _)) => reservations.install(id, booking.worker),
                Err(_) => reservations.abandon(id),
            }
        }
        let (booking, prompt) = result?;
        if admission == Admission::Query
            && let Some(id) = &selection_id
        {
            self.pending.lock().insert(
                key.clone(),
                id.clone(),
                PendingSelection {
                    worker: booking.worker,
                    role,
                    sequence_hashes: prompt.sequence_hashes.clone(),
                    isl_tokens: prompt.isl_tokens,
                    session: request.session(),
                    at: Instant::now(),
                },
            );
        }
        if admission == Admission::Book
            && let (Some(observer), Some(id)) = (&self.observer, &selection_id)
        {
            observer.booked(BookedRequest {
                selection_id: id.clone(),
                worker: booking.worker,
                token_ids: prompt_request.routing_tokens().map(<[u32]>::to_vec),
                hint: booking.hint.clone(),
            });
        }
        if admission == Admission::Book
            && let Some(id) = &selection_id
        {
            let cached = booking.stats.cached_blocks * partition.block_size as usize;
            self.tell_replica(
                &partition,
                id,
                booking.worker,
                LocalBooking::Booked {
                    sequence_hashes: &prompt.sequence_hashes,
                    prefill_tokens: prompt.isl_tokens.saturating_sub(cached),
                },
            );
        }
        self.response(&partition, booking, prompt, admission, selection_id)
    }

    fn tell_replica(
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

    fn claim(&self, selection_id: &str, key: &PartitionKey) -> Result<(), ServiceError> {
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

    fn select_on(
        &self,
        partition: &Partition,
        request: &SelectRequest,
        prompt: &crate::selection_request::PromptRequest,
        role: Role,
        admission: Admission,
        selection_id: Option<String>,
    ) -> Result<(Booking, crate::prompt::NormalizedPrompt), ServiceError> {
        let prompt = prompt.normalize(partition.block_size, partition.eagle)?;
        let route = RouteRequest::new(
            selection_id.unwrap_or_default(),
            role,
            Prompt::Blocks {
                sequence_hashes: prompt.sequence_hashes.clone(),
                prompt_tokens: prompt.isl_tokens,
            },
        )
        .with_session(request.session());
        if let Some(pinned) = request.pinned_worker {
            return self.select_pinned(partition, request, &route, pinned, admission, prompt);
        }
        self.check_allowed(partition, request, role)?;
        let booking = match admission {
            Admission::Book => partition.router.book(&route),
            Admission::Query => partition.router.preview(&route),
        }
        .map_err(|error| book_error(error, &partition.key))?;
        Ok((booking, prompt))
    }

    /// A pinned worker is booked (or, for a query, reported) as is: no policy runs.
    fn select_pinned(
        &self,
        partition: &Partition,
        request: &SelectRequest,
        route: &RouteRequest,
        pinned: WorkerRank,
        admission: Admission,
        prompt: crate::prompt::NormalizedPrompt,
    ) -> Result<(Booking, crate::prompt::NormalizedPrompt), ServiceError> {
        if let Some(allowed) = &request.allowed_worker_ids
            && !allowed.contains(&pinned.worker_id)
        {
            return Err(ServiceError::BadRequest(format!(
                "pinned worker {} is not in allowed_worker_ids",
                pinned.worker_id
            )));
        }
        let worker = WorkerId::new(pinned.worker_id, pinned.dp_rank);
        self.schedulable_endpoint(worker, &partition.key)?;
        let booking = match admission {
            Admission::Book => partition.router.book_on(route, worker, None),
            Admission::Query => {
                let cached = partition
                    .router
                    .cached_prefix(worker, &prompt.sequence_hashes);
                Ok(Booking {
                    request_id: route.request_id.clone(),
                    role: route.role,
                    worker,
                    hint: None,
                    committed_kv_copy: None,
                    stats: dynamo_kv_router::router::BookingStats {
                        blocks: prompt.sequence_hashes.len(),
                        cached_blocks: cached,
                        ..Default::default()
                    },
                })
            }
        }
        .map_err(|error| book_error(error, &partition.key))?;
        Ok((booking, prompt))
    }

    /// `allowed_worker_ids` is honoured when it admits every schedulable worker of the role
    /// (nothing to filter) and refused otherwise: this router's selection policies always see
    /// every worker of the role.
    fn check_allowed(
        &self,
        partition: &Partition,
        request: &SelectRequest,
        role: Role,
    ) -> Result<(), ServiceError> {
        let Some(allowed) = &request.allowed_worker_ids else {
            return Ok(());
        };
        let role_workers: Vec<u64> = self
            .catalog
            .read()
            .values()
            .filter(|entry| {
                entry.record.lifecycle == WorkerLifecycle::Schedulable
                    && entry.record.partition() == partition.key
                    && entry.record.role.0 == role
            })
            .map(|entry| entry.record.worker_id)
            .collect();
        if !role_workers.iter().any(|id| allowed.contains(id)) {
            return Err(ServiceError::NotReady(format!(
                "no schedulable `{role}` worker of {} is in allowed_worker_ids",
                partition.key
            )));
        }
        if role_workers.iter().all(|id| allowed.contains(id)) {
            return Ok(());
        }
        Err(ServiceError::BadRequest(format!(
            "allowed_worker_ids excludes some schedulable `{role}` workers of {}; this router \
             cannot restrict its selection policies to a subset: pin one worker with \
             pinned_worker, or use a routing_group per subset",
            partition.key
        )))
    }

    fn response(
        &self,
        partition: &Partition,
        booking: Booking,
        prompt: crate::prompt::NormalizedPrompt,
        admission: Admission,
        selection_id: Option<String>,
    ) -> Result<SelectResponse, ServiceError> {
        let block_size = partition.block_size;
        let worker = booking.worker;
        let record = self
            .catalog
            .read()
            .get(&worker.worker_id)
            .map(|entry| entry.record.clone())
            .ok_or_else(|| {
                ServiceError::Internal(format!(
                    "selected worker {} is no longer schedulable",
                    worker.worker_id
                ))
            })?;
        let endpoint = record.endpoint.clone().unwrap_or_default();
        let mut dp = BTreeMap::new();
        for rank in record.dp_ranks() {
            let blocks = if rank == worker.dp_rank {
                booking.stats.cached_blocks
            } else {
                partition.router.cached_prefix(
                    WorkerId::new(worker.worker_id, rank),
                    &prompt.sequence_hashes,
                )
            };
            dp.insert(rank.to_string(), tokens_of(blocks, block_size));
        }
        let gpu = tokens_of(booking.stats.cached_blocks, block_size);
        let cached_tokens = booking.stats.cached_blocks * block_size as usize;
        let effective_prefill_tokens = prompt.isl_tokens.saturating_sub(cached_tokens);
        let request_blocks = prompt.sequence_hashes.len() as u64;
        let active_blocks = partition
            .router
            .load_of(worker)
            .map_or(0, |load| load.active_blocks);
        let booked = admission == Admission::Book;
        let potential_decode_blocks = if booked {
            active_blocks
        } else {
            active_blocks + request_blocks
        };
        Ok(SelectResponse {
            selection_id,
            sequence_hashes: booked.then_some(prompt.reported_hashes),
            isl_tokens: booked.then_some(prompt.isl_tokens),
            track_prefill_tokens: booked.then_some(true),
            model_name: partition.key.model_name.clone(),
            routing_group: partition.key.routing_group.clone(),
            worker_id: worker.worker_id,
            dp_rank: worker.dp_rank,
            endpoint,
            block_size,
            overlap: OverlapSummary {
                longest_matched: gpu,
                gpu,
                dp,
                cpu: gpu,
                disk: gpu,
            },
            effective_prefill_tokens,
            potential_decode_blocks,
            kv_hint: booking.hint,
        })
    }

    /// `POST /reservations`: books the selection cached under `selection_id`, or (with
    /// `worker_id`) the named worker.
    pub fn create_reservation(
        &self,
        mut request: ReservationRequest,
    ) -> Result<ReservationResponse, ServiceError> {
        let prompt = request.take_prompt();
        let key = PartitionKey {
            model_name: request.model_name.clone(),
            routing_group: request.routing_group.clone(),
        };
        let partition = self.ready_partition(&key)?;
        let selection_id = request.selection_id.clone();
        let (route, worker, prefill) = match request.worker_id {
            Some(worker_id) => {
                self.pending.lock().remove(&key, &selection_id);
                self.explicit_booking(&partition, &request, &prompt, worker_id)?
            }
            None => {
                let pending = self
                    .pending
                    .lock()
                    .get(&key, &selection_id, Instant::now())
                    .ok_or_else(|| {
                        ServiceError::NotFound(format!(
                            "no pending selection {selection_id} for {key} (expired, already \
                             used, or never selected)"
                        ))
                    })?;
                let route = RouteRequest::new(
                    selection_id.clone(),
                    pending.role,
                    Prompt::Blocks {
                        sequence_hashes: pending.sequence_hashes,
                        prompt_tokens: pending.isl_tokens,
                    },
                )
                .with_session(pending.session);
                (route, pending.worker, None)
            }
        };
        let endpoint = self.schedulable_endpoint(worker, &key)?;
        self.claim(&selection_id, &key)?;
        let booked = partition.router.book_on(&route, worker, prefill);
        let mut reservations = self.reservations.lock();
        let booking = match booked {
            Ok(booking) => {
                reservations.install(&selection_id, booking.worker);
                booking
            }
            Err(error) => {
                reservations.abandon(&selection_id);
                return Err(book_error(error, &key));
            }
        };
        drop(reservations);
        if let Prompt::Blocks {
            sequence_hashes,
            prompt_tokens,
        } = &route.prompt
        {
            let cached = booking.stats.cached_blocks * partition.block_size as usize;
            self.tell_replica(
                &partition,
                &selection_id,
                worker,
                LocalBooking::Booked {
                    sequence_hashes,
                    prefill_tokens: prefill.unwrap_or(prompt_tokens.saturating_sub(cached)),
                },
            );
        }
        if request.worker_id.is_none() {
            self.pending.lock().remove(&key, &selection_id);
        }
        Ok(ReservationResponse {
            selection_id,
            model_name: key.model_name,
            routing_group: key.routing_group,
            worker_id: worker.worker_id,
            dp_rank: worker.dp_rank,
            endpoint,
        })
    }

    fn explicit_booking(
        &self,
        partition: &Partition,
        request: &ReservationRequest,
        prompt: &crate::selection_request::PromptRequest,
        worker_id: u64,
    ) -> Result<(RouteRequest, WorkerId, Option<usize>), ServiceError> {
        let (sequence_hashes, isl_tokens) = if prompt.token_ids.is_some()
            || prompt.mm_routing_info.is_some()
        {
            let normalized = prompt.normalize(partition.block_size, partition.eagle)?;
            (normalized.sequence_hashes, normalized.isl_tokens)
        } else {
            let given = prompt.sequence_hashes.as_deref().ok_or_else(|| {
                ServiceError::BadRequest("sequence_hashes is required without token_ids".to_owned())
            })?;
            let isl_tokens = prompt.isl_tokens.ok_or_else(|| {
                ServiceError::BadRequest("isl_tokens is required without token_ids".to_owned())
            })?;
            let hashes = if prompt.block_hashes.is_some() {
                prompt
                    .normalize(partition.block_size, partition.eagle)?
                    .sequence_hashes
            } else {
                given
                    .iter()
                    .map(|hash| SequenceHash(*hash as u64))
                    .collect()
            };
            (hashes, isl_tokens)
        };
        if let Some(tokens) = request.effective_prefill_tokens
            && tokens > isl_tokens
        {
            return Err(ServiceError::BadRequest(format!(
                "effective_prefill_tokens ({tokens}) must not exceed isl_tokens ({isl_tokens})"
            )));
        }
        let worker = WorkerId::new(worker_id, request.dp_rank.unwrap_or(0));
        let role = match request.role {
            Some(role) => role.0,
            None => self
                .catalog
                .read()
                .get(&worker_id)
                .map_or(Role::Aggregated, |entry| entry.record.role.0),
        };
        let route = RouteRequest::new(
            request.selection_id.clone(),
            role,
            Prompt::Blocks {
                sequence_hashes,
                prompt_tokens: isl_tokens,
            },
        );
        Ok((route, worker, request.effective_prefill_tokens))
    }

    /// `POST /reservations/{id}/prefill_complete`: the booking's prefill tokens are released.
    pub fn prefill_complete(&self, selection_id: &str) -> Result<(), ServiceError> {
        let (partition, worker) = {
            let reservations = self.reservations.lock();
            let reservation = reservations
                .get(selection_id)
                .ok_or_else(|| reservation_not_found(selection_id))?;
            (self.partition(&reservation.partition), reservation.worker)
        };
        if let Some(partition) = partition {
            partition.router.prefill_complete(selection_id);
            if let Some(worker) = worker {
                self.tell_replica(
                    &partition,
                    selection_id,
                    worker,
                    LocalBooking::PrefillCompleted,
                );
            }
        }
        Ok(())
    }

    /// `DELETE /reservations/{id}`: all the booking's load is released.
    pub fn free_reservation(&self, selection_id: &str) -> Result<(), ServiceError> {
        let reservation = self
            .reservations
            .lock()
            .remove(selection_id)
            .ok_or_else(|| reservation_not_found(selection_id))?;
        if let Some(partition) = self.partition(&reservation.partition) {
            partition.router.release(selection_id);
            if let Some(worker) = reservation.worker {
                self.tell_replica(&partition, selection_id, worker, LocalBooking::Freed);
            }
        }
        Ok(())
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
            .any(|entry| entry.record.partition() == *key);
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
    fn schedulable_endpoint(
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
                    && record.partition() == *key
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

fn tokens_of(blocks: usize, block_size: u32) -> u32 {
    u32::try_from(blocks.saturating_mul(block_size as usize)).unwrap_or(u32::MAX)
}

fn reservation_not_found(selection_id: &str) -> ServiceError {
    ServiceError::NotFound(format!("reservation {selection_id} not found"))
}

/// The HTTP meaning of a booking failure.
fn book_error(error: BookError, key: &PartitionKey) -> ServiceError {
    match error {
        BookError::NoRoleConfig { .. } => ServiceError::BadRequest(error.to_string()),
        BookError::NoWorkers { role } => {
            ServiceError::NotReady(format!("no schedulable `{role}` workers for {key}"))
        }
        BookError::NotRegistered { .. } => ServiceError::NotFound(error.to_string()),
        BookError::SelectionFailed { .. }
        | BookError::SelectionPanicked { .. }
        | BookError::NotACandidate { .. } => ServiceError::Internal(error.to_string()),
    }
}
