//! Predictions alongside KV events ([`RouterOptions::predicted_ttl`](super::RouterOptions::predicted_ttl))
//! that bookings made and the side table has not taken yet.
//!
//! Enters: a booked worker and the chain its booking hashed, with the clock's time. Leaves: the
//! same, in booking order, into the side table ([`PredictedBlocks::record`]).
//!
//! A booking queues its prediction instead of taking the state lock a second time, for
//! writing: recording an 8,192-token prompt is 512 table probes, which the booking's caller
//! need not wait for. Whoever takes the state lock next for the side table applies the queue
//! first, under that lock: the next booking or preview (so it sees every earlier booking's
//! prediction, as if each had been recorded at once), an event (so a `removed` the engine
//! reports after a booking supersedes that booking's prediction), a (de)registration, or a
//! caller with time to spare ([`Router::settle_predictions`](super::Router::settle_predictions);
//! the gateway calls it while the worker computes). Upstream also applies a booking's
//! prediction after the booking returns (its indexer takes routing decisions from a channel).

use crate::block_identity::SequenceHash;
use crate::clock::Clock;
use crate::identity::WorkerId;
use crate::kv::PredictedBlocks;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One booking's prediction, waiting.
struct Pending {
    worker: WorkerId,
    hashes: Arc<[SequenceHash]>,
    /// The clock's time at the booking.
    at: Duration,
}

/// The predictions waiting for the side table, oldest first.
#[derive(Default)]
pub(super) struct PendingPredictions {
    queue: Mutex<Vec<Pending>>,
    /// Whether the queue holds any (read without its lock).
    waiting: AtomicBool,
}

impl PendingPredictions {
    /// Queues the prediction that `hashes` are cached on `worker` from now on.
    pub(super) fn push(&self, worker: WorkerId, hashes: Arc<[SequenceHash]>, clock: &dyn Clock) {
        let mut queue = self.queue.lock();
        // Read under the queue's lock, so that the queue is in clock order.
        let at = clock.now();
        queue.push(Pending { worker, hashes, at });
        self.waiting.store(true, Ordering::Release);
    }

    /// Whether any prediction waits.
    pub(super) fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Records every waiting prediction in `side`, oldest first. The caller holds the router's
    /// state lock for writing, so a booking that reads the table after this sees them all.
    pub(super) fn apply(&self, side: &mut PredictedBlocks) {
        if !self.waiting() {
            return;
        }
        let taken = {
            let mut queue = self.queue.lock();
            self.waiting.store(false, Ordering::Release);
            std::mem::take(&mut *queue)
        };
        for pending in taken {
            side.record(pending.worker, &pending.hashes, pending.at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn chain(hashes: &[u64]) -> Arc<[SequenceHash]> {
        hashes.iter().map(|hash| SequenceHash(*hash)).collect()
    }

    #[test]
    fn waiting_predictions_are_recorded_in_booking_order_with_their_booking_times() {
        let clock = ManualClock::default();
        let worker = WorkerId::new(1, 0);
        let mut side = PredictedBlocks::new(Duration::from_secs(10));
        side.add_worker(worker);
        let pending = PendingPredictions::default();
        assert!(!pending.waiting());
        pending.push(worker, chain(&[1, 2]), &clock);
        clock.advance(Duration::from_secs(5));
        pending.push(worker, chain(&[1, 2, 3]), &clock);
        assert!(pending.waiting());
        assert_eq!(
            side.prefix_length(&chain(&[1, 2, 3]), worker, clock.now()),
            0
        );

        pending.apply(&mut side);
        assert!(!pending.waiting());
        assert_eq!(
            side.prefix_length(&chain(&[1, 2, 3]), worker, clock.now()),
            3
        );
        // The later booking renewed blocks 1 and 2: all three live until 15 s, none past it.
        let before_expiry = Duration::from_secs(14);
        assert_eq!(
            side.prefix_length(&chain(&[1, 2, 3]), worker, before_expiry),
            3
        );
        let after_expiry = Duration::from_secs(16);
        assert_eq!(
            side.prefix_length(&chain(&[1, 2, 3]), worker, after_expiry),
            0
        );
        assert_eq!(side.stats().bookings, 2);

        // Applying again records nothing twice.
        pending.apply(&mut side);
        assert_eq!(side.stats().bookings, 2);
    }
}
