//! The tables: one row per metric, one column per engine, and ours against upstream's best.

use crate::concurrent::ConcurrentReport;
use crate::measure::{EngineReport, IngestSample, Latency, median_ingest};
use std::time::Duration;

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Which way a metric is better.
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

struct Row {
    metric: &'static str,
    unit: &'static str,
    better: Better,
    values: Vec<Option<f64>>,
}

fn row(
    metric: &'static str,
    unit: &'static str,
    better: Better,
    reports: &[EngineReport],
    value: impl Fn(&EngineReport) -> Option<f64>,
) -> Row {
    Row {
        metric,
        unit,
        better,
        values: reports.iter().map(value).collect(),
    }
}

fn format_value(value: f64, unit: &str) -> String {
    match unit {
        "M/s" => format!("{:.2} M/s", value / 1e6),
        "µs" => format!("{value:.2} µs"),
        "B" => format!("{value:.1} B"),
        _ => format!("{value:.2}"),
    }
}

/// The markdown table of `reports` (ours first, then upstream's engines).
pub fn engines_table(title: &str, reports: &[EngineReport]) -> String {
    let latency = |l: fn(&EngineReport) -> Option<Latency>, p99: bool| {
        move |r: &EngineReport| l(r).map(|l| micros(if p99 { l.p99 } else { l.p50 }))
    };
    let rows = [
        row(
            "find, hashes given, p50",
            "µs",
            Better::Lower,
            reports,
            latency(|r| Some(r.find), false),
        ),
        row(
            "find, hashes given, p99",
            "µs",
            Better::Lower,
            reports,
            latency(|r| Some(r.find), true),
        ),
        row(
            "find from tokens (hashing included), p50",
            "µs",
            Better::Lower,
            reports,
            latency(|r| r.find_tokens, false),
        ),
        row(
            "find from tokens (hashing included), p99",
            "µs",
            Better::Lower,
            reports,
            latency(|r| r.find_tokens, true),
        ),
        row(
            "ingest, stored blocks/s, one thread",
            "M/s",
            Better::Higher,
            reports,
            |r| Some(r.ingest_blocks_per_sec),
        ),
        row("ingest, events/s", "M/s", Better::Higher, reports, |r| {
            Some(r.ingest_events_per_sec)
        }),
        row(
            "live bytes per membership",
            "B",
            Better::Lower,
            reports,
            |r| Some(r.bytes_per_membership),
        ),
    ];
    let mut out = format!("### {title}\n\n| metric |");
    for report in reports {
        out.push_str(&format!(" {} |", report.engine));
    }
    out.push_str(" best upstream | ours / best upstream |\n|---|");
    for _ in 0..reports.len() + 2 {
        out.push_str("---|");
    }
    out.push('\n');
    for row in rows.iter().filter(|r| r.values.iter().all(Option::is_some)) {
        let values: Vec<f64> = row.values.iter().flatten().copied().collect();
        out.push_str(&format!("| {} |", row.metric));
        for value in &values {
            out.push_str(&format!(" {} |", format_value(*value, row.unit)));
        }
        let upstream = values[1..].iter().copied();
        let best = match row.better {
            Better::Lower => upstream.fold(f64::INFINITY, f64::min),
            Better::Higher => upstream.fold(0.0, f64::max),
        };
        let ratio = values[0] / best;
        let reading = match row.better {
            Better::Lower if ratio <= 1.0 => "(lower is better: ours wins)",
            Better::Lower => "(lower is better)",
            Better::Higher if ratio >= 1.0 => "(higher is better: ours wins)",
            Better::Higher => "(higher is better)",
        };
        out.push_str(&format!(
            " {} | **{ratio:.2}×** {reading} |\n",
            format_value(best, row.unit)
        ));
    }
    let checked: usize = reports.iter().map(|r| r.depths_checked).sum();
    let wrong: usize = reports.iter().map(|r| r.mismatches.len()).sum();
    out.push_str(&format!(
        "\nDepths cross-checked against the brute-force oracle: {checked}, mismatches: {wrong}.\n"
    ));
    out
}

