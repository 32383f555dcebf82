//! Per-configuration figures computed from a simulation: hit rates, TTFT, load balance, hints,
//! the router's own booking latency and throughput.

pub use crate::hit_rate::HitRatePoint;

use crate::hit_rate::hit_rate_over_time;
use crate::invariants::Invariants;
use crate::outcome::SimulationResult;
use dynamo_kv_router::kv::ApproximateConfig;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
/// Most points kept on the TTFT CDF.
const CDF_POINTS: usize = 200;

/// How one stage's blocks were obtained, block-weighted over all requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StageSummary {
    /// The role booked in this stage.
    pub role: String,
    /// Requests served in this stage.
    pub served: usize,
    /// Full prompt blocks.
    pub blocks: u64,
    /// Blocks the booked worker held.
    pub local: u64,
    /// Blocks copied from a peer by a `kv.fetch` and used.
    pub fetched: u64,
    /// Blocks computed (in a decode stage after prefill: transferred from the prefill worker).
    pub recomputed: u64,
    /// `local / blocks`.
    pub local_rate: f64,
    /// `fetched / blocks`.
    pub fetched_rate: f64,
    /// `recomputed / blocks`.
    pub recomputed_rate: f64,
    /// Blocks copied that could not be used.
    pub fetch_wasted: u64,
    /// Blocks a `kv.fetch` named that the source had already evicted.
    pub hint_blocks_evicted: u64,
    /// Bookings where the router's predicted cached prefix for the booked worker equalled the
    /// prefix the worker held when it started the request.
    pub router_view_exact: u64,
    /// `router_view_exact / served`: how often the router's view was right.
    pub router_view_exact_rate: f64,
    /// Mean of |predicted − held at start| over the stage's requests, in blocks.
    pub router_view_mean_error_blocks: f64,
    /// Mean of (predicted − held at start), in blocks: above 0 the router expected more than
    /// the worker still held (evicted meanwhile), below 0 less (events not yet delivered).
    pub router_view_mean_bias_blocks: f64,
}

/// p50, p90, p99 and mean of a distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values` (sorted in place).
    pub fn of(values: &mut [f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let index = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
            values[index]
        };
        Self {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            mean: values.iter().sum::<f64>() / values.len() as f64,
        }
    }
}

/// The busy time of one role's workers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoleLoad {
    /// The role.
    pub role: String,
    /// Busy seconds (prefill, fetch and transfer) of each worker, in worker order.
    pub busy_s: Vec<f64>,
    /// Max over mean busy time: 1.0 is perfectly balanced.
    pub max_over_mean: f64,
}

/// Hints and actions the router sent, and what became of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HintSummary {
    /// Bookings that carried a hint.
    pub hints_sent: u64,
    /// Actions in those hints.
    pub actions: u64,
    /// `kv.fetch` actions executed.
    pub fetch_actions: u64,
    /// Other action types (counted and ignored).
    pub other_actions: u64,
    /// `kv.fetch` actions that named an unknown source or had a bad payload.
    pub unusable_fetch_actions: u64,
    /// Actions dropped at the router's cap.
    pub actions_dropped: u64,
    /// Hint policies that failed.
    pub policy_failures: u64,
}

/// The router's own cost: wall clock of its `book()` calls, and of the whole replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RouterCost {
    /// Successful bookings.
    pub bookings: u64,
    /// Median `book()` latency in microseconds.
    pub book_p50_us: f64,
    /// 99th percentile `book()` latency in microseconds.
    pub book_p99_us: f64,
    /// Bookings per second of time spent inside `book()`.
    pub bookings_per_s_router: f64,
    /// Bookings per second of the whole replay (simulation, events and router).
    pub bookings_per_s_end_to_end: f64,
    /// KV events delivered.
    pub events: u64,
    /// Wall-clock time inside the router's `apply_event`, in milliseconds.
    pub event_apply_ms: f64,
    /// Wall-clock time inside the router's `book()`, in milliseconds.
    pub book_ms: f64,
    /// Wall-clock duration of the replay, in milliseconds.
    pub wall_ms: f64,
}

