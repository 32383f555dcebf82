//! The KV-aware booking pipeline of REFERENCE §3, one named stage per step: hash the prompt,
//! run the overlap pass, refresh the cached candidates, build the request view, select, reserve,
//! gate the hints and build the envelope. [`Router::book_kv`] reads as that list.
//!
//! The common booking allocates nothing for its hashes, overlaps and candidates: the stages
//! work in this thread's [`BookingScratch`].

use super::booking_scratch::{BookingScratch, ScratchGuard};
use super::guarded_selection::select;
use super::hint_assembly::{AssembledActions, assemble};
use super::overlap_pass::OverlapPass;
use super::policy_set::PolicySet;
use super::shadow_case::{CaseBuffers, LiveOutcome, SeenCandidate, ShadowCase, live_outcome};
use super::workers::{ActiveChain, RoleWorkers, WorkerEntry};
use super::{BookError, Booking, BookingMode, BookingStats, Chosen, Prompt, RouteRequest, Router};
use crate::block_identity::SequenceHash;
use crate::identity::Role;
use crate::kv::{sequence_hashes_for_request, sequence_hashes_iter};
use crate::plugins::{Candidate, HintContext, RequestView, Selection};
use crate::setup::RolePolicies;
use crate::wire::KvHint;
use std::sync::Arc;
use std::time::Instant;

impl Router {
    /// Books `request` by KV overlap and the role's policies. The stages, in order:
    /// [`hash_prompt`], [`OverlapPass::run`], [`CandidateCache::refresh`](super::candidate_cache::CandidateCache::refresh),
    /// [`Router::request_view`], [`Router::select`] and [`booked_candidate`],
    /// [`Router::reserve_booked`], [`Router::gate_hints`], [`envelope`]. A preview stops after
    /// the selection: nothing is reserved and no hint policy runs.
    pub(super) fn book_kv(
        &self,
        policy_set: &Arc<PolicySet>,
        request: &RouteRequest,
        start: Instant,
        mode: BookingMode,
    ) -> Result<Chosen, BookError> {
        let role = request.role;
        let policies = role_policies(policy_set, role)?;
        let mut scratch = ScratchGuard::take();
        let BookingScratch {
            hashes,
            lengths,
            merged_lengths,
            engines,
            candidates,
        } = &mut *scratch;
        // Hashing needs no index state: done before the lock, so a booking holds it only for
        // the pass, the policies and the reservation. A booking hashes straight into the chain
        // it will hold active.
        let block_size = self.block_size;
        let chain = (mode == BookingMode::Book)
            .then(|| active_chain(request, block_size, hashes))
            .flatten();
        let hashes = match &chain {
            Some(chain) => chain,
            None => hash_prompt(request, block_size, hashes),
        };
        let state = self.state.read();
        let workers = state
            .workers
            .role(role)
            .ok_or(BookError::NoWorkers { role })?;
        let mut overlaps = OverlapPass::run(&state.index, hashes, &workers.ids, lengths, engines);
        if let Some(side) = &state.side {
            overlaps = overlaps.with_predictions(side, self.clock.now(), merged_lengths);
        }
        let candidates = candidates.refresh(
            workers,
            overlaps.cached_blocks(),
            hashes,
            &self.chains.read(),
        );
        let view = self.request_view(request, hashes, candidates, &overlaps);
        let selection = select(policies, &view, request.allowed_workers.as_ref())?;
        let booked = booked_candidate(policies, workers, candidates, &selection, role)?;
        let stats = BookingStats {
            blocks: hashes.len(),
            cached_blocks: booked.cached_blocks,
            ..BookingStats::default()
        };
        if mode == BookingMode::Preview {
            drop(state);
            return Ok(Chosen {
                booking: envelope(request, selection, None, stats, start),
                chain: None,
            });
        }
        self.reserve_booked(request, &booked, chain.clone(), start);
        let actions = self.gate_hints(policy_set, booked.entry, view, &selection);
        drop(state);
        if !policies.shadows.is_empty() {
            self.shadows.note_policies(policy_set);
            let mut buffers = self.shadows.spare_buffers();
            buffers.request_id.push_str(&request.request_id);
            buffers
                .candidates
                .extend(candidates.iter().map(SeenCandidate::of));
            let case = shadow_case(
                policy_set,
                request,
                block_size,
                chain.clone(),
                buffers,
                live_outcome(selection.worker, actions.as_ref()),
            );
            self.shadows.offer(case);
        }
        Ok(Chosen {
            booking: envelope(request, selection, actions, stats, start),
            chain,
        })
    }

