//! The run-time router: workers and their capabilities, the per-role policy setup, load
//! accounting and the booking pipeline. The KV-aware pipeline's stages are in `kv_booking.rs`
//! (the overlap pass in `overlap_pass.rs`, the reused candidates in `candidate_cache.rs`, the
//! hint policies and their failure counters in `hint_assembly.rs`); the KV-blind modes in
//! `blind_selection.rs`.
//!
//! Concurrency: the worker registry and the KV index sit behind one `parking_lot::RwLock`.
//! Bookings take it shared (many at once), for the few microseconds of the overlap pass, the
//! selection and the hint policies, so every policy of a booking sees one consistent index
//! (the prompt is hashed before the lock is taken);
//! events and (de)registrations take it exclusively, briefly. `parking_lot` because its
//! uncontended read lock is a single atomic operation, it never poisons (a panicking policy
//! is caught anyway) and it keeps writers from starving under a stream of bookings. A booking
//! that finds an event applying spins briefly rather than parking, and an event lets waiting
//! bookings in before it takes the lock, so a booking waits for about one event instead of a
//! stream of them (`state_lock.rs`). Loads are
//! atomics read without locks; reservations change them under the ledger's mutex so that the
//! ledger and the loads always agree. Every worker's active chains (what decode load a
//! request would add) sit in one table behind their own `RwLock`: a booking reads it once,
//! the ledgers write it while they hold their mutex (ledger first, then the table).

mod blind_selection;
pub mod booking;
mod booking_scratch;
mod candidate_cache;
pub mod candidate_filter;
mod guarded_selection;
mod hint_assembly;
mod kv_booking;
mod load;
mod overlap_pass;
mod peer_booking;
mod pending_predictions;
pub mod policy_set;
mod prediction;
pub mod request;
mod shadow_case;
mod shadow_queue;
pub use crate::setup;
mod state_lock;
pub mod worker;
mod workers;

pub use crate::kv::{EventOutcome, IgnoreReason, ReplayRequest};
pub use booking::{BookError, Booking, BookingStats};
pub use candidate_filter::CandidateFilter;
pub use policy_set::PolicyReplaceError;
pub use request::{Prompt, RouteRequest};
pub use setup::{HintOrigin, RoleHint, RolePolicies, RouterMode, RouterSetup, ShadowPolicies};
pub use shadow_queue::{SHADOW_EVALUATOR_SHARE, SHADOW_QUEUE_CASES};
pub use worker::{Role, WorkerCapabilities, WorkerId, WorkerInfo};

use crate::block_identity::SequenceHash;
use crate::clock::{Clock, MonotonicClock};
use crate::kv::{
    ApproximateConfig, BatchProgress, DumpError, IndexOptions, KvIndex, PredictedBlocks,
    PredictedCache, RouterEvent, WorkerIndexState, sequence_hashes_for_request,
};
use crate::metrics::{MetricsSnapshot, PredictionMode, RouterMetrics};
use crate::plugins::WorkerLoad;
use arc_swap::ArcSwap;
use blind_selection::BlindSelector;
use load::LoadLedger;
use parking_lot::{Mutex, RwLock};
use policy_set::PolicySet;
use state_lock::StateLock;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workers::{ActiveChain, ActiveChains, WorkerEntry, Workers};

/// Blocks of an event batch applied under one hold of the state lock (a few microseconds).
pub const BATCH_PART_BLOCKS: usize = 64;

/// Most actions one hint carries; later actions are dropped (the committed copy's never is).
pub const MAX_HINT_ACTIONS: usize = 32;

/// Whether a booking pass reserves load and runs hint policies, or only chooses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BookingMode {
    /// Reserve and run the hint policies ([`Router::book`]).
    Book,
    /// Only choose ([`Router::preview`]).
    Preview,
}

/// What a booking pass chose, with the chain of sequence hashes it hashed the prompt into
/// (a KV booking's; `None` for a preview, a blind mode or a prompt without a full block), so
/// that recording the booking as a prediction does not hash the prompt again.
struct Chosen {
    booking: Booking,
    chain: Option<Arc<[SequenceHash]>>,
}

