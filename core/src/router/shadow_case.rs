//! One booking as its shadows see it: the request and the candidates exactly as the live
//! policies saw them (each worker's cached prefix and load at booking time), the policies that
//! were configured then, and what the live policies did. Evaluating a shadow on it gives what
//! the shadow would have done; nothing is booked and no hint is sent.
//!
//! The booking captures only what changes per booking (each candidate's id, cached prefix and
//! load, in one flat copy); what a worker advertises (hints, its fetch endpoint) is read from
//! the registry when the shadows run, off the booking path.

use super::candidate_filter::CandidateFilter;
use super::guarded_selection::select;
use super::hint_assembly::{AssembledActions, CountedHint, assemble};
use super::workers::Workers;
use crate::block_identity::SequenceHash;
use crate::identity::{Role, WorkerId};
use crate::plugins::{
    BlockLookup, Candidate, HintAction, HintContext, KV_FETCH_ACTION_TYPE, RequestView,
    SessionContext, WorkerLoad,
};
use crate::setup::ShadowPolicies;
use std::sync::Arc;

/// What one policy set chose for a booking and what its hints carried.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Choice {
    /// The chosen worker.
    pub(crate) worker: WorkerId,
    /// The request's blocks the worker had cached.
    pub(crate) cached_blocks: usize,
    /// The most loaded candidate's active blocks over the candidates' mean, once the request
    /// is added to the chosen worker.
    pub(crate) imbalance: f64,
    /// Actions its hint carried.
    pub(crate) actions: usize,
    /// Blocks its `kv.fetch` actions named.
    pub(crate) fetch_blocks: usize,
}

/// One candidate as the booking saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeenCandidate {
    pub(crate) worker: WorkerId,
    pub(crate) cached_blocks: usize,
    pub(crate) load: WorkerLoad,
}

impl SeenCandidate {
    /// What the booking saw of `candidate`.
    pub(crate) fn of(candidate: &Candidate) -> Self {
        Self {
            worker: candidate.worker,
            cached_blocks: candidate.cached_blocks,
            load: candidate.load,
        }
    }
}

/// A case's request id and candidates: filled by a booking, emptied and reused once the case
/// is evaluated, so that a booking allocates nothing for its case. (Its sequence hashes are
/// the booking's own active chain, shared.)
#[derive(Default)]
pub(crate) struct CaseBuffers {
    pub(crate) request_id: String,
    pub(crate) candidates: Vec<SeenCandidate>,
}

impl CaseBuffers {
    /// The buffers of `case`, emptied.
    pub(crate) fn emptied(case: ShadowCase) -> Self {
        let mut buffers = CaseBuffers {
            request_id: case.request_id,
            candidates: case.candidates,
        };
        buffers.request_id.clear();
        buffers.candidates.clear();
        buffers
    }
}

/// What the live policies did, as the booking recorded it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LiveOutcome {
    pub(crate) worker: WorkerId,
    pub(crate) actions: usize,
    pub(crate) fetch_blocks: usize,
}

/// A booking captured for its role's shadows.
pub(crate) struct ShadowCase {
    /// The version of the policies the booking ran under (their shadows are the ones
    /// evaluated; the queue keeps the recent sets by version).
    pub(crate) policy_version: u64,
    pub(crate) role: Role,
    pub(crate) request_id: String,
    pub(crate) prompt_tokens: usize,
    pub(crate) block_size: u32,
    pub(crate) session: SessionContext,
    pub(crate) sequence_hashes: Arc<[SequenceHash]>,
    pub(crate) candidates: Vec<SeenCandidate>,
    pub(crate) filter: Option<CandidateFilter>,
    /// What the live policies did.
    pub(crate) live: LiveOutcome,
}

/// What evaluating one shadow on a case gave.
pub(crate) enum ShadowOutcome {
    /// It chose, and its hints ran (or the worker takes none).
    Chose {
        choice: Choice,
        /// Whether one of its hint policies failed.
        hint_failed: bool,
    },
    /// Its selection failed: an error, a panic, or a worker that is not a candidate.
    Failed,
}

impl ShadowCase {
    /// The booking's candidates as policies see them, with what each worker advertises per
    /// `workers` (a worker gone since then no longer takes hints or serves fetches).
    pub(crate) fn candidates(&self, workers: &Workers) -> Vec<Candidate> {
        self.candidates
            .iter()
            .map(|seen| {
                let entry = workers.get(seen.worker);
                Candidate {
                    worker: seen.worker,
                    cached_blocks: seen.cached_blocks,
                    load: seen.load,
                    router_hint: entry.is_some_and(|entry| entry.info.capabilities.router_hint),
                    source_endpoint: entry.and_then(|entry| entry.source_endpoint.clone()),
                }
            })
            .collect()
    }

    /// What the live policies chose, in the figures a shadow's choice is given.
    pub(crate) fn live_choice(&self, candidates: &[Candidate]) -> Choice {
        let cached_blocks = candidates
            .iter()
            .find(|candidate| candidate.worker == self.live.worker)
            .map_or(0, |candidate| candidate.cached_blocks);
        Choice {
            worker: self.live.worker,
            cached_blocks,
            imbalance: imbalance(candidates, self.live.worker),
            actions: self.live.actions,
            fetch_blocks: self.live.fetch_blocks,
        }
    }

