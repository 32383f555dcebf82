//! Routing without KV events (upstream's `--no-kv-events`, its approximate indexer): the
//! router predicts each worker's cache from its own bookings. A booked prompt's blocks count as
//! cached on the booked worker until their TTL runs out (a later booking of the same blocks on
//! that worker renews it), and when the predicted entries exceed `max_tree_size` the oldest
//! are pruned down to `prune_target_ratio × max_tree_size`.
//!
//! [`PredictedCache`] keeps only the timers: which (worker, block) entries are predicted and
//! when each expires. The router applies what it says to the same [`KvIndex`](super::KvIndex)
//! the policies query, so every selection and hint policy works unchanged. Time is whatever
//! the caller passes (a [`Duration`] since its clock's origin, see [`crate::clock`]), so the
//! replay runs it in virtual time.
//!
//! Order of removal, as upstream's prune manager pops its heap: the earliest expiry first,
//! and among entries that expire together (one booking's blocks) the deepest block first, so a
//! pruned prediction is shortened from its end and what remains is still a prefix. (Bookings
//! recorded at the very same instant go in booking order; upstream orders those by position.)

use crate::block_identity::SequenceHash;
use crate::identity::WorkerId;
use crate::kv::index_hasher::U64HashBuilder;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Upstream's `router_ttl_secs` default: a predicted block counts as cached for 120 s.
pub const DEFAULT_ROUTER_TTL_SECS: f64 = 120.0;
/// Upstream's `router_max_tree_size` default (2^20 entries) before the predictions are pruned.
pub const DEFAULT_ROUTER_MAX_TREE_SIZE: usize = 1 << 20;
/// Upstream's `router_prune_target_ratio` default: prune down to 80 % of the maximum.
pub const DEFAULT_ROUTER_PRUNE_TARGET_RATIO: f64 = 0.8;

/// How the router predicts caches when it routes without KV events.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApproximateConfig {
    /// How long a booked block counts as cached on its worker (upstream `router_ttl_secs`).
    pub ttl: Duration,
    /// Predicted (worker, block) entries above which the oldest are pruned (upstream
    /// `router_max_tree_size`).
    pub max_tree_size: usize,
    /// The share of `max_tree_size` a prune keeps (upstream `router_prune_target_ratio`).
    pub prune_target_ratio: f64,
}

impl Default for ApproximateConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs_f64(DEFAULT_ROUTER_TTL_SECS),
            max_tree_size: DEFAULT_ROUTER_MAX_TREE_SIZE,
            prune_target_ratio: DEFAULT_ROUTER_PRUNE_TARGET_RATIO,
        }
    }
}

/// A setting of [`ApproximateConfig`] out of its range (upstream validates the same ranges).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApproximateConfigError {
    /// The TTL is negative, not a number or too large.
    #[error("router_ttl_secs must be a finite number of seconds, 0 or more; got {value}")]
    Ttl {
        /// The value given.
        value: f64,
    },
    /// The maximum tree size is 0.
    #[error("router_max_tree_size must be at least 1 block")]
    MaxTreeSize,
    /// The prune target ratio is outside 0..=1.
    #[error("router_prune_target_ratio must be between 0 and 1; got {value}")]
    PruneTargetRatio {
        /// The value given.
        value: f64,
    },
}

impl ApproximateConfig {
    /// The configuration of upstream's three settings, checked as upstream checks them.
    pub fn new(
        router_ttl_secs: f64,
        router_max_tree_size: usize,
        router_prune_target_ratio: f64,
    ) -> Result<Self, ApproximateConfigError> {
        if router_ttl_secs.is_nan() || router_ttl_secs < 0.0 {
            return Err(ApproximateConfigError::Ttl {
                value: router_ttl_secs,
            });
        }
        let ttl = Duration::try_from_secs_f64(router_ttl_secs).map_err(|_| {
            ApproximateConfigError::Ttl {
                value: router_ttl_secs,
            }
        })?;
        if router_max_tree_size == 0 {
            return Err(ApproximateConfigError::MaxTreeSize);
        }
        if !(0.0..=1.0).contains(&router_prune_target_ratio) {
            return Err(ApproximateConfigError::PruneTargetRatio {
                value: router_prune_target_ratio,
            });
        }
        Ok(Self {
            ttl,
            max_tree_size: router_max_tree_size,
            prune_target_ratio: router_prune_target_ratio,
        })
    }