/// Run-time options of a [`Router`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterOptions {
    /// How long a booking holds load when the caller never releases it (default 10 minutes).
    pub booking_ttl: Duration,
    /// Seed of the `random` router mode.
    pub seed: u64,
    /// Build the KV index with lineage (12 bytes per distinct block), which
    /// [`Router::export_events`] needs; off by default, as routing does not need it. The
    /// service, which serves dumps, snapshots and warm starts, always turns it on.
    pub index_lineage: bool,
    /// Route without KV events (upstream's `--no-kv-events`): `Some` makes the router predict
    /// each worker's cache from its own bookings, with this TTL and size limit (see
    /// [`PredictedCache`]). `None` (the default) trusts the KV
    /// events applied to it.
    pub approximate: Option<ApproximateConfig>,
    /// Predict alongside KV events (upstream's `router_predicted_ttl_secs`): `Some(ttl)` makes
    /// a booked prompt's blocks count as cached on the booked worker for `ttl`, in a side table
    /// of predictions ([`PredictedBlocks`]) kept apart from the event-driven index, until the
    /// engine's own events arrive (see `prediction.rs`). `None` (the default) predicts nothing.
    /// Ignored when [`RouterOptions::approximate`] is set (upstream refuses the combination).
    pub predicted_ttl: Option<Duration>,
}

impl Default for RouterOptions {
    fn default() -> Self {
        Self {
            booking_ttl: Duration::from_secs(600),
            seed: 0,
            index_lineage: false,
            approximate: None,
            predicted_ttl: None,
        }
    }
}

/// Why a worker could not be registered or deregistered. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// The worker is already registered.
    #[error("worker {worker} is already registered; deregister it before registering it again")]
    AlreadyRegistered {
        /// The worker.
        worker: WorkerId,
    },
    /// The worker is not registered.
    #[error("worker {worker} is not registered; nothing to deregister")]
    UnknownWorker {
        /// The worker.
        worker: WorkerId,
    },
}

/// What bookings read and events write.
struct RouterState {
    workers: Workers,
    index: KvIndex,
    /// The predictions' timers, when the router routes without KV events.
    predicted: Option<PredictedCache>,
    /// The predictions made alongside KV events ([`RouterOptions::predicted_ttl`]).
    side: Option<PredictedBlocks>,
}

/// Books requests on workers: KV index, selection policy, load reservation and hints.
pub struct Router {
    /// The policies bookings run, swapped whole by [`Router::replace_policies`].
    policies: ArcSwap<PolicySet>,
    /// Serializes replacements, so that versions follow the order of the swaps.
    replacing: Mutex<()>,
    /// Tokens per block: fixed for the router's life, since the index is hashed with it.
    block_size: u32,
    options: RouterOptions,
    state: StateLock<RouterState>,
    /// Every worker's active chains: written by the ledgers, read by bookings.
    chains: Arc<RwLock<ActiveChains>>,
    ledger: Mutex<LoadLedger>,
    /// Bookings other router replicas made, mirrored (see `peer_booking`).
    peer_ledger: Mutex<LoadLedger>,
    /// Peer bookings released by their TTL.
    peer_expired: std::sync::atomic::AtomicU64,
    metrics: RouterMetrics,
    /// Bookings waiting for their role's shadows, and what the shadows did.
    shadows: shadow_queue::ShadowQueue,
    blind: BlindSelector,
    /// What predicted cache entries expire by.
    clock: Arc<dyn Clock>,
    /// Predictions alongside KV events that bookings made, waiting for the side table.
    pending: pending_predictions::PendingPredictions,
}

impl Router {
    /// A router running `setup`, with no workers yet.
    pub fn new(setup: RouterSetup, options: RouterOptions) -> Router {
        Self::with_clock(setup, options, Arc::new(MonotonicClock::new()))
    }

    /// A router running `setup` whose predicted cache entries (routing without KV events,
    /// [`RouterOptions::approximate`]) expire by `clock`: the replay passes its virtual time.
    pub fn with_clock(setup: RouterSetup, options: RouterOptions, clock: Arc<dyn Clock>) -> Router {
        let chains = Arc::new(RwLock::new(ActiveChains::default()));
        Router {
            block_size: setup.block_size,
            policies: ArcSwap::from_pointee(PolicySet::initial(setup)),
            replacing: Mutex::new(()),
            options,
            state: StateLock::new(RouterState {
                workers: Workers::default(),
                index: KvIndex::with_options(IndexOptions {
                    lineage: options.index_lineage,
                    ..IndexOptions::default()
                }),
                predicted: options.approximate.map(PredictedCache::new),
                side: options
                    .predicted_ttl
                    .filter(|_| options.approximate.is_none())
                    .map(PredictedBlocks::new),
            }),
            ledger: Mutex::new(LoadLedger::new(Arc::clone(&chains))),
            peer_ledger: Mutex::new(LoadLedger::new(Arc::clone(&chains))),
            chains,
            peer_expired: std::sync::atomic::AtomicU64::new(0),
            metrics: RouterMetrics::default(),
            shadows: shadow_queue::ShadowQueue::default(),
            blind: BlindSelector::new(options.seed),
            clock,
            pending: pending_predictions::PendingPredictions::default(),
        }
    }

