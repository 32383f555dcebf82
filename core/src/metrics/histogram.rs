//! The booking-latency histogram: fixed buckets, observed without locks, read as a
//! cumulative snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the booking-latency buckets, in seconds.
const LATENCY_BOUNDS: [f64; 18] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 1.0,
];

/// A cumulative histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Upper bounds of the buckets, in seconds (the implicit last bucket is `+Inf`).
    pub bounds_seconds: Vec<f64>,
    /// Observations at or below each bound (cumulative), then the total for `+Inf`.
    pub cumulative_counts: Vec<u64>,
    /// Sum of observations, in seconds.
    pub sum_seconds: f64,
    /// Number of observations.
    pub count: u64,
}

impl HistogramSnapshot {
    /// The smallest bucket bound at or above quantile `q` (0..=1), in seconds; `None` when
    /// empty or when the quantile falls in the `+Inf` bucket.
    pub fn quantile_upper_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0) as u64;
        self.bounds_seconds
            .iter()
            .zip(&self.cumulative_counts)
            .find(|(_, count)| **count >= rank)
            .map(|(bound, _)| *bound)
    }
}

/// A fixed-bucket latency histogram with lock-free observation.
#[derive(Debug)]
pub(super) struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    pub(super) fn observe(&self, latency: Duration) {
        let seconds = latency.as_secs_f64();
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative_counts = self
            .buckets
            .iter()
            .map(|bucket| {
                running += bucket.load(Ordering::Relaxed);
                running
            })
            .collect();
        HistogramSnapshot {
            bounds_seconds: LATENCY_BOUNDS.to_vec(),
            cumulative_counts,
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let histogram = LatencyHistogram::default();
        histogram.observe(Duration::from_nanos(500));
        histogram.observe(Duration::from_micros(3));
        histogram.observe(Duration::from_secs(5));
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 3);
        assert_eq!(snapshot.cumulative_counts[0], 1);
        assert_eq!(snapshot.cumulative_counts[2], 2);
        assert_eq!(snapshot.cumulative_counts.last(), Some(&3));
        assert_eq!(snapshot.quantile_upper_bound(0.5), Some(5e-6));
        assert_eq!(snapshot.quantile_upper_bound(1.0), None);
    }
}