    /// Entries a prune keeps: `floor(max_tree_size × prune_target_ratio)`, as upstream.
    pub fn target_size(&self) -> usize {
        (self.max_tree_size as f64 * self.prune_target_ratio) as usize
    }
}

/// `router_predicted_ttl_secs` out of its range (upstream requires a number, 0 or more).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("router_predicted_ttl_secs must be a finite number of seconds, 0 or more; got {value}")]
pub struct PredictedTtlError {
    /// The value given.
    pub value: f64,
}

/// The TTL of predictions made alongside KV events (upstream `router_predicted_ttl_secs`,
/// [`RouterOptions::predicted_ttl`](crate::router::RouterOptions::predicted_ttl)), checked as
/// upstream checks it.
pub fn predicted_ttl(router_predicted_ttl_secs: f64) -> Result<Duration, PredictedTtlError> {
    if router_predicted_ttl_secs.is_nan() || router_predicted_ttl_secs < 0.0 {
        return Err(PredictedTtlError {
            value: router_predicted_ttl_secs,
        });
    }
    Duration::try_from_secs_f64(router_predicted_ttl_secs).map_err(|_| PredictedTtlError {
        value: router_predicted_ttl_secs,
    })
}

/// What the predicted cache did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PredictedCacheStats {
    /// Bookings recorded.
    pub bookings: u64,
    /// (worker, block) entries recorded, renewals included.
    pub recorded_blocks: u64,
    /// Entries removed because their TTL ran out.
    pub expired_blocks: u64,
    /// Entries removed by size pruning.
    pub pruned_blocks: u64,
    /// Prunes run (the size went over the maximum).
    pub prunes: u64,
    /// Entries predicted now (a gauge).
    pub entries: u64,
}

/// One recorded entry in removal order: its expiry, the number of the booking that recorded
/// it, and its key. Stale once its key was renewed, removed or forgotten (the timers then hold
/// another booking's number, or none).
type Queued = (Duration, u64, WorkerId, u64);

/// The predicted (worker, block) entries and when each expires.
///
/// Every entry lives for the same TTL and the router records bookings in clock order, so
/// expiries arrive in order: a queue in recording order is also in expiry order. Renewals
/// leave their old record in the queue, skipped when it comes up (the timers say which record
/// is current) and compacted away when stale records outnumber live ones.
#[derive(Debug)]
pub struct PredictedCache {
    config: ApproximateConfig,
    /// The number of the booking that last recorded each entry: the source of truth (its
    /// queued record holds the expiry).
    timers: HashMap<(WorkerId, u64), u64, U64HashBuilder>,
    /// Records in removal order: by expiry, a booking's deepest block first.
    queue: VecDeque<Queued>,
    stats: PredictedCacheStats,
}

impl PredictedCache {
    /// An empty cache running `config`.
    pub fn new(config: ApproximateConfig) -> Self {
        Self {
            config,
            timers: HashMap::with_hasher(U64HashBuilder),
            queue: VecDeque::new(),
            stats: PredictedCacheStats::default(),
        }
    }

    /// The configuration it runs.
    pub fn config(&self) -> &ApproximateConfig {
        &self.config
    }

    /// Entries predicted now.
    pub fn len(&self) -> usize {
        self.timers.len()
    }

    /// Whether nothing is predicted.
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// What it did so far.
    pub fn stats(&self) -> PredictedCacheStats {
        PredictedCacheStats {
            entries: self.timers.len() as u64,
            ..self.stats
        }
    }

    /// The earliest expiry of a queued record, if any (a stale record may come first: then
    /// [`PredictedCache::expire`] at that time removes nothing).
    pub fn next_expiry(&self) -> Option<Duration> {
        self.queue.front().map(|queued| queued.0)
    }

    /// Whether `worker` is predicted to cache `block` (expired entries count until
    /// [`PredictedCache::expire`] removes them).
    pub fn contains(&self, worker: WorkerId, block: SequenceHash) -> bool {
        self.timers.contains_key(&(worker, block.0))
    }

