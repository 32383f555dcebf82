//! Routing without KV events: each booking is recorded as a prediction that the booked worker
//! now caches the prompt's blocks (in the index, with a TTL in the [`PredictedCache`]), and
//! predictions whose TTL ran out, or that a prune drops, leave the index again.
//!
//! Predicting alongside KV events (upstream's `router_predicted_ttl_secs`,
//! [`RouterOptions::predicted_ttl`](super::RouterOptions::predicted_ttl)): the predictions go
//! to a [`PredictedBlocks`] table of their own (a booking records the chain it hashed once,
//! one table entry per block), never to the event-driven index, so they are never dumped,
//! never lend engine block ids to a hint, and leave the index's counters alone. A booking's
//! overlap pass takes, per candidate, the longer of its event-driven and its predicted prefix
//! (upstream merges its side indexer's scores by per-worker maximum), so once a worker's
//! `stored` events arrive they count as they would without predictions. A worker's `removed`
//! and `cleared` events supersede its predictions of those blocks, which are dropped at once
//! (upstream leaves them to the TTL): a removal the engine reports is never contradicted by a
//! prediction. Everything else expires by the TTL. A booking queues its prediction rather
//! than recording it itself; the queue reaches the table before anything reads it or an event
//! changes it (`pending_predictions.rs`).

use super::{BATCH_PART_BLOCKS, Prompt, RouteRequest, Router, RouterState};
use crate::block_identity::{LocalBlockHash, SequenceHash};
use crate::identity::WorkerId;
use crate::kv::{
    BatchProgress, EventOutcome, KvCacheEventData, KvIndex, PredictedBlocks, PredictedCache,
    PredictedCacheStats, RouterEvent, local_block_hashes, sequence_hashes,
    sequence_hashes_for_request,
};
use std::sync::Arc;

impl RouterState {
    /// Applies `event` to the event-driven index through `apply`, then lets it supersede the
    /// side table's predictions of its worker: those of the blocks it removes (resolved to
    /// sequence hashes before the removal) and, for a `cleared`, all of them. A `stored` keeps
    /// them (the overlap pass takes the longer prefix, so the engine's count wins where it
    /// reaches); an event the index ignored changes no prediction.
    pub(super) fn apply_superseding(
        &mut self,
        event: &RouterEvent,
        apply: impl FnOnce(&mut KvIndex) -> EventOutcome,
    ) -> EventOutcome {
        let worker = event.worker();
        let predicting = self.side.as_ref().is_some_and(|side| !side.is_empty());
        let removed: Vec<SequenceHash> = match &event.event.data {
            // Nothing predicted, nothing to supersede: the removal is not resolved.
            KvCacheEventData::Removed(remove) if predicting => remove
                .block_hashes
                .iter()
                .filter_map(|engine| self.index.held_sequence_hash(worker, *engine))
                .collect(),
            _ => Vec::new(),
        };
        let outcome = apply(&mut self.index);
        let Some(side) = self.side.as_mut() else {
            return outcome;
        };
        if outcome != EventOutcome::Applied {
            return outcome;
        }
        match &event.event.data {
            KvCacheEventData::Cleared => side.forget_worker(worker),
            KvCacheEventData::Stored(_) => {}
            KvCacheEventData::Removed(_) => {
                side.forget_blocks(worker, &removed);
            }
        }
        outcome
    }
}

impl Router {
    /// Whether the router routes without KV events, predicting caches from its bookings
    /// ([`RouterOptions::approximate`](super::RouterOptions::approximate)).
    pub fn predicts_caches(&self) -> bool {
        self.options.approximate.is_some()
    }

    /// Whether the router predicts caches from its bookings alongside KV events
    /// ([`RouterOptions::predicted_ttl`](super::RouterOptions::predicted_ttl)).
    pub fn predicts_alongside_events(&self) -> bool {
        self.options.predicted_ttl.is_some() && self.options.approximate.is_none()
    }

    /// What the predicted cache did so far, when the router routes without KV events or
    /// predicts alongside them.
    pub fn predicted_cache_stats(&self) -> Option<PredictedCacheStats> {
        self.settle_predictions();
        let state = self.state.read();
        state
            .predicted
            .as_ref()
            .map(PredictedCache::stats)
            .or(state.side.as_ref().map(PredictedBlocks::stats))
    }

    /// The number of leading `sequence_hashes` predicted cached on `worker` alongside KV events
    /// (predictions whose TTL ran out do not count); 0 when the router does not predict
    /// alongside events. A booking counts the longer of this and [`Router::cached_prefix`].
    pub fn predicted_prefix(&self, worker: WorkerId, sequence_hashes: &[SequenceHash]) -> usize {
        self.expire_predictions();
        let now = self.clock.now();
        self.state
            .read()
            .side
            .as_ref()
            .map_or(0, |side| side.prefix_length(sequence_hashes, worker, now))
    }

    /// [`Router::apply_event_batch`] when predicting alongside events: one event at a time
    /// (one numbered delivery still decides as one), each superseding its worker's
    /// predictions, under one hold of the lock per part of about [`BATCH_PART_BLOCKS`] blocks.
    pub(super) fn apply_event_batch_superseding(
        &self,
        events: &[RouterEvent],
        progress: &mut BatchProgress,
        outcomes: &mut Vec<EventOutcome>,
    ) {
        let mut rest = events;
        while !rest.is_empty() {
            let mut state = self.state.write();
            // Bookings made before these events are predictions the events may supersede.
            self.settle_predictions_into(&mut state);
            let mut blocks = 0usize;
            while let Some((event, later)) = rest.split_first() {
                if blocks >= BATCH_PART_BLOCKS {
                    break;
                }
                blocks = blocks.saturating_add(event.block_count().max(1));
                let one = std::slice::from_ref(event);
                let mut outcome = Vec::with_capacity(1);
                let applied = state.apply_superseding(event, |index| {
                    index.apply_batch_part(one, progress, &mut outcome, 1);
                    outcome.first().copied().unwrap_or(EventOutcome::Applied)
                });
                outcomes.push(applied);
                rest = later;
            }
        }
    }

