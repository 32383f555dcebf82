//! The gateway's counters and latency histograms, rendered as Prometheus text on `/metrics`.
//! Enters: what each request did (its route and status, its worker, its time to first token
//! and end to end, retries, client disconnects, tokenization and booking times); leaves: text.

use dynamo_kv_router::metrics::escape_label;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds of request latencies (time to first token, end to end), in seconds.
const REQUEST_BOUNDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Bucket bounds of the gateway's own steps (tokenizing, booking), in seconds.
const STEP_BOUNDS: [f64; 12] = [
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1,
];

/// A fixed-bucket histogram observed without locks.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let bucket = self
            .bounds
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(self.bounds.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut running = 0;
        let separator = if labels.is_empty() { "" } else { "," };
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            running += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{separator}le=\"{bound}\"}} {running}"
            );
        }
        let count = self.count();
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{separator}le=\"+Inf\"}} {count}"
        );
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// A per-worker counter's name, help and place.
type CounterField = (
    &'static str,
    &'static str,
    fn(&WorkerCounters) -> &AtomicU64,
);

/// A per-worker histogram's name, help and place.
type HistogramField = (
    &'static str,
    &'static str,
    fn(&WorkerCounters) -> &Histogram,
);

/// What the gateway counts of one worker.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Requests forwarded to it (each try counts).
    pub requests: AtomicU64,
    /// Tries on it that failed before the first byte and were re-booked elsewhere.
    pub retries: AtomicU64,
    /// Streams it had started that failed midway.
    pub stream_errors: AtomicU64,
    /// Clients that went away while it served them.
    pub disconnects: AtomicU64,
    /// Time from the request's arrival to its first byte from this worker.
    pub ttft: Histogram,
    /// Time from the request's arrival to its end.
    pub end_to_end: Histogram,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        Self {
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            stream_errors: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            ttft: Histogram::new(&REQUEST_BOUNDS),
            end_to_end: Histogram::new(&REQUEST_BOUNDS),
        }
    }
}

/// The gateway's metrics.
#[derive(Debug)]
pub struct GatewayMetrics {
    answers: Mutex<BTreeMap<(&'static str, u16), u64>>,
    workers: Mutex<BTreeMap<u64, Arc<WorkerCounters>>>,
    tokenize: Histogram,
    booking: Histogram,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self {
            answers: Mutex::new(BTreeMap::new()),
            workers: Mutex::new(BTreeMap::new()),
            tokenize: Histogram::new(&STEP_BOUNDS),
            booking: Histogram::new(&STEP_BOUNDS),
        }
    }
}

impl GatewayMetrics {
    /// Counts one answer of `route` with `status`.
    pub fn answered(&self, route: &'static str, status: u16) {
        *self.answers.lock().entry((route, status)).or_insert(0) += 1;
    }

    /// The counters of `worker_id`, made on first use.
    pub fn worker(&self, worker_id: u64) -> Arc<WorkerCounters> {
        Arc::clone(self.workers.lock().entry(worker_id).or_default())
    }

    /// Every worker that was ever tried.
    pub fn known_workers(&self) -> std::collections::BTreeSet<u64> {
        self.workers.lock().keys().copied().collect()
    }

    /// Records how long a prompt took to tokenize.
    pub fn tokenized(&self, took: Duration) {
        self.tokenize.observe(took);
    }

    /// Records how long one booking took (every try's, a re-booking included).
    pub fn booked(&self, took: Duration) {
        self.booking.observe(took);
    }

    /// Answers of `route` with `status` so far.
    pub fn answers(&self, route: &'static str, status: u16) -> u64 {
        self.answers
            .lock()
            .get(&(route, status))
            .copied()
            .unwrap_or(0)
    }