/// The markdown table of the concurrent phase.
pub fn concurrent_table(ours: &ConcurrentReport, upstream: &ConcurrentReport) -> String {
    let mut out = String::from(
        "### Concurrent: one thread applying events, one booking (2 cores)\n\n| metric | ",
    );
    out.push_str(&format!(
        "{} | {} | ours / upstream |\n|---|---|---|---|\n",
        ours.side, upstream.side
    ));
    let rows = [
        (
            "events + bookings per second",
            ours.combined_per_sec,
            upstream.combined_per_sec,
            "M/s",
        ),
        (
            "events per second",
            ours.events_per_sec,
            upstream.events_per_sec,
            "M/s",
        ),
        (
            "stored blocks per second",
            ours.stored_blocks_per_sec,
            upstream.stored_blocks_per_sec,
            "M/s",
        ),
        (
            "bookings per second",
            ours.bookings_per_sec,
            upstream.bookings_per_sec,
            "M/s",
        ),
        (
            "booking p50, idle",
            micros(ours.idle.p50),
            micros(upstream.idle.p50),
            "µs",
        ),
        (
            "booking p99, idle",
            micros(ours.idle.p99),
            micros(upstream.idle.p99),
            "µs",
        ),
        (
            "booking p50, under ingest",
            micros(ours.loaded.p50),
            micros(upstream.loaded.p50),
            "µs",
        ),
        (
            "booking p99, under ingest",
            micros(ours.loaded.p99),
            micros(upstream.loaded.p99),
            "µs",
        ),
        (
            "booking mean, idle",
            micros(ours.idle.mean),
            micros(upstream.idle.mean),
            "µs",
        ),
        (
            "booking mean, under ingest",
            micros(ours.loaded.mean),
            micros(upstream.loaded.mean),
            "µs",
        ),
    ];
    for (metric, a, b, unit) in rows {
        out.push_str(&format!(
            "| {metric} | {} | {} | **{:.2}×** |\n",
            format_value(a, unit),
            format_value(b, unit),
            a / b
        ));
    }
    out.push_str(&format!(
        "\nBooking p99 under ingest / idle p99: ours {:.2}×, upstream {:.2}×. Ours books with \
         `Router::book` (hashing, index pass, kvcr, kv_fetch, load ledger); upstream's booking is \
         `find_matches_for_request` (hashing and find only).\n",
        ours.loaded.p99.as_secs_f64() / ours.idle.p99.as_secs_f64(),
        upstream.loaded.p99.as_secs_f64() / upstream.idle.p99.as_secs_f64(),
    ));
    out
}

/// Our ingest into an index whose tables were sized up front for the blocks it ends with
/// (`IndexOptions::capacity`): the same events and turns as the table's ingest figures, so the
/// two rates together show what growing the tables costs.
pub struct SizedIngest {
    /// Distinct blocks the index was sized for (those it holds after the last event).
    pub blocks: usize,
    /// Median stored blocks per second.
    pub blocks_per_sec: f64,
}

impl SizedIngest {
    /// The median of `samples`, ingests into indexes sized for `blocks`.
    pub fn of(blocks: usize, samples: &[IngestSample]) -> Self {
        Self {
            blocks,
            blocks_per_sec: median_ingest(samples).map_or(0.0, |median| median.blocks_per_sec),
        }
    }

    /// The report's line: the sized rate against ours growing and upstream's best.
    pub fn line(&self, reports: &[EngineReport]) -> String {
        let growing = reports.first().map_or(0.0, |r| r.ingest_blocks_per_sec);
        let best = reports
            .iter()
            .skip(1)
            .map(|r| r.ingest_blocks_per_sec)
            .fold(0.0, f64::max);
        format!(
            "Ours with its tables sized up front for the {} distinct blocks it ends with \
             (`IndexOptions::capacity`; upstream's indexers have no such option, so this is not \
             a comparison): ingest {:.2} M stored blocks/s, {:.2}× ours growing as it fills, \
             {:.2}× best upstream.\n",
            self.blocks,
            self.blocks_per_sec / 1e6,
            self.blocks_per_sec / growing,
            self.blocks_per_sec / best
        )
    }
}

/// The ingests of ours, upstream's `RadixTree` and CRTC once more, with the events naming
/// blocks by ids of the engines' own ([`BlockIds::Own`](crate::workload::BlockIds::Own)), as
/// vLLM and SGLang report them, where the table's figures use sequence hashes. Our index files
/// a block it can find by sequence hash under no second key, so its figures differ; upstream's
/// `PositionalIndexer` cannot take such ids and is left out.
pub struct OwnIdsIngest {
    /// Median ingests: ours, `RadixTree`, CRTC (default when there were none).
    medians: [IngestSample; 3],
}

impl OwnIdsIngest {
    /// The medians of `samples`: ours, `RadixTree`, CRTC.
    pub fn of(samples: &[Vec<IngestSample>; 3]) -> Self {
        Self {
            medians: std::array::from_fn(|i| median_ingest(&samples[i]).unwrap_or_default()),
        }
    }

    /// The median ingests: ours, `RadixTree`, CRTC.
    pub fn medians(&self) -> &[IngestSample; 3] {
        &self.medians
    }

    /// The report's line.
    pub fn line(&self) -> String {
        let [ours, radix, crtc] = &self.medians;
        let best_rate = radix.blocks_per_sec.max(crtc.blocks_per_sec);
        let best_bytes = radix.bytes_per_membership.min(crtc.bytes_per_membership);
        format!(
            "With blocks named by ids of the engines' own, not sequence hashes (vLLM and SGLang \
             hash blocks their own way; `PositionalIndexer` cannot take such ids): ingest, \
             stored blocks/s: ours {:.2} M, RadixTree {:.2} M, CRTC {:.2} M, ours **{:.2}×** best \
             upstream; live bytes per membership: ours {:.1} B, best upstream {:.1} B \
             ({:.2}×).\n",
            ours.blocks_per_sec / 1e6,
            radix.blocks_per_sec / 1e6,
            crtc.blocks_per_sec / 1e6,
            ours.blocks_per_sec / best_rate,
            ours.bytes_per_membership,
            best_bytes,
            ours.bytes_per_membership / best_bytes,
        )
    }
}
