//! Time as the router reads it for what expires by the clock (predicted cache entries): a
//! reading is a [`Duration`] since the clock's own origin. The service runs on the monotonic
//! clock; the replay, in virtual time, sets a [`ManualClock`] as its simulation advances.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of monotonic time readings.
pub trait Clock: Send + Sync {
    /// Time since the clock's origin; never decreases.
    fn now(&self) -> Duration;
}

/// The process's monotonic clock ([`Instant`]), read from when it was created.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock the caller moves (virtual time, tests), in nanoseconds; starts at 0.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock reading 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the reading to `now`; an earlier reading than the current one is ignored, so the
    /// clock never goes back.
    pub fn set(&self, now: Duration) {
        let nanos = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    /// Moves the reading `by` forward.
    pub fn advance(&self, by: Duration) {
        self.set(self.now().saturating_add(by));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_forward_only() {
        let clock = ManualClock::new();
        assert_eq!(clock.now(), Duration::ZERO);
        clock.set(Duration::from_secs(5));
        clock.set(Duration::from_secs(2));
        assert_eq!(clock.now(), Duration::from_secs(5));
        clock.advance(Duration::from_millis(1));
        assert_eq!(clock.now(), Duration::from_millis(5_001));
    }

    #[test]
    fn the_monotonic_clock_does_not_go_back() {
        let clock = MonotonicClock::new();
        let first = clock.now();
        assert!(clock.now() >= first);
    }
}