    /// Evaluates `shadow` (with its hint policies `hints`) on this booking's `candidates`
    /// (see [`ShadowCase::candidates`]); engine block ids for its hints come from `blocks`, the
    /// index as it is now.
    pub(crate) fn evaluate(
        &self,
        shadow: &ShadowPolicies,
        hints: &[CountedHint],
        candidates: &[Candidate],
        blocks: &dyn BlockLookup,
    ) -> ShadowOutcome {
        let view = RequestView {
            request_id: &self.request_id,
            role: self.role,
            prompt_tokens: self.prompt_tokens,
            block_size: self.block_size,
            session: &self.session,
            sequence_hashes: &self.sequence_hashes,
            candidates,
            blocks,
        };
        let Ok(selection) = select(&shadow.policies, &view, self.filter.as_ref()) else {
            return ShadowOutcome::Failed;
        };
        let Some(candidate) = view.candidate(selection.worker) else {
            return ShadowOutcome::Failed;
        };
        let assembled = candidate.router_hint.then(|| {
            let context = HintContext::new(view, selection.worker, selection.kv_copy.as_ref());
            assemble(hints, &context)
        });
        let hint_failed = assembled.as_ref().is_some_and(|a| a.failures > 0);
        let actions = assembled.as_ref().map_or(&[][..], |a| a.actions.as_slice());
        ShadowOutcome::Chose {
            choice: Choice {
                worker: candidate.worker,
                cached_blocks: candidate.cached_blocks,
                imbalance: imbalance(candidates, candidate.worker),
                actions: actions.len(),
                fetch_blocks: fetch_blocks(actions),
            },
            hint_failed,
        }
    }
}

/// What the live policies did: the booked worker and its hint's actions (none when the
/// worker takes no hints).
pub(crate) fn live_outcome(worker: WorkerId, assembled: Option<&AssembledActions>) -> LiveOutcome {
    let actions = assembled.map_or(&[][..], |assembled| assembled.actions.as_slice());
    LiveOutcome {
        worker,
        actions: actions.len(),
        fetch_blocks: fetch_blocks(actions),
    }
}

/// The most loaded candidate's active blocks over the candidates' mean, once the request's
/// blocks are added to `chosen` (1 when every candidate is idle).
fn imbalance(candidates: &[Candidate], chosen: WorkerId) -> f64 {
    let loads = candidates.iter().map(|candidate| {
        let added = if candidate.worker == chosen {
            candidate.load.additional_active_blocks
        } else {
            0
        };
        (candidate.load.active_blocks + added) as f64
    });
    let (sum, max) = loads.fold((0.0, 0.0_f64), |(sum, max), load| {
        (sum + load, max.max(load))
    });
    let mean = sum / candidates.len().max(1) as f64;
    if mean == 0.0 { 1.0 } else { max / mean }
}

/// Blocks the `kv.fetch` actions among `actions` name.
pub(crate) fn fetch_blocks(actions: &[HintAction]) -> usize {
    actions
        .iter()
        .filter(|action| action.action_type == KV_FETCH_ACTION_TYPE)
        .filter_map(|action| action.payload.get("block_hashes")?.as_array().map(Vec::len))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: u64, active_blocks: u64, additional: u64) -> Candidate {
        Candidate {
            worker: WorkerId::new(id, 0),
            cached_blocks: 0,
            load: WorkerLoad {
                active_blocks,
                additional_active_blocks: additional,
                ..WorkerLoad::default()
            },
            router_hint: true,
            source_endpoint: None,
        }
    }

    #[test]
    fn imbalance_is_the_busiest_over_the_mean_after_the_request() {
        let candidates = [candidate(1, 10, 10), candidate(2, 30, 10)];
        // On worker 1: loads 20 and 30, mean 25.
        assert!((imbalance(&candidates, WorkerId::new(1, 0)) - 1.2).abs() < 1e-9);
        // On worker 2: loads 10 and 40, mean 25.
        assert!((imbalance(&candidates, WorkerId::new(2, 0)) - 1.6).abs() < 1e-9);
        let idle = [candidate(1, 0, 0), candidate(2, 0, 0)];
        assert_eq!(imbalance(&idle, WorkerId::new(1, 0)), 1.0);
    }

    #[test]
    fn fetch_blocks_count_the_block_hashes_of_kv_fetch_actions_only() {
        let actions = [
            HintAction::new(
                KV_FETCH_ACTION_TYPE,
                "1.0",
                serde_json::json!({"block_hashes": [1, 2, 3]}),
            ),
            HintAction::new("other", "1.0", serde_json::json!({"block_hashes": [1]})),
            HintAction::new(KV_FETCH_ACTION_TYPE, "1.0", serde_json::json!({})),
        ];
        assert_eq!(fetch_blocks(&actions), 3);
    }
}