    /// Records that `blocks` (a prompt's sequence hashes, in order) were booked on `worker` at
    /// `now`: each counts as cached there until `now + ttl`, a renewal for those already
    /// predicted. `now` must not be earlier than the previous call's.
    pub fn record(&mut self, worker: WorkerId, blocks: &[SequenceHash], now: Duration) {
        let expiry = now.saturating_add(self.config.ttl);
        let booking = self.stats.bookings;
        self.stats.bookings += 1;
        self.stats.recorded_blocks += blocks.len() as u64;
        // Deepest first, so that a prune shortens the prediction from its end. A renewal, even
        // at the same instant, queues its entry again in this booking's order: the earlier
        // record goes stale.
        for block in blocks.iter().rev() {
            self.timers.insert((worker, block.0), booking);
            self.queue.push_back((expiry, booking, worker, block.0));
        }
        if self.queue.len() > 2 * self.timers.len() + 1024 {
            let timers = &self.timers;
            self.queue.retain(|(_, booking, worker, block)| {
                timers.get(&(*worker, *block)) == Some(booking)
            });
        }
    }

    /// Removes the entries whose expiry is `now` or earlier and appends them to `removed`.
    pub fn expire(&mut self, now: Duration, removed: &mut Vec<(WorkerId, SequenceHash)>) {
        let before = removed.len();
        while self.queue.front().is_some_and(|queued| queued.0 <= now) {
            self.pop_front(removed);
        }
        self.stats.expired_blocks += (removed.len() - before) as u64;
    }

    /// When more than `max_tree_size` entries are predicted, removes the oldest (see the
    /// module's order) until [`ApproximateConfig::target_size`] remain, and appends them to
    /// `removed`.
    pub fn prune(&mut self, removed: &mut Vec<(WorkerId, SequenceHash)>) {
        if self.timers.len() <= self.config.max_tree_size {
            return;
        }
        let target = self.config.target_size();
        tracing::debug!(
            entries = self.timers.len(),
            max_tree_size = self.config.max_tree_size,
            target,
            "predicted cache over its maximum size; pruning the oldest entries"
        );
        let before = removed.len();
        while self.timers.len() > target && !self.queue.is_empty() {
            self.pop_front(removed);
        }
        self.stats.pruned_blocks += (removed.len() - before) as u64;
        self.stats.prunes += 1;
    }

    /// Forgets every entry of `worker` (it left; the index dropped its blocks).
    pub fn forget_worker(&mut self, worker: WorkerId) {
        self.timers.retain(|(w, _), _| *w != worker);
        self.queue.retain(|(_, _, w, _)| *w != worker);
    }

    /// Forgets one entry (the index no longer holds it); its queued record goes stale.
    pub fn forget(&mut self, worker: WorkerId, block: SequenceHash) {
        self.timers.remove(&(worker, block.0));
    }