    /// Prometheus text; `unhealthy` lists every known worker with whether its circuit is open.
    pub fn prometheus_text(&self, unhealthy: &[(u64, bool)]) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP kv_router_gateway_requests_total OpenAI requests answered, by route and status\n\
             # TYPE kv_router_gateway_requests_total counter\n",
        );
        for ((route, status), count) in self.answers.lock().iter() {
            let _ = writeln!(
                out,
                "kv_router_gateway_requests_total{{route=\"{}\",status=\"{status}\"}} {count}",
                escape_label(route)
            );
        }
        let workers: Vec<(u64, Arc<WorkerCounters>)> = self
            .workers
            .lock()
            .iter()
            .map(|(id, counters)| (*id, Arc::clone(counters)))
            .collect();
        let counters: [CounterField; 4] = [
            (
                "kv_router_gateway_worker_requests_total",
                "requests forwarded to the worker (every try)",
                |c| &c.requests,
            ),
            (
                "kv_router_gateway_retries_total",
                "tries that failed before the first byte (re-booked on another worker while tries were left)",
                |c| &c.retries,
            ),
            (
                "kv_router_gateway_stream_errors_total",
                "answers that failed after bytes had reached the client",
                |c| &c.stream_errors,
            ),
            (
                "kv_router_gateway_client_disconnects_total",
                "clients that went away before their answer ended",
                |c| &c.disconnects,
            ),
        ];
        for (name, help, field) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (id, worker) in &workers {
                let value = field(worker).load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}{{worker_id=\"{id}\"}} {value}");
            }
        }
        let histograms: [HistogramField; 2] = [
            (
                "kv_router_gateway_ttft_seconds",
                "time from a request's arrival to the first byte of its answer",
                |c| &c.ttft,
            ),
            (
                "kv_router_gateway_request_seconds",
                "time from a request's arrival to the end of its answer",
                |c| &c.end_to_end,
            ),
        ];
        for (name, help, field) in histograms {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (id, worker) in &workers {
                field(worker).render(&mut out, name, &format!("worker_id=\"{id}\""));
            }
        }
        out.push_str(
            "# HELP kv_router_gateway_tokenize_seconds time to tokenize a prompt (chat template included)\n\
             # TYPE kv_router_gateway_tokenize_seconds histogram\n",
        );
        self.tokenize
            .render(&mut out, "kv_router_gateway_tokenize_seconds", "");
        out.push_str(
            "# HELP kv_router_gateway_booking_seconds time to book a prompt on a worker (hashing, overlaps, policies, reservation), per try\n\
             # TYPE kv_router_gateway_booking_seconds histogram\n",
        );
        self.booking
            .render(&mut out, "kv_router_gateway_booking_seconds", "");
        out.push_str(
            "# HELP kv_router_gateway_worker_unhealthy 1 while the worker's circuit is open\n\
             # TYPE kv_router_gateway_worker_unhealthy gauge\n",
        );
        for (id, open) in unhealthy {
            let _ = writeln!(
                out,
                "kv_router_gateway_worker_unhealthy{{worker_id=\"{id}\"}} {}",
                u8::from(*open)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counted() {
        let metrics = GatewayMetrics::default();
        let worker = metrics.worker(3);
        worker.ttft.observe(Duration::from_millis(2));
        worker.ttft.observe(Duration::from_secs(2));
        metrics.answered("/v1/completions", 200);
        metrics.booked(Duration::from_micros(30));
        let text = metrics.prometheus_text(&[(3, true)]);
        assert!(
            text.contains("kv_router_gateway_ttft_seconds_bucket{worker_id=\"3\",le=\"0.0025\"} 1")
        );
        assert!(
            text.contains("kv_router_gateway_ttft_seconds_bucket{worker_id=\"3\",le=\"+Inf\"} 2")
        );
        assert!(text.contains("kv_router_gateway_ttft_seconds_count{worker_id=\"3\"} 2"));
        assert!(text.contains(
            "kv_router_gateway_requests_total{route=\"/v1/completions\",status=\"200\"} 1"
        ));
        assert!(text.contains("kv_router_gateway_worker_unhealthy{worker_id=\"3\"} 1"));
        assert!(text.contains("kv_router_gateway_booking_seconds_bucket{le=\"0.00001\"} 0"));
        assert!(text.contains("kv_router_gateway_booking_seconds_bucket{le=\"0.00005\"} 1"));
        assert!(text.contains("kv_router_gateway_booking_seconds_count 1"));
        assert!(text.contains("kv_router_gateway_tokenize_seconds_count 0"));
    }
}
