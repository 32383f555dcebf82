//! The verdict over several full runs: each target of the index work, the median of its ratio
//! over the runs and the range, and whether it holds (in the median, or in every run where the
//! target says so). One command, one verdict, instead of single runs that meet a target by luck.

use crate::concurrent::ConcurrentReport;
use crate::measure::{EngineReport, IngestSample};
use std::collections::BTreeMap;

/// How a target reads its ratios.
#[derive(Clone, Copy)]
#[expect(
    clippy::enum_variant_names,
    reason = "every target reads the median; each name says how"
)]
enum Holds {
    /// The median is at least the bound.
    MedianAtLeast(f64),
    /// The median is at most the bound.
    MedianAtMost(f64),
    /// The median is at most the first bound and every run at most the second.
    MedianAndEveryRunAtMost(f64, f64),
}

/// One target: the figure it reads (a key of [`RunFigures`]) and its bound.
struct Target {
    key: &'static str,
    holds: Holds,
}

/// The targets, in the order the verdict lists them.
const TARGETS: &[Target] = &[
    Target {
        key: "synthetic: ingest, own ids / best upstream",
        holds: Holds::MedianAtLeast(1.3),
    },
    Target {
        key: "Mooncake: ingest, own ids / best upstream",
        holds: Holds::MedianAtLeast(1.3),
    },
    Target {
        key: "synthetic: ingest, sequence-hash ids / best upstream",
        holds: Holds::MedianAtLeast(1.3),
    },
    Target {
        key: "Mooncake: ingest, sequence-hash ids / best upstream",
        holds: Holds::MedianAtLeast(1.3),
    },
    Target {
        key: "synthetic: find p50, hashes given / CRTC",
        holds: Holds::MedianAtMost(0.9),
    },
    Target {
        key: "synthetic: find p99, hashes given / CRTC",
        holds: Holds::MedianAndEveryRunAtMost(0.9, 1.0),
    },
    Target {
        key: "synthetic: find p50, from tokens / CRTC",
        holds: Holds::MedianAtMost(0.9),
    },
    Target {
        key: "synthetic: find p99, from tokens / CRTC",
        holds: Holds::MedianAndEveryRunAtMost(0.9, 1.0),
    },
    Target {
        key: "Mooncake: find p50, hashes given / CRTC",
        holds: Holds::MedianAtMost(0.9),
    },
    Target {
        key: "Mooncake: find p99, hashes given / CRTC",
        holds: Holds::MedianAndEveryRunAtMost(0.9, 1.0),
    },
    Target {
        key: "Mooncake: find p50, from tokens / CRTC",
        holds: Holds::MedianAtMost(0.9),
    },
    Target {
        key: "Mooncake: find p99, from tokens / CRTC",
        holds: Holds::MedianAndEveryRunAtMost(0.9, 1.0),
    },
    Target {
        key: "events + bookings at once / upstream",
        holds: Holds::MedianAtLeast(1.2),
    },
    Target {
        key: "booking p99 under ingest / idle (ours)",
        holds: Holds::MedianAtMost(1.5),
    },
    Target {
        key: "Router::book p50 / find from tokens p50, in turns",
        holds: Holds::MedianAtMost(1.3),
    },
    Target {
        key: "synthetic: bytes per membership, own ids / best upstream",
        holds: Holds::MedianAtMost(0.4),
    },
    Target {
        key: "Mooncake: bytes per membership, own ids / best upstream",
        holds: Holds::MedianAtMost(0.4),
    },
];

/// Ratios the verdict reports with no bound: where a target's time goes.
const DIAGNOSTICS: &[&str] = &[
    "booking floor p50 / find from tokens p50, in turns",
    "Router::book p50 / booking floor p50, in turns",
];

/// One full run's ratios, by target key, and its depth mismatches.
#[derive(Default)]
pub struct RunFigures {
    ratios: BTreeMap<&'static str, f64>,
    /// Overlap depths that disagreed with the oracle in this run.
    pub mismatches: usize,
}

impl RunFigures {
    /// Records the engines table of `workload` (`synthetic` or `Mooncake`): ours first, CRTC
    /// last; and the ingests with the engines' own ids (ours, `RadixTree`, CRTC).
    pub fn engines(
        &mut self,
        workload: &'static str,
        reports: &[EngineReport],
        own: &[IngestSample; 3],
    ) {
        let (ours, upstream) = (&reports[0], &reports[1..]);
        let best_ingest = upstream
            .iter()
            .map(|report| report.ingest_blocks_per_sec)
            .fold(0.0, f64::max);
        self.set(
            workload,
            "ingest, sequence-hash ids / best upstream",
            ours.ingest_blocks_per_sec / best_ingest,
        );
        let [own_ours, own_radix, own_crtc] = own;
        self.set(
            workload,
            "ingest, own ids / best upstream",
            own_ours.blocks_per_sec / own_radix.blocks_per_sec.max(own_crtc.blocks_per_sec),
        );
        self.set(
            workload,
            "bytes per membership, own ids / best upstream",
            own_ours.bytes_per_membership
                / own_radix
                    .bytes_per_membership
                    .min(own_crtc.bytes_per_membership),
        );
        if let Some(crtc) = upstream
            .iter()
            .find(|report| report.engine.contains("CRTC"))
        {
            let ratio =
                |a: std::time::Duration, b: std::time::Duration| a.as_secs_f64() / b.as_secs_f64();
            self.set(
                workload,
                "find p50, hashes given / CRTC",
                ratio(ours.find.p50, crtc.find.p50),
            );
            self.set(
                workload,
                "find p99, hashes given / CRTC",
                ratio(ours.find.p99, crtc.find.p99),
            );
            if let (Some(a), Some(b)) = (ours.find_tokens, crtc.find_tokens) {
                self.set(
                    workload,
                    "find p50, from tokens / CRTC",
                    ratio(a.p50, b.p50),
                );
                self.set(
                    workload,
                    "find p99, from tokens / CRTC",
                    ratio(a.p99, b.p99),
                );
            }
        }
    }