/// Everything reported for one configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConfigReport {
    /// The configuration's name (file name or built-in name).
    pub name: String,
    /// The router mode it runs.
    pub router_mode: String,
    /// How its router predicted caches when it ran without KV events (`None`: with events).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "approximate_json"
    )]
    pub without_kv_events: Option<ApproximateConfig>,
    /// Requests in the workload.
    pub requests: usize,
    /// Requests served to the first token.
    pub served: usize,
    /// Failed bookings by reason.
    pub book_failures: BTreeMap<String, usize>,
    /// Per stage (aggregated, or prefill then decode).
    pub stages: Vec<StageSummary>,
    /// Estimated time to first token, milliseconds.
    pub ttft_ms: Percentiles,
    /// Load balance per role.
    pub load: Vec<RoleLoad>,
    /// Hints and actions.
    pub hints: HintSummary,
    /// The router's own cost.
    pub router: RouterCost,
    /// Virtual time the replay covered, in seconds.
    pub virtual_s: f64,
    /// Hit rate of the first stage over time.
    pub hit_rate_over_time: Vec<HitRatePoint>,
    /// TTFT CDF: (milliseconds, fraction of served requests at or below).
    pub ttft_cdf: Vec<(f64, f64)>,
    /// Disagreements between the simulated workers and the router (all zero when sound).
    pub invariants: Invariants,
    /// What the configuration's shadow policies would have done (absent without a `shadow`
    /// entry); see [`shadow_table`](crate::shadow_table).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<dynamo_kv_router::metrics::ShadowReport>,
}

impl ConfigReport {
    /// Whether the simulation and the router agreed on every checked invariant.
    pub fn invariants_hold(&self) -> bool {
        self.invariants.hold()
    }

    /// Summarises one simulation.
    pub fn from_result(name: &str, router_mode: &str, result: &SimulationResult) -> Self {
        let (ttft_ms, ttft_cdf, served) = ttft(result);
        let (hints, router) = hints_and_router_cost(result);
        Self {
            name: name.to_owned(),
            router_mode: router_mode.to_owned(),
            without_kv_events: None,
            requests: result.requests.len(),
            served,
            book_failures: result.book_failures.clone(),
            stages: stage_summaries(result),
            ttft_ms,
            load: role_loads(result),
            hints,
            router,
            virtual_s: result.virtual_end_us as f64 / 1e6,
            hit_rate_over_time: hit_rate_over_time(result),
            ttft_cdf,
            invariants: result.invariants,
            shadows: Vec::new(),
        }
    }
}

/// How each stage's blocks were obtained, and how often the router's view of the booked
/// worker's cache was right.
fn stage_summaries(result: &SimulationResult) -> Vec<StageSummary> {
    let mut stages: Vec<StageSummary> = result
        .stages
        .iter()
        .map(|role| StageSummary {
            role: role.to_string(),
            ..StageSummary::default()
        })
        .collect();
    for outcome in &result.stage_outcomes {
        let Some(stage) = stages.get_mut(outcome.stage as usize) else {
            continue;
        };
        stage.served += 1;
        stage.blocks += u64::from(outcome.blocks);
        stage.local += u64::from(outcome.local);
        stage.fetched += u64::from(outcome.fetched);
        stage.recomputed += u64::from(outcome.recomputed);
        stage.fetch_wasted += u64::from(outcome.fetch_wasted);
        stage.hint_blocks_evicted += u64::from(outcome.hint_blocks_evicted);
        let error = i64::from(outcome.predicted_local) - i64::from(outcome.held_at_start);
        stage.router_view_exact += u64::from(error == 0);
        stage.router_view_mean_error_blocks += error.unsigned_abs() as f64;
        stage.router_view_mean_bias_blocks += error as f64;
    }
    for stage in &mut stages {
        let blocks = stage.blocks.max(1) as f64;
        stage.local_rate = stage.local as f64 / blocks;
        stage.fetched_rate = stage.fetched as f64 / blocks;
        stage.recomputed_rate = stage.recomputed as f64 / blocks;
        let served = stage.served.max(1) as f64;
        stage.router_view_exact_rate = stage.router_view_exact as f64 / served;
        stage.router_view_mean_error_blocks /= served;
        stage.router_view_mean_bias_blocks /= served;
    }
    stages
}

