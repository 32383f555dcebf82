//! Shadow policies off the hot path: a booking whose role has shadows leaves a
//! [`ShadowCase`] in a bounded queue (dropped and counted when the queue is full) and returns;
//! [`Router::run_pending_shadows`] evaluates the queued cases later, on the caller's thread (the
//! service runs it on a thread of its own, the replay after every booking), and sums what each
//! shadow would have done into its [`ShadowReport`].

use super::Router;
use super::overlap_pass::OverlapPass;
use super::policy_set::PolicySet;
use super::shadow_case::{CaseBuffers, Choice, ShadowCase, ShadowOutcome};
use crate::identity::{Role, WorkerId};
use crate::kv::RecordedEngines;
use crate::metrics::ShadowReport;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

/// Bookings a router holds for its shadows before it drops new ones.
pub const SHADOW_QUEUE_CASES: usize = 512;

/// The share of one core an evaluator running [`Router::run_shadows_paced`] spends evaluating,
/// at most, by default: a quarter. Evaluating takes about as long as the booking it shadows;
/// when bookings come faster than a quarter of a core can shadow them, the queue fills and the
/// excess is dropped and counted (BENCHMARKS.md, "Shadow policies", gives what a booking pays).
pub const SHADOW_EVALUATOR_SHARE: f64 = 0.25;

/// Cases evaluated between two checks of the pace.
const PACED_BATCH: usize = 32;

/// The queue between bookings and the shadows' evaluation, and what the shadows did.
pub(crate) struct ShadowQueue {
    sender: SyncSender<ShadowCase>,
    /// One evaluator at a time, with its reused buffers.
    receiver: Mutex<Evaluator>,
    /// Cases a full queue refused, and cases whose policy set was no longer kept.
    dropped: AtomicU64,
    /// Each shadow's sums, by role and name; kept across configuration reloads.
    tallies: Mutex<BTreeMap<(Role, String), Tally>>,
    /// The policy sets queued cases were booked under, oldest first (at most
    /// [`KEPT_POLICY_SETS`]), and the version noted last: a booking reads that version and
    /// takes the lock only when its set is another, so bookings share no reference count with
    /// the evaluator.
    sets: Mutex<Vec<Arc<PolicySet>>>,
    noted_version: AtomicU64,
    /// Evaluated cases' buffers (request id, candidates), emptied, for the next bookings: a
    /// booking then allocates nothing for its case, and memory is not freed on one thread for
    /// another to allocate again.
    spare: Mutex<Vec<CaseBuffers>>,
}

/// Spare buffers kept at most.
const SPARE_BUFFERS: usize = 256;

/// Policy sets kept for queued cases; a case booked under an older one (more reloads happened
/// while it waited) is dropped and counted.
const KEPT_POLICY_SETS: usize = 8;

/// The receiving end and the overlap pass's buffers, reused from case to case.
struct Evaluator {
    receiver: Receiver<ShadowCase>,
    workers: Vec<WorkerId>,
    lengths: Vec<usize>,
    engines: RecordedEngines,
}

/// One shadow's running sums (a [`ShadowReport`] with its imbalances summed, not averaged).
#[derive(Default)]
struct Tally {
    report: ShadowReport,
    live_imbalance_sum: f64,
    shadow_imbalance_sum: f64,
}

impl Default for ShadowQueue {
    fn default() -> Self {
        let (sender, receiver) = sync_channel(SHADOW_QUEUE_CASES);
        Self {
            sender,
            receiver: Mutex::new(Evaluator {
                receiver,
                workers: Vec::new(),
                lengths: Vec::new(),
                engines: RecordedEngines::default(),
            }),
            dropped: AtomicU64::new(0),
            tallies: Mutex::new(BTreeMap::new()),
            spare: Mutex::new(Vec::new()),
            sets: Mutex::new(Vec::new()),
            noted_version: AtomicU64::new(0),
        }
    }
}

