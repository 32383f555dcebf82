//! Each worker's circuit breaker: a worker that refuses connections, times out or answers 5xx
//! before its first byte is taken out of booking for a backoff that doubles with each failure
//! in a row (capped). Once the backoff passed, a health probe that passes lets it be booked
//! again (half-open): a request that succeeds there closes the circuit, one that fails opens
//! it again for twice as long, so a worker whose `/health` lies is tried less and less often. Enters: successes and
//! failures of tries, probe answers; leaves: which workers may be booked and which are due for
//! a probe.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How the breaker backs off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerOptions {
    /// The first backoff after a failure.
    pub base_backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
}

impl Default for BreakerOptions {
    fn default() -> Self {
        Self {
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Breaker {
    failures: u32,
    open_until: Instant,
    /// Its probe passed: it is booked again, on trial.
    half_open: bool,
}

/// The breakers of every worker that failed lately (a worker absent here is healthy).
#[derive(Debug, Default)]
pub struct WorkerHealth {
    options: BreakerOptions,
    open: Mutex<BTreeMap<u64, Breaker>>,
}

impl WorkerHealth {
    /// Breakers backing off as `options` says.
    pub fn new(options: BreakerOptions) -> Self {
        Self {
            options,
            open: Mutex::new(BTreeMap::new()),
        }
    }

    /// A try on `worker_id` failed before its first byte: open (or re-open) its circuit for
    /// a backoff that doubles with each failure in a row. Returns the backoff.
    pub fn failed(&self, worker_id: u64, now: Instant) -> Duration {
        let mut open = self.open.lock();
        let failures = open.get(&worker_id).map_or(0, |b| b.failures) + 1;
        let backoff = self.backoff(failures);
        open.insert(
            worker_id,
            Breaker {
                failures,
                open_until: now + backoff,
                half_open: false,
            },
        );
        backoff
    }

    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.options
            .base_backoff
            .saturating_mul(1 << doublings)
            .min(self.options.max_backoff)
    }

    /// `worker_id` answered: close its circuit.
    pub fn succeeded(&self, worker_id: u64) {
        // The common case, a healthy worker, takes the lock only to look.
        let mut open = self.open.lock();
        if !open.is_empty() {
            open.remove(&worker_id);
        }
    }

    /// `worker_id`'s health probe passed: it is booked again, on trial (its failure count is
    /// kept until a request succeeds).
    pub fn probe_passed(&self, worker_id: u64) {
        if let Some(breaker) = self.open.lock().get_mut(&worker_id) {
            breaker.half_open = true;
        }
    }

    /// Whether `worker_id`'s circuit is open (it is not booked).
    pub fn is_open(&self, worker_id: u64) -> bool {
        self.open
            .lock()
            .get(&worker_id)
            .is_some_and(|breaker| !breaker.half_open)
    }

    /// Every worker whose circuit is open.
    pub fn open_workers(&self) -> BTreeSet<u64> {
        let open = self.open.lock();
        if open.is_empty() {
            return BTreeSet::new();
        }
        open.iter()
            .filter(|(_, breaker)| !breaker.half_open)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Open workers whose backoff has passed: due for a health probe.
    pub fn due_for_probe(&self, now: Instant) -> Vec<u64> {
        self.open
            .lock()
            .iter()
            .filter(|(_, breaker)| !breaker.half_open && breaker.open_until <= now)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Forgets `worker_id` (it was deregistered).
    pub fn forget(&self, worker_id: u64) {
        self.open.lock().remove(&worker_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> WorkerHealth {
        WorkerHealth::new(BreakerOptions {
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
        })
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let health = health();
        let now = Instant::now();
        assert_eq!(health.failed(1, now), Duration::from_millis(100));
        assert_eq!(health.failed(1, now), Duration::from_millis(200));
        assert_eq!(health.failed(1, now), Duration::from_millis(350));
        assert_eq!(health.failed(1, now), Duration::from_millis(350));
    }

    #[test]
    fn a_worker_is_probed_only_after_its_backoff_and_closes_on_success() {
        let health = health();
        let now = Instant::now();
        health.failed(7, now);
        assert!(health.is_open(7));
        assert!(health.due_for_probe(now).is_empty());
        assert_eq!(health.due_for_probe(now + Duration::from_millis(100)), [7]);
        health.probe_passed(7);
        assert!(!health.is_open(7), "booked again on trial");
        assert!(
            health
                .due_for_probe(now + Duration::from_secs(1))
                .is_empty()
        );
        // A failure on trial backs off twice as long.
        assert_eq!(health.failed(7, now), Duration::from_millis(200));
        assert!(health.is_open(7));
        health.probe_passed(7);
        health.succeeded(7);
        assert!(!health.is_open(7));
        assert!(health.open_workers().is_empty());
        // A success after closing starts the count afresh.
        assert_eq!(health.failed(7, now), Duration::from_millis(100));
    }
}