    /// Stage 4: what every policy of the booking sees.
    fn request_view<'a>(
        &self,
        request: &'a RouteRequest,
        sequence_hashes: &'a [SequenceHash],
        candidates: &'a [Candidate],
        overlaps: &'a OverlapPass<'a>,
    ) -> RequestView<'a> {
        RequestView {
            request_id: &request.request_id,
            role: request.role,
            prompt_tokens: request.prompt.prompt_tokens(),
            block_size: self.block_size,
            session: &request.session,
            sequence_hashes,
            candidates,
            blocks: overlaps,
        }
    }

    /// Stage 6: reserves the booked worker's load: the prefill its cache does not cover, and
    /// the request's blocks (`chain`, its sequence hashes) while it is active.
    fn reserve_booked(
        &self,
        request: &RouteRequest,
        booked: &BookedCandidate<'_>,
        chain: Option<Arc<[SequenceHash]>>,
        now: Instant,
    ) {
        let cached_tokens = booked
            .cached_blocks
            .saturating_mul(self.block_size as usize);
        let prefill_tokens = request.prompt.prompt_tokens().saturating_sub(cached_tokens);
        self.reserve(
            &request.request_id,
            request.role,
            booked.entry,
            prefill_tokens,
            ActiveChain {
                hashes: chain,
                untracked_blocks: 0,
            },
            now,
        );
    }

    /// Stage 7: runs the role's hint policies when the booked worker accepts hints; `None`
    /// when it does not (counted as a skipped hint).
    fn gate_hints(
        &self,
        policy_set: &PolicySet,
        booked: &WorkerEntry,
        view: RequestView<'_>,
        selection: &Selection,
    ) -> Option<AssembledActions> {
        if !booked.info.capabilities.router_hint {
            self.metrics.count_hint_skipped();
            return None;
        }
        let hints = policy_set
            .role_hints
            .get(&view.role)
            .map_or(&[][..], Vec::as_slice);
        let context = HintContext::new(view, selection.worker, selection.kv_copy.as_ref());
        let assembled = assemble(hints, &context);
        self.metrics
            .count_hint(assembled.actions.len(), assembled.dropped);
        Some(assembled)
    }
}

/// Stage 9, for a role with shadows: the booking as its shadows will see it (its id and
/// candidates already copied into reused buffers), with what the live policies did.
fn shadow_case(
    policy_set: &Arc<PolicySet>,
    request: &RouteRequest,
    block_size: u32,
    chain: Option<Arc<[SequenceHash]>>,
    buffers: CaseBuffers,
    live: LiveOutcome,
) -> ShadowCase {
    ShadowCase {
        policy_version: policy_set.version,
        role: request.role,
        request_id: buffers.request_id,
        prompt_tokens: request.prompt.prompt_tokens(),
        block_size,
        session: request.session.clone(),
        sequence_hashes: chain.unwrap_or_else(|| Arc::from(&[][..])),
        candidates: buffers.candidates,
        filter: request.allowed_workers.clone(),
        live,
    }
}

/// The policies of `role`, if it is configured.
fn role_policies(policy_set: &PolicySet, role: Role) -> Result<&RolePolicies, BookError> {
    policy_set
        .setup
        .roles
        .get(&role)
        .ok_or(BookError::NoRoleConfig { role })
}