impl ShadowQueue {
    /// Makes sure `set` can be found by its version when its bookings' cases are evaluated.
    pub(crate) fn note_policies(&self, set: &Arc<PolicySet>) {
        if self.noted_version.load(Ordering::Acquire) == set.version {
            return;
        }
        let mut sets = self.sets.lock();
        if !sets.iter().any(|kept| kept.version == set.version) {
            sets.push(Arc::clone(set));
            if sets.len() > KEPT_POLICY_SETS {
                sets.remove(0);
            }
        }
        self.noted_version.store(set.version, Ordering::Release);
    }

    /// The policy set of `version`, if it is still kept.
    fn policies_of(&self, version: u64) -> Option<Arc<PolicySet>> {
        self.sets
            .lock()
            .iter()
            .find(|kept| kept.version == version)
            .cloned()
    }

    /// Empty buffers for a booking's case: spare ones when the pool is free and has some,
    /// else new ones. Never waits.
    pub(crate) fn spare_buffers(&self) -> CaseBuffers {
        self.spare
            .try_lock()
            .and_then(|mut spare| spare.pop())
            .unwrap_or_default()
    }

    /// Keeps an evaluated case's buffers for later bookings.
    fn recycle(&self, case: ShadowCase) {
        let buffers = CaseBuffers::emptied(case);
        let mut spare = self.spare.lock();
        if spare.len() < SPARE_BUFFERS {
            spare.push(buffers);
        }
    }