    /// The setup the router books with now (see [`Router::replace_policies`]).
    pub fn setup(&self) -> Arc<RouterSetup> {
        Arc::clone(&self.policies.load().setup)
    }

    /// The version of the policies the router books with now: 1 for the setup it was built
    /// with, one more for each [`Router::replace_policies`]. Every booking reports the version
    /// it ran under in [`BookingStats::policy_version`].
    pub fn policy_version(&self) -> u64 {
        self.policies.load().version
    }

    /// Replaces the router's policies (router mode, roles, selection and hint policies) with
    /// `setup`'s, atomically: a booking in flight finishes under the policies it started with,
    /// every booking that starts after this returns uses the new ones, and no booking fails
    /// or is booked twice because of the swap. The index, the workers and every reservation
    /// are kept; hint policies that keep their role, type and label keep their failure
    /// counters. Returns the new [`Router::policy_version`].
    ///
    /// Refused, changing nothing, when `setup` has another block size than the router (its
    /// index is hashed with it) or drops a role that registered workers serve.
    pub fn replace_policies(&self, setup: RouterSetup) -> Result<u64, PolicyReplaceError> {
        if setup.block_size != self.block_size {
            return Err(PolicyReplaceError::BlockSizeChanged {
                running: self.block_size,
                requested: setup.block_size,
            });
        }
        let _serialized = self.replacing.lock();
        // Registrations take the state lock exclusively: none can add a worker of a dropped
        // role between this check and the swap.
        let state = self.state.read();
        for (role, workers) in state.workers.roles() {
            if !setup.roles.contains_key(&role) {
                return Err(PolicyReplaceError::RoleInUse { role, workers });
            }
        }
        let next = self.policies.load().successor(setup);
        let version = next.version;
        self.policies.store(Arc::new(next));
        drop(state);
        tracing::info!(version, "router policies replaced");
        Ok(version)
    }

    /// The options the router runs with.
    pub fn options(&self) -> &RouterOptions {
        &self.options
    }

    /// Registers a worker; from now on it is a candidate for its role and its events are applied.
    pub fn register_worker(&self, info: WorkerInfo) -> Result<(), RouterError> {
        let id = info.id;
        let mut state = self.state.write();
        if !state.workers.insert(info) {
            return Err(RouterError::AlreadyRegistered { worker: id });
        }
        state.index.add_worker(id);
        if let Some(side) = state.side.as_mut() {
            side.add_worker(id);
        }
        tracing::info!(worker = %id, "worker registered");
        Ok(())
    }

    /// Deregisters a worker and drops every block the index held for it. Its active bookings
    /// stay in the ledger until released or expired.
    pub fn deregister_worker(&self, id: WorkerId) -> Result<(), RouterError> {
        let mut state = self.state.write();
        // Its waiting predictions are recorded, then dropped with the rest.
        self.settle_predictions_into(&mut state);
        if state.workers.remove(id).is_none() {
            return Err(RouterError::UnknownWorker { worker: id });
        }
        state.index.remove_worker(id);
        if let Some(predicted) = state.predicted.as_mut() {
            predicted.forget_worker(id);
        }
        if let Some(side) = state.side.as_mut() {
            side.remove_worker(id);
        }
        tracing::info!(worker = %id, "worker deregistered");
        Ok(())
    }

    /// The registered workers with their reserved load, sorted by id.
    pub fn workers(&self) -> Vec<(WorkerInfo, WorkerLoad)> {
        self.state
            .read()
            .workers
            .iter()
            .map(|entry| (entry.info.clone(), entry.load.snapshot()))
            .collect()
    }

    /// The load reserved on `worker`, or `None` if it is not registered.
    pub fn load_of(&self, worker: WorkerId) -> Option<WorkerLoad> {
        self.state
            .read()
            .workers
            .get(worker)
            .map(|entry| entry.load.snapshot())
    }