    /// Records the concurrent phase.
    pub fn concurrent(&mut self, ours: &ConcurrentReport, upstream: &ConcurrentReport) {
        self.ratios.insert(
            "events + bookings at once / upstream",
            ours.combined_per_sec / upstream.combined_per_sec,
        );
        self.ratios.insert(
            "booking p99 under ingest / idle (ours)",
            ours.loaded.p99.as_secs_f64() / ours.idle.p99.as_secs_f64(),
        );
        if let Some(finds) = ours.idle_find_tokens {
            self.ratios.insert(
                "Router::book p50 / find from tokens p50, in turns",
                ours.idle.p50.as_secs_f64() / finds.p50.as_secs_f64(),
            );
        }
        if let (Some(floor), Some(finds)) = (ours.idle_floor, ours.idle_find_tokens) {
            self.ratios.insert(
                DIAGNOSTICS[0],
                floor.p50.as_secs_f64() / finds.p50.as_secs_f64(),
            );
            self.ratios.insert(
                DIAGNOSTICS[1],
                ours.idle.p50.as_secs_f64() / floor.p50.as_secs_f64(),
            );
        }
    }

    fn set(&mut self, workload: &'static str, what: &'static str, ratio: f64) {
        if let Some(target) = TARGETS.iter().find(|target| {
            target
                .key
                .strip_prefix(workload)
                .and_then(|rest| rest.strip_prefix(": "))
                == Some(what)
        }) {
            self.ratios.insert(target.key, ratio);
        }
    }
}

/// The verdict table over `runs`, and whether every target held with no mismatch.
pub fn verdict(runs: &[RunFigures]) -> (String, bool) {
    let mut out = format!(
        "### Verdict over {} full runs\n\n| target | bound | median | range | runs within bound | holds |\n|---|---|---|---|---|---|\n",
        runs.len()
    );
    let mut all = true;
    for target in TARGETS {
        let values = sorted_ratios(runs, target.key);
        if values.is_empty() {
            out.push_str(&format!("| {} | | not measured | | | |\n", target.key));
            continue;
        }
        let median = values[values.len() / 2];
        let (bound, within, holds) = match target.holds {
            Holds::MedianAtLeast(bound) => (
                format!("≥ {bound}× (median)"),
                values.iter().filter(|v| **v >= bound).count(),
                median >= bound,
            ),
            Holds::MedianAtMost(bound) => (
                format!("≤ {bound}× (median)"),
                values.iter().filter(|v| **v <= bound).count(),
                median <= bound,
            ),
            Holds::MedianAndEveryRunAtMost(bound, every) => (
                format!("≤ {bound}× (median), ≤ {every}× (every run)"),
                values.iter().filter(|v| **v <= every).count(),
                median <= bound && values.iter().all(|v| *v <= every),
            ),
        };
        all &= holds;
        out.push_str(&format!(
            "| {} | {bound} | {median:.2}× | {:.2}–{:.2}× | {within} of {} | {} |\n",
            target.key,
            values[0],
            values[values.len() - 1],
            values.len(),
            if holds { "**yes**" } else { "no" }
        ));
    }
    out.push_str(&diagnostics(runs));
    let mismatches: usize = runs.iter().map(|run| run.mismatches).sum();
    all &= mismatches == 0;
    out.push_str(&format!(
        "\nDepth mismatches against the oracle over all runs: {mismatches}.\n"
    ));
    (out, all)
}

/// The finite values of the ratio `key` over `runs`, in ascending order.
fn sorted_ratios(runs: &[RunFigures], key: &str) -> Vec<f64> {
    let mut values: Vec<f64> = runs
        .iter()
        .filter_map(|run| run.ratios.get(key).copied())
        .filter(|value| value.is_finite())
        .collect();
    values.sort_by(f64::total_cmp);
    values
}

/// The [`DIAGNOSTICS`] over `runs`, median and range, as rows of a table of their own (empty
/// when none was measured).
fn diagnostics(runs: &[RunFigures]) -> String {
    let mut rows = String::new();
    for key in DIAGNOSTICS {
        let values = sorted_ratios(runs, key);
        if values.is_empty() {
            continue;
        }
        rows.push_str(&format!(
            "| {key} | {:.2}× | {:.2}–{:.2}× |\n",
            values[values.len() / 2],
            values[0],
            values[values.len() - 1]
        ));
    }
    if rows.is_empty() {
        return rows;
    }
    format!(
        "\nWhere the booking's time goes (no target):\n\n| ratio | median | range |\n|---|---|---|\n{rows}"
    )
}