    /// Queues `case`, or counts it dropped when the queue is full. Never blocks.
    pub(crate) fn offer(&self, case: ShadowCase) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.sender.try_send(case)
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Router {
    /// Evaluates the role's shadows on every booking queued for them: waits up to `wait` for
    /// the first one (`None`: returns at once when none is queued), then takes whatever else is
    /// queued. Returns how many bookings it evaluated. Shadows see each booking's request and
    /// candidates as the live policies saw them; engine block ids for their hints come from
    /// the index as it is when they run. A router whose configuration has no `shadow` entry
    /// queues nothing, and this returns 0.
    pub fn run_pending_shadows(&self, wait: Option<Duration>) -> usize {
        let mut evaluator = self.shadows.receiver.lock();
        let first = match wait {
            Some(wait) => evaluator.receiver.recv_timeout(wait).ok(),
            None => evaluator.receiver.try_recv().ok(),
        };
        self.evaluate_queued(&mut evaluator, first, usize::MAX)
    }

    /// One step of an evaluator thread of its own: waits up to `wait` for a booking, evaluates
    /// at most a batch of 32 queued bookings, then sleeps so that evaluating takes at most
    /// `share` (0 < share ≤ 1; see [`SHADOW_EVALUATOR_SHARE`]) of the thread's time. Returns how
    /// many bookings it evaluated; call it in a loop.
    pub fn run_shadows_paced(&self, wait: Duration, share: f64) -> usize {
        let share = if share.is_finite() {
            share.clamp(0.01, 1.0)
        } else {
            1.0
        };
        let mut evaluator = self.shadows.receiver.lock();
        let Ok(first) = evaluator.receiver.recv_timeout(wait) else {
            return 0;
        };
        let started = Instant::now();
        let evaluated = self.evaluate_queued(&mut evaluator, Some(first), PACED_BATCH);
        if share < 1.0 {
            std::thread::sleep(started.elapsed().mul_f64(1.0 / share - 1.0));
        }
        evaluated
    }

    /// Evaluates `first`, then queued cases while there are any, `limit` in all at most;
    /// returns how many it evaluated.
    fn evaluate_queued(
        &self,
        evaluator: &mut Evaluator,
        first: Option<ShadowCase>,
        limit: usize,
    ) -> usize {
        let mut next = first;
        let mut evaluated = 0;
        while let Some(case) = next {
            self.evaluate_shadows(&case, evaluator);
            self.shadows.recycle(case);
            evaluated += 1;
            next = (evaluated < limit)
                .then(|| evaluator.receiver.try_recv().ok())
                .flatten();
        }
        evaluated
    }

    /// What each shadow would have done so far, beside the live policies, by role and name.
    pub fn shadow_reports(&self) -> Vec<ShadowReport> {
        self.shadows
            .tallies
            .lock()
            .values()
            .map(|tally| {
                let decisions = tally.report.decisions.max(1) as f64;
                ShadowReport {
                    live_imbalance: tally.live_imbalance_sum / decisions,
                    shadow_imbalance: tally.shadow_imbalance_sum / decisions,
                    ..tally.report.clone()
                }
            })
            .collect()
    }

    /// Bookings no shadow saw: the queue was full (or, after more than 8 reloads while they
    /// waited, their configuration was no longer kept).
    pub fn shadow_cases_dropped(&self) -> u64 {
        self.shadows.dropped.load(Ordering::Relaxed)
    }

    /// Runs each of the case's shadows and adds what it did to its tally.
    fn evaluate_shadows(&self, case: &ShadowCase, evaluator: &mut Evaluator) {
        let Some(set) = self.shadows.policies_of(case.policy_version) else {
            self.shadows.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(policies) = set.setup.roles.get(&case.role) else {
            return;
        };
        let no_hints = Vec::new();
        let shadow_hints = set.shadow_hints.get(&case.role);
        let (live, outcomes): (Choice, Vec<ShadowOutcome>) = {
            let state = self.state.read();
            let candidates = case.candidates(&state.workers);
            // One pass over the index, as a booking makes: the shadows' hints then read the
            // engine ids of the blocks the candidates cache from what it recorded.
            evaluator.workers.clear();
            evaluator
                .workers
                .extend(candidates.iter().map(|candidate| candidate.worker));
            let blocks = OverlapPass::run(
                &state.index,
                &case.sequence_hashes,
                &evaluator.workers,
                &mut evaluator.lengths,
                &mut evaluator.engines,
            );
            let outcomes = policies
                .shadows
                .iter()
                .enumerate()
                .map(|(position, shadow)| {
                    let hints = shadow_hints
                        .and_then(|lists| lists.get(position))
                        .unwrap_or(&no_hints);
                    case.evaluate(shadow, hints, &candidates, &blocks)
                })
                .collect();
            (case.live_choice(&candidates), outcomes)
        };
        let mut tallies = self.shadows.tallies.lock();
        for (shadow, outcome) in policies.shadows.iter().zip(outcomes) {
            let tally = tallies.entry((case.role, shadow.name.clone())).or_default();
            tally.add(
                case,
                &live,
                &shadow.policies.selection_type,
                &shadow.name,
                outcome,
            );
        }
    }
}

impl Tally {
    fn add(
        &mut self,
        case: &ShadowCase,
        live: &Choice,
        selection_type: &str,
        name: &str,
        outcome: ShadowOutcome,
    ) {
        let report = &mut self.report;
        if report.name.is_empty() {
            report.role = case.role.to_string();
            report.name = name.to_owned();
        }
        // A reload may give the name another type: the report names the latest.
        if report.selection_type != selection_type {
            report.selection_type = selection_type.to_owned();
        }
        let ShadowOutcome::Chose {
            choice,
            hint_failed,
        } = outcome
        else {
            report.failures += 1;
            return;
        };
        report.decisions += 1;
        report.agreed += u64::from(choice.worker == live.worker);
        report.prompt_blocks += case.sequence_hashes.len() as u64;
        report.live_cached_blocks += live.cached_blocks as u64;
        report.shadow_cached_blocks += choice.cached_blocks as u64;
        report.live_hints += u64::from(live.actions > 0);
        report.shadow_hints += u64::from(choice.actions > 0);
        report.live_hint_actions += live.actions as u64;
        report.shadow_hint_actions += choice.actions as u64;
        report.live_fetch_blocks += live.fetch_blocks as u64;
        report.shadow_fetch_blocks += choice.fetch_blocks as u64;
        report.failures += u64::from(hint_failed);
        self.live_imbalance_sum += live.imbalance;
        self.shadow_imbalance_sum += choice.imbalance;
    }
}