    /// Applies one KV event (upstream's `RouterEvent`); anomalies are counted and change
    /// nothing. When it returns `Ignored(IgnoreReason::Gap)` the worker lost events: ask its
    /// engine to replay from [`Router::replay_request`] and feed the replayed events here, in
    /// order; until then the worker is not trusted (it gets no cached prefix).
    pub fn apply_event(&self, event: &RouterEvent) -> EventOutcome {
        let mut state = self.state.write();
        let outcome = if state.side.is_some() {
            // Bookings made before this event are predictions it may supersede.
            self.settle_predictions_into(&mut state);
            state.apply_superseding(event, |index| index.apply(event))
        } else {
            state.index.apply(event)
        };
        drop(state);
        if let EventOutcome::Ignored(reason) = outcome {
            tracing::debug!(worker = %event.worker(), event_id = event.event_id(), %reason, "KV event ignored");
        }
        outcome
    }

    /// Applies events that arrived together (one engine batch), in order. Consecutive events
    /// of one worker that share an `event_id` count as one numbered delivery, as upstream
    /// numbers a whole engine batch by its sequence number. The lock is taken per part of
    /// about [`BATCH_PART_BLOCKS`] blocks, so a booking never waits behind a whole long batch.
    pub fn apply_event_batch(&self, events: &[RouterEvent]) -> Vec<EventOutcome> {
        let mut outcomes = Vec::with_capacity(events.len());
        let mut progress = BatchProgress::default();
        if self.options.predicted_ttl.is_some() && self.options.approximate.is_none() {
            self.apply_event_batch_superseding(events, &mut progress, &mut outcomes);
            return outcomes;
        }
        let mut rest = events;
        while !rest.is_empty() {
            let applied = self.state.write().index.apply_batch_part(
                rest,
                &mut progress,
                &mut outcomes,
                BATCH_PART_BLOCKS,
            );
            rest = &rest[applied.max(1).min(rest.len())..];
        }
        outcomes
    }

    /// The first event id `worker` must replay, if it lost events.
    pub fn replay_request(&self, worker: WorkerId) -> Option<u64> {
        self.state.read().index.replay_request(worker)
    }

    /// Every worker awaiting a replay of lost events, sorted by worker.
    pub fn replay_requests(&self) -> Vec<ReplayRequest> {
        self.state.read().index.replay_requests()
    }

    /// Continues `worker`'s event numbering after `last_event_id`, for an index restored from a
    /// checkpoint that recorded where each worker's events stood: events up to that id are
    /// rejected as duplicates, the next one applies. Returns `false` if the worker is not
    /// registered.
    pub fn resume_event_numbering(&self, worker: WorkerId, last_event_id: u64) -> bool {
        self.state
            .write()
            .index
            .resume_event_numbering(worker, last_event_id)
    }

    /// Gives up on replaying `worker`'s lost events (the engine could not replay them): its
    /// cache state is reset and its next event, whatever its id, starts its stream again.
    /// Returns `false` if the worker is not registered.
    pub fn abandon_recovery(&self, worker: WorkerId) -> bool {
        self.state.write().index.abandon_recovery(worker)
    }

    /// The index as upstream `RouterEvent`s, as upstream's indexers dump it (see
    /// [`KvIndex::dump_events`](crate::kv::KvIndex::dump_events)): per worker, `stored` events of
    /// local hashes chained through the worker's engine hashes, parents first, numbered from 0
    /// across the dump. Restored into an empty router with the same workers
    /// ([`Router::restore_events`]) or applied to upstream's radix trees, they rebuild every
    /// worker's overlap. Fails unless the router was built with
    /// [`RouterOptions::index_lineage`].
    pub fn export_events(&self) -> Result<Vec<RouterEvent>, DumpError> {
        self.state.read().index.dump_events()
    }

    /// What the index knows about `worker`: blocks held, last event id, pending replay.
    pub fn worker_index_state(&self, worker: WorkerId) -> Option<WorkerIndexState> {
        self.state.read().index.worker_state(worker)
    }

    /// Reads one KV event from upstream's JSON form and applies it; malformed input is counted
    /// and ignored.
    pub fn apply_event_json(&self, json: &str) -> EventOutcome {
        match RouterEvent::from_json(json) {
            Ok(event) => self.apply_event(&event),
            Err(error) => {
                tracing::debug!(%error, "malformed KV event ignored");
                self.state.write().index.note_malformed();
                EventOutcome::Ignored(IgnoreReason::Malformed)
            }
        }
    }