/// TTFT percentiles in milliseconds, the CDF (at most [`CDF_POINTS`] points, ending at 1.0)
/// and the number of requests served.
fn ttft(result: &SimulationResult) -> (Percentiles, Vec<(f64, f64)>, usize) {
    let mut ttft: Vec<f64> = result
        .requests
        .iter()
        .filter_map(|r| r.ttft_us.map(|us| us as f64 / 1000.0))
        .collect();
    let ttft_ms = Percentiles::of(&mut ttft);
    let step = ttft.len().div_ceil(CDF_POINTS).max(1);
    let mut ttft_cdf: Vec<(f64, f64)> = ttft
        .iter()
        .enumerate()
        .skip(step - 1)
        .step_by(step)
        .map(|(i, ms)| (*ms, (i + 1) as f64 / ttft.len() as f64))
        .collect();
    if let Some(last) = ttft.last()
        && ttft_cdf.last().is_none_or(|(_, f)| *f < 1.0)
    {
        ttft_cdf.push((*last, 1.0));
    }
    (ttft_ms, ttft_cdf, ttft.len())
}

/// Busy time per worker of each role, and how far the busiest is from the mean.
fn role_loads(result: &SimulationResult) -> Vec<RoleLoad> {
    result
        .stages
        .iter()
        .map(|role| {
            let busy_s: Vec<f64> = result
                .workers
                .iter()
                .filter(|w| w.role == *role)
                .map(|w| w.busy_us as f64 / 1e6)
                .collect();
            let mean = busy_s.iter().sum::<f64>() / busy_s.len().max(1) as f64;
            let max = busy_s.iter().copied().fold(0.0, f64::max);
            RoleLoad {
                role: role.to_string(),
                busy_s,
                max_over_mean: if mean > 0.0 { max / mean } else { 0.0 },
            }
        })
        .collect()
}

/// What the bookings carried, and what the router's calls cost on the wall clock.
fn hints_and_router_cost(result: &SimulationResult) -> (HintSummary, RouterCost) {
    let mut hints = HintSummary::default();
    let mut latencies: Vec<f64> = Vec::with_capacity(result.bookings.len());
    let mut book_ns = 0u64;
    for booking in &result.bookings {
        hints.hints_sent += u64::from(booking.hint);
        hints.actions += u64::from(booking.actions);
        hints.fetch_actions += u64::from(booking.fetch_actions);
        hints.other_actions += u64::from(booking.other_actions);
        hints.unusable_fetch_actions += u64::from(booking.unusable_fetch_actions);
        hints.actions_dropped += u64::from(booking.actions_dropped);
        hints.policy_failures += u64::from(booking.policy_failures);
        latencies.push(booking.latency_ns as f64 / 1000.0);
        book_ns += booking.latency_ns;
    }
    let book = Percentiles::of(&mut latencies);
    let bookings = result.bookings.len() as u64;
    let wall_s = result.wall.as_secs_f64();
    let per_second = |count: f64, seconds: f64| {
        if seconds > 0.0 { count / seconds } else { 0.0 }
    };
    let router = RouterCost {
        bookings,
        book_p50_us: book.p50,
        book_p99_us: book.p99,
        bookings_per_s_router: per_second(bookings as f64, book_ns as f64 / 1e9),
        bookings_per_s_end_to_end: per_second(bookings as f64, wall_s),
        events: result.events,
        event_apply_ms: result.event_ns as f64 / 1e6,
        book_ms: book_ns as f64 / 1e6,
        wall_ms: wall_s * 1000.0,
    };
    (hints, router)
}

/// A prediction configuration in the JSON report, by upstream's setting names.
fn approximate_json<S: Serializer>(
    config: &Option<ApproximateConfig>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Settings {
        router_ttl_secs: f64,
        router_max_tree_size: usize,
        router_prune_target_ratio: f64,
    }
    config
        .map(|c| Settings {
            router_ttl_secs: c.ttl.as_secs_f64(),
            router_max_tree_size: c.max_tree_size,
            router_prune_target_ratio: c.prune_target_ratio,
        })
        .serialize(serializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut values: Vec<f64> = (1..=100).map(f64::from).rev().collect();
        let p = Percentiles::of(&mut values);
        assert_eq!((p.p50, p.p90, p.p99), (50.0, 90.0, 99.0));
        assert_eq!(p.mean, 50.5);
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
    }
}