/// Stage 1: the request's sequence hashes, computed into `buffer` unless the caller sent them.
fn hash_prompt<'a>(
    request: &'a RouteRequest,
    block_size: u32,
    buffer: &'a mut Vec<SequenceHash>,
) -> &'a [SequenceHash] {
    match &request.prompt {
        Prompt::Tokens(tokens) if request.identity.is_plain() => {
            buffer.clear();
            sequence_hashes_iter(tokens, block_size).append_to(buffer);
            buffer
        }
        Prompt::Tokens(tokens) => {
            *buffer = sequence_hashes_for_request(tokens, block_size, &request.identity);
            buffer
        }
        Prompt::Blocks {
            sequence_hashes, ..
        } => sequence_hashes,
    }
}

/// Stage 1 of a booking: the request's sequence hashes as the chain its booking holds active
/// (`None` when the prompt has no full block). Plain token prompts are hashed straight into the
/// chain; other prompts through `buffer`.
fn active_chain(
    request: &RouteRequest,
    block_size: u32,
    buffer: &mut Vec<SequenceHash>,
) -> Option<Arc<[SequenceHash]>> {
    match &request.prompt {
        Prompt::Tokens(tokens) if request.identity.is_plain() => {
            let hashes = sequence_hashes_iter(tokens, block_size);
            (hashes.len() > 0).then(|| chain_of(hashes))
        }
        _ => {
            let hashes = hash_prompt(request, block_size, buffer);
            (!hashes.is_empty()).then(|| Arc::from(hashes))
        }
    }
}

/// `hashes` as a chain, allocated once and written in place by the hashing's own loop (`fold`,
/// tighter than one `next` a hash), without first filling it with zeros.
fn chain_of(hashes: impl ExactSizeIterator<Item = SequenceHash>) -> Arc<[SequenceHash]> {
    let mut chain = Arc::<[SequenceHash]>::new_uninit_slice(hashes.len());
    let mut slots = Arc::get_mut(&mut chain)
        .expect("a chain just allocated has no other owner")
        .iter_mut();
    hashes.for_each(|hash| {
        if let Some(slot) = slots.next() {
            slot.write(hash);
        }
    });
    // A length the iterator misreported leaves slots unwritten: they get the default hash.
    slots.for_each(|slot| {
        slot.write(SequenceHash::default());
    });
    // SAFETY: every slot of the chain was written above.
    unsafe { chain.assume_init() }
}

/// The candidate a selection booked.
struct BookedCandidate<'a> {
    /// Its registry entry (with its load cell).
    entry: &'a Arc<WorkerEntry>,
    /// The blocks of the request it caches.
    cached_blocks: usize,
}

/// Stage 5, checked: the candidate the policy chose, or an error if it chose none of them.
fn booked_candidate<'a>(
    policies: &RolePolicies,
    workers: &'a RoleWorkers,
    candidates: &[Candidate],
    selection: &Selection,
    role: Role,
) -> Result<BookedCandidate<'a>, BookError> {
    let Some(position) = candidates
        .iter()
        .position(|candidate| candidate.worker == selection.worker)
    else {
        tracing::warn!(
            %role,
            policy_type = %policies.selection_type,
            worker = %selection.worker,
            "worker-selection policy chose a worker that is not a candidate"
        );
        return Err(BookError::NotACandidate {
            role,
            policy: policies.selection_type.clone(),
            worker: selection.worker,
        });
    };
    Ok(BookedCandidate {
        entry: &workers.entries[position],
        cached_blocks: candidates[position].cached_blocks,
    })
}

/// Stage 8: the booking, with the hint envelope numbering the kept actions (none when no
/// action was kept or the worker takes no hints).
fn envelope(
    request: &RouteRequest,
    selection: Selection,
    actions: Option<AssembledActions>,
    mut stats: BookingStats,
    start: Instant,
) -> Booking {
    let mut hint = None;
    if let Some(assembled) = actions {
        stats.hint_policies_run = assembled.policies_run;
        stats.actions = assembled.actions.len();
        stats.actions_dropped = assembled.dropped;
        stats.policy_failures = assembled.failures;
        if !assembled.actions.is_empty() {
            hint = Some(KvHint::numbered(&request.request_id, assembled.actions));
        }
    }
    stats.latency = start.elapsed();
    Booking {
        request_id: request.request_id.clone(),
        role: request.role,
        worker: selection.worker,
        hint,
        committed_kv_copy: selection.kv_copy,
        stats,
    }
}