    /// The number of leading `sequence_hashes` that `worker` caches, per the index (predictions
    /// whose TTL ran out are removed first). Alongside KV events
    /// ([`RouterOptions::predicted_ttl`]) this counts engine-reported blocks only; see
    /// [`Router::predicted_prefix`] for the predictions.
    pub fn cached_prefix(&self, worker: WorkerId, sequence_hashes: &[SequenceHash]) -> usize {
        self.expire_predictions();
        self.state
            .read()
            .index
            .prefix_length(sequence_hashes, worker)
    }

    /// Books `request` on a worker of its role and returns the hint for it.
    pub fn book(&self, request: &RouteRequest) -> Result<Booking, BookError> {
        let start = Instant::now();
        self.expire(start);
        self.expire_predictions();
        let policies = self.policies.load();
        let result = self.choose(&policies, request, start, BookingMode::Book);
        match result {
            Ok(Chosen { booking, chain }) => {
                self.predict(request, booking.worker, chain.as_ref());
                self.metrics.count_booking(booking.stats.latency);
                Ok(booking)
            }
            Err(error) => {
                self.metrics.count_book_error(error.reason());
                Err(error)
            }
        }
    }

    /// Chooses a worker for `request` as [`Router::book`] would, without reserving load or
    /// running hint policies: a query ("where would this go?"). Nothing changes and the
    /// booking metrics do not count it; the returned booking never carries a hint.
    pub fn preview(&self, request: &RouteRequest) -> Result<Booking, BookError> {
        self.expire_predictions();
        let policies = self.policies.load();
        self.choose(&policies, request, Instant::now(), BookingMode::Preview)
            .map(|chosen| chosen.booking)
    }

    /// Books (or previews) `request` by the router mode, among the workers its filter allows.
    fn choose(
        &self,
        policies: &Arc<PolicySet>,
        request: &RouteRequest,
        start: Instant,
        mode: BookingMode,
    ) -> Result<Chosen, BookError> {
        if let Some(filter) = &request.allowed_workers {
            self.check_allowed(request.role, filter)?;
        }
        let mut chosen = match policies.setup.router_mode {
            RouterMode::Kv => self.book_kv(policies, request, start, mode),
            router_mode => self
                .book_blind(router_mode, request, start, mode)
                .map(|booking| Chosen {
                    booking,
                    chain: None,
                }),
        }?;
        chosen.booking.stats.policy_version = policies.version;
        Ok(chosen)
    }

    /// `Ok` when some registered worker of `role` passes `filter`.
    fn check_allowed(&self, role: Role, filter: &CandidateFilter) -> Result<(), BookError> {
        let state = self.state.read();
        let workers = state
            .workers
            .role(role)
            .ok_or(BookError::NoWorkers { role })?;
        if workers.ids.iter().any(|id| filter.allows(*id)) {
            Ok(())
        } else {
            Err(BookError::NoAllowedWorkers {
                role,
                allowed: filter.worker_ids().to_vec(),
            })
        }
    }