    /// Removes the predictions whose TTL ran out by now (bookings and previews also do it as
    /// they go, alongside KV events a quarter of a TTL apart); nothing happens when the router
    /// trusts KV events.
    pub fn expire_predicted_blocks(&self) {
        self.expire_due(true);
    }

    /// Records the predictions bookings queued and removes those due by the clock, taking the
    /// state lock exclusively only when there is something to do (alongside KV events: when
    /// predictions wait, or the side table's next sweep is due).
    pub(super) fn expire_predictions(&self) {
        self.expire_due(false);
    }

    /// [`Router::expire_predictions`]; with `sweep_now`, the side table is swept whatever its
    /// schedule says.
    fn expire_due(&self, sweep_now: bool) {
        if self.options.approximate.is_none() && self.options.predicted_ttl.is_none() {
            return;
        }
        let now = self.clock.now();
        let due = {
            let state = self.state.read();
            let predicted_due = state
                .predicted
                .as_ref()
                .and_then(PredictedCache::next_expiry)
                .is_some_and(|expiry| expiry <= now);
            let side_due = state
                .side
                .as_ref()
                .is_some_and(|side| (sweep_now && !side.is_empty()) || side.sweep_due(now));
            predicted_due || side_due || self.pending.waiting()
        };
        if !due {
            return;
        }
        let mut removed = Vec::new();
        let mut state = self.state.write();
        let RouterState {
            index,
            predicted,
            side,
            ..
        } = &mut *state;
        if let Some(side) = side.as_mut() {
            self.pending.apply(side);
            if sweep_now {
                side.sweep(now);
            } else {
                side.sweep_if_due(now);
            }
        }
        if let Some(predicted) = predicted.as_mut() {
            predicted.expire(now, &mut removed);
        }
        for (worker, block) in removed {
            index.remove_predicted(worker, block);
        }
    }

    /// Records that `request` was booked on `worker`: its prompt's blocks count as cached there
    /// for the TTL. `hashed` are the prompt's sequence hashes when the booking computed them
    /// (predictions alongside KV events record those as they are). Without KV events the prompt
    /// is hashed again here, with its local hashes, which the index's dump needs, so that the
    /// booking pipeline stays as it is when events are trusted.
    pub(super) fn predict(
        &self,
        request: &RouteRequest,
        worker: WorkerId,
        hashed: Option<&Arc<[SequenceHash]>>,
    ) {
        if self.options.approximate.is_none() {
            if self.options.predicted_ttl.is_some() {
                self.predict_alongside_events(request, worker, hashed);
            }
            return;
        }
        let (hashes, locals): (Vec<SequenceHash>, Option<Vec<LocalBlockHash>>) =
            match &request.prompt {
                Prompt::Tokens(tokens) => {
                    let locals = local_block_hashes(tokens, self.block_size, &request.identity);
                    (sequence_hashes(&locals), Some(locals))
                }
                Prompt::Blocks {
                    sequence_hashes, ..
                } => (sequence_hashes.clone(), None),
            };
        if hashes.is_empty() {
            return;
        }
        let mut removed = Vec::new();
        let mut state = self.state.write();
        // Read under the lock, so that bookings are recorded in clock order.
        let now = self.clock.now();
        let RouterState {
            index, predicted, ..
        } = &mut *state;
        let Some(predicted) = predicted.as_mut() else {
            return;
        };
        predicted.expire(now, &mut removed);
        for (worker, block) in removed.drain(..) {
            index.remove_predicted(worker, block);
        }
        if index.worker_state(worker).is_none() {
            return;
        }
        index.store_predicted(worker, &hashes, locals.as_deref());
        predicted.record(worker, &hashes, now);
        predicted.prune(&mut removed);
        for (worker, block) in removed {
            index.remove_predicted(worker, block);
        }
    }

    /// Queues `request`'s booking on `worker` for the side table, alongside KV events: its
    /// prompt's blocks (`hashed`, or hashed here) count as predicted there for the TTL from
    /// now, once the queue is applied (see `pending_predictions.rs`).
    fn predict_alongside_events(
        &self,
        request: &RouteRequest,
        worker: WorkerId,
        hashed: Option<&Arc<[SequenceHash]>>,
    ) {
        let hashes = match (hashed, &request.prompt) {
            (Some(hashes), _) => Arc::clone(hashes),
            (None, Prompt::Tokens(tokens)) => {
                sequence_hashes_for_request(tokens, self.block_size, &request.identity).into()
            }
            (
                None,
                Prompt::Blocks {
                    sequence_hashes, ..
                },
            ) => Arc::from(sequence_hashes.as_slice()),
        };
        if hashes.is_empty() {
            return;
        }
        self.pending.push(worker, hashes, self.clock.as_ref());
    }

    /// Records the predictions that bookings queued alongside KV events (each as of its
    /// booking's time) in the side table now, instead of when the next booking, event or
    /// (de)registration would: for a caller with time to spare, such as the gateway while the
    /// booked worker computes. Nothing happens when none waits.
    pub fn settle_predictions(&self) {
        if !self.pending.waiting() {
            return;
        }
        let mut state = self.state.write();
        self.settle_predictions_into(&mut state);
    }

    /// [`Router::settle_predictions`] under a write hold of the state lock the caller has.
    pub(super) fn settle_predictions_into(&self, state: &mut RouterState) {
        if let Some(side) = state.side.as_mut() {
            self.pending.apply(side);
        }
    }
}