    /// Pops the front record; if it is current, removes its entry and appends it to `removed`.
    fn pop_front(&mut self, removed: &mut Vec<(WorkerId, SequenceHash)>) {
        let Some((_, booking, worker, block)) = self.queue.pop_front() else {
            return;
        };
        if self.timers.get(&(worker, block)) == Some(&booking) {
            self.timers.remove(&(worker, block));
            removed.push((worker, SequenceHash(block)));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BTreeMap;

    /// Worker `id` at rank 0 (the predicted-block tests share it).
    pub(crate) fn w(id: u64) -> WorkerId {
        WorkerId::new(id, 0)
    }

    /// The sequence hashes `range`, one block each.
    pub(crate) fn blocks(range: std::ops::Range<u64>) -> Vec<SequenceHash> {
        range.map(SequenceHash).collect()
    }

    fn config(ttl_secs: u64, max: usize, ratio: f64) -> ApproximateConfig {
        ApproximateConfig {
            ttl: Duration::from_secs(ttl_secs),
            max_tree_size: max,
            prune_target_ratio: ratio,
        }
    }

    #[test]
    fn defaults_are_upstreams() {
        let config = ApproximateConfig::default();
        assert_eq!(config.ttl, Duration::from_secs(120));
        assert_eq!(config.max_tree_size, 1_048_576);
        assert_eq!(config.prune_target_ratio, 0.8);
        assert_eq!(config.target_size(), 838_860);
    }

    #[test]
    fn the_predicted_ttl_is_checked_as_upstream_checks_it() {
        assert_eq!(predicted_ttl(0.0), Ok(Duration::ZERO));
        assert_eq!(predicted_ttl(1.5), Ok(Duration::from_millis(1_500)));
        for bad in [-0.5, f64::NAN, f64::INFINITY] {
            assert!(predicted_ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        assert!(matches!(
            ApproximateConfig::new(-1.0, 10, 0.5),
            Err(ApproximateConfigError::Ttl { .. })
        ));
        assert!(matches!(
            ApproximateConfig::new(f64::NAN, 10, 0.5),
            Err(ApproximateConfigError::Ttl { .. })
        ));
        assert!(matches!(
            ApproximateConfig::new(f64::INFINITY, 10, 0.5),
            Err(ApproximateConfigError::Ttl { .. })
        ));
        assert_eq!(
            ApproximateConfig::new(1.0, 0, 0.5),
            Err(ApproximateConfigError::MaxTreeSize)
        );
        assert!(matches!(
            ApproximateConfig::new(1.0, 10, 1.5),
            Err(ApproximateConfigError::PruneTargetRatio { .. })
        ));
        let ok = ApproximateConfig::new(0.5, 10, 0.0).unwrap();
        assert_eq!(ok.ttl, Duration::from_millis(500));
    }

    #[test]
    fn entries_expire_at_their_ttl_and_renewals_push_it_back() {
        let mut cache = PredictedCache::new(config(10, usize::MAX, 0.5));
        let mut removed = Vec::new();
        cache.record(w(1), &blocks(0..3), Duration::from_secs(0));
        cache.record(w(1), &blocks(0..1), Duration::from_secs(5));
        cache.expire(Duration::from_secs(9), &mut removed);
        assert!(removed.is_empty());
        assert_eq!(cache.next_expiry(), Some(Duration::from_secs(10)));
        cache.expire(Duration::from_secs(10), &mut removed);
        // Deepest first among those expiring together.
        assert_eq!(
            removed,
            vec![(w(1), SequenceHash(2)), (w(1), SequenceHash(1))]
        );
        assert!(cache.contains(w(1), SequenceHash(0)));
        removed.clear();
        cache.expire(Duration::from_secs(15), &mut removed);
        assert_eq!(removed, vec![(w(1), SequenceHash(0))]);
        assert!(cache.is_empty());
        assert_eq!(cache.stats().expired_blocks, 3);
    }

    #[test]
    fn a_zero_ttl_predicts_nothing_past_the_booking() {
        let mut cache = PredictedCache::new(config(0, usize::MAX, 0.5));
        let mut removed = Vec::new();
        cache.record(w(1), &blocks(0..2), Duration::from_secs(3));
        cache.expire(Duration::from_secs(3), &mut removed);
        assert_eq!(removed.len(), 2);
    }

    #[test]
    fn pruning_keeps_the_target_share_of_the_newest() {
        // Upstream's example: max 5, ratio 0.4; six one-block bookings leave the two newest.
        let mut cache = PredictedCache::new(config(60, 5, 0.4));
        let mut removed = Vec::new();
        for n in 0..5u64 {
            cache.record(w(42), &blocks(n..n + 1), Duration::from_millis(n));
            cache.prune(&mut removed);
        }
        assert!(removed.is_empty(), "at the maximum, nothing is pruned");
        cache.record(w(42), &blocks(5..6), Duration::from_millis(5));
        cache.prune(&mut removed);
        let pruned: Vec<u64> = removed.iter().map(|(_, b)| b.0).collect();
        assert_eq!(pruned, vec![0, 1, 2, 3]);
        assert!(cache.contains(w(42), SequenceHash(4)) && cache.contains(w(42), SequenceHash(5)));
        assert_eq!(cache.stats().prunes, 1);
    }

    #[test]
    fn forgetting_a_worker_keeps_the_others() {
        let mut cache = PredictedCache::new(config(60, usize::MAX, 0.5));
        cache.record(w(1), &blocks(0..4), Duration::ZERO);
        cache.record(w(2), &blocks(0..4), Duration::ZERO);
        cache.forget_worker(w(1));
        assert_eq!(cache.len(), 4);
        assert!(!cache.contains(w(1), SequenceHash(0)) && cache.contains(w(2), SequenceHash(0)));
        cache.forget(w(2), SequenceHash(3));
        assert_eq!(cache.len(), 3);
    }

    /// One step of a model check: time passes, then a prompt is booked on a worker.
    #[derive(Clone, Copy, Debug)]
    struct Step {
        advance_ms: u64,
        worker: u64,
        prefix: u64,
        len: u64,
    }

    /// Runs `steps` through the cache and through a model (a map of (worker, block) →
    /// (expiry, booking number, position), expired by a scan and pruned by sorting: oldest
    /// expiry first, bookings of the same instant in booking order, deepest block first); the
    /// cache must remove the same entries in the same order and hold as many.
    fn check_against_model(config: ApproximateConfig, steps: &[Step]) {
        let mut cache = PredictedCache::new(config);
        let mut model: BTreeMap<(WorkerId, u64), (Duration, usize, u32)> = BTreeMap::new();
        let mut now = Duration::ZERO;
        for (booking, step) in steps.iter().enumerate() {
            now += Duration::from_millis(step.advance_ms);
            let worker = w(step.worker);
            // Prompts share their leading blocks: block k of prefix `prefix`.
            let prompt: Vec<SequenceHash> = (0..step.len)
                .map(|k| SequenceHash(step.prefix * 100 + k))
                .collect();
            let mut removed = Vec::new();
            cache.expire(now, &mut removed);
            cache.record(worker, &prompt, now);
            cache.prune(&mut removed);

            let mut expected = Vec::new();
            let mut due: Vec<_> = model
                .iter()
                .filter(|(_, (expiry, _, _))| *expiry <= now)
                .map(|(&(w, b), &(e, n, p))| (e, n, Reverse(p), w, b))
                .collect();
            due.sort();
            for (_, _, _, w, b) in due {
                model.remove(&(w, b));
                expected.push((w, SequenceHash(b)));
            }
            for (k, block) in prompt.iter().enumerate() {
                model.insert((worker, block.0), (now + config.ttl, booking, k as u32));
            }
            if model.len() > config.max_tree_size {
                let mut all: Vec<_> = model
                    .iter()
                    .map(|(&(w, b), &(e, n, p))| (e, n, Reverse(p), w, b))
                    .collect();
                all.sort();
                let excess = model.len() - config.target_size();
                for (_, _, _, w, b) in all.into_iter().take(excess) {
                    model.remove(&(w, b));
                    expected.push((w, SequenceHash(b)));
                }
            }
            assert_eq!(removed, expected, "at {now:?}");
            assert_eq!(cache.len(), model.len());
        }
    }

    #[test]
    fn agrees_with_a_simple_model() {
        let rng = crate::rng::SplitMix64::seeded(7);
        let steps: Vec<Step> = (0..2_000)
            .map(|_| Step {
                advance_ms: 1 + rng.next_u64() % 3_000,
                worker: rng.next_u64() % 3,
                prefix: rng.next_u64() % 8,
                len: rng.next_u64() % 12,
            })
            .collect();
        check_against_model(config(20, 40, 0.5), &steps);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

        /// TTL expiry and pruning agree with the model for any TTL, size limit, target ratio
        /// and booking sequence.
        #[test]
        fn expiry_and_pruning_agree_with_the_model(
            ttl_secs in 0u64..30,
            max in 1usize..60,
            ratio in 0.05f64..=1.0,
            raw in proptest::collection::vec((0u64..5_000, 0u64..4, 0u64..6, 0u64..14), 1..300),
        ) {
            let steps: Vec<Step> = raw
                .into_iter()
                .map(|(advance_ms, worker, prefix, len)| Step { advance_ms, worker, prefix, len })
                .collect();
            check_against_model(config(ttl_secs, max, ratio), &steps);
        }
    }
}