    /// Books `request` on `worker`, chosen by the caller: no selection or hint policy runs.
    /// The reserved prefill is `prefill_tokens` when given, else the prompt less the prefix
    /// `worker` caches. `worker` must be a registered worker of the request's role that the
    /// request's filter allows; otherwise nothing is reserved.
    pub fn book_on(
        &self,
        request: &RouteRequest,
        worker: WorkerId,
        prefill_tokens: Option<usize>,
    ) -> Result<Booking, BookError> {
        let start = Instant::now();
        self.expire(start);
        self.expire_predictions();
        let policy_version = self.policy_version();
        let block_size = self.block_size;
        let prompt_tokens = request.prompt.prompt_tokens();
        let state = self.state.read();
        let entry = state
            .workers
            .get(worker)
            .filter(|entry| entry.info.role == request.role)
            .ok_or(BookError::NotRegistered {
                role: request.role,
                worker,
            })?;
        if let Some(filter) = &request.allowed_workers
            && !filter.allows(worker)
        {
            return Err(BookError::WorkerNotAllowed {
                worker,
                allowed: filter.worker_ids().to_vec(),
            });
        }
        let hashes: Arc<[SequenceHash]> = match &request.prompt {
            Prompt::Tokens(tokens) => {
                sequence_hashes_for_request(tokens, block_size, &request.identity).into()
            }
            Prompt::Blocks {
                sequence_hashes, ..
            } => Arc::from(sequence_hashes.as_slice()),
        };
        let mut cached_blocks = state.index.prefix_length(&hashes, worker);
        if let Some(side) = &state.side {
            let now = self.clock.now();
            cached_blocks = cached_blocks.max(side.prefix_length(&hashes, worker, now));
        }
        let prefill_tokens = prefill_tokens.unwrap_or_else(|| {
            prompt_tokens.saturating_sub(cached_blocks.saturating_mul(block_size as usize))
        });
        self.reserve(
            &request.request_id,
            request.role,
            entry,
            prefill_tokens,
            ActiveChain {
                hashes: (!hashes.is_empty()).then(|| Arc::clone(&hashes)),
                untracked_blocks: 0,
            },
            start,
        );
        drop(state);
        self.predict(request, worker, Some(&hashes));
        let latency = start.elapsed();
        self.metrics.count_booking(latency);
        Ok(Booking {
            request_id: request.request_id.clone(),
            role: request.role,
            worker,
            hint: None,
            committed_kv_copy: None,
            stats: BookingStats {
                blocks: hashes.len(),
                cached_blocks,
                latency,
                policy_version,
                ..BookingStats::default()
            },
        })
    }

    /// Reports that the request's prefill finished: its prefill tokens are released.
    /// Unknown or repeated reports are harmless.
    pub fn prefill_complete(&self, request_id: &str) {
        self.ledger.lock().prefill_complete(request_id);
    }

    /// Reports that the request generated `blocks` more output blocks: each adds one active
    /// (decode) block to its booking until it is released (upstream `add_output_block`; the
    /// blocks are the request's own, never shared). Returns `false`, changing nothing, when the
    /// request holds no booking (released, expired, or never booked).
    pub fn add_output_blocks(&self, request_id: &str, blocks: u64) -> bool {
        self.ledger.lock().add_output_blocks(request_id, blocks)
    }

    /// Reports that the request finished: all its load is released. Unknown or repeated
    /// releases are harmless.
    pub fn release(&self, request_id: &str) {
        self.ledger.lock().release(request_id);
    }

    /// Releases bookings older than the TTL now (bookings also do it as they go).
    pub fn expire_stale_bookings(&self) {
        self.expire(Instant::now());
    }

    /// A snapshot of every metric.
    pub fn metrics(&self) -> MetricsSnapshot {
        let active = self.ledger.lock().active_bookings();
        let state = self.state.read();
        let policies = self.policies.load();
        self.metrics.snapshot(
            policies
                .role_hints
                .values()
                .flatten()
                .map(|counted| &*counted.failures),
            state.index.counters(),
            state.index.memberships() as u64,
            active,
        )
    }

    /// Every metric in the Prometheus text exposition format, the shadows' included, and the
    /// cache predictions' when the router predicts.
    pub fn prometheus_text(&self) -> String {
        let mut text = self.metrics().to_prometheus();
        text.push_str(&crate::metrics::shadow_prometheus_text(
            &self.shadow_reports(),
            self.shadow_cases_dropped(),
        ));
        if let Some(stats) = self.predicted_cache_stats() {
            let mode = match self.predicts_caches() {
                true => PredictionMode::WithoutEvents,
                false => PredictionMode::AlongsideEvents,
            };
            text.push_str(&crate::metrics::prediction_prometheus_text(&stats, mode));
        }
        text
    }

    fn expire(&self, now: Instant) {
        let mut ledger = self.ledger.lock();
        if ledger.has_expired(now) {
            let expired = ledger.expire(now);
            drop(ledger);
            if expired > 0 {
                tracing::info!(expired, "bookings released by their TTL");
                self.metrics.count_expired(expired);
            }
        }
    }

    fn reserve(
        &self,
        request_id: &str,
        role: Role,
        worker: &Arc<WorkerEntry>,
        prefill_tokens: usize,
        chain: ActiveChain,
        now: Instant,
    ) {
        let deadline = now + self.options.booking_ttl;
        self.ledger.lock().reserve(
            request_id,
            role,
            worker,
            prefill_tokens as u64,
            chain,
            deadline,
        );
    }
}
