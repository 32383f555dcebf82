//! A comparison of configurations on one workload and cluster: as a terminal table and as JSON.

use crate::cluster::ResolvedCluster;
use crate::hit_rate::IdealHitRate;
use crate::summary::ConfigReport;
use crate::trace::BadLine;
use serde::Serialize;
use std::fmt::Write as _;

/// The workload a comparison replayed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WorkloadInfo {
    /// Its name.
    pub name: String,
    /// Requests.
    pub requests: usize,
    /// Full blocks over all requests.
    pub blocks: usize,
    /// Tokens per block.
    pub block_size: u32,
    /// Time from the first to the last arrival, in seconds.
    pub span_s: f64,
    /// Trace lines skipped.
    pub bad_lines: Vec<BadLine>,
    /// The most any routing could reuse: every block cached forever on one worker.
    pub ideal_hit_rate: IdealHitRate,
}

/// Several configurations replayed on the same workload and cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The workload.
    pub workload: WorkloadInfo,
    /// The cluster, with defaults resolved.
    pub cluster: ResolvedCluster,
    /// One report per configuration, in the order given.
    pub configs: Vec<ConfigReport>,
}

impl Comparison {
    /// Whether the simulation and the router agreed on every checked invariant, in every
    /// configuration.
    pub fn invariants_hold(&self) -> bool {
        self.configs.iter().all(ConfigReport::invariants_hold)
    }

    /// Each violated invariant, prefixed with its configuration's name.
    pub fn invariant_violations(&self) -> Vec<String> {
        self.configs
            .iter()
            .flat_map(|c| {
                c.invariants
                    .violations()
                    .into_iter()
                    .map(move |v| format!("{}: {v}", c.name))
            })
            .collect()
    }

    /// Pretty JSON of the whole comparison.
    pub fn to_json(&self) -> String {
        // Only strings, numbers and maps: serialisation cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// The rows of the side-by-side table: a label and one cell per configuration.
    pub fn rows(&self) -> Vec<(String, Vec<String>)> {
        let mut rows = Rows {
            configs: &self.configs,
            rows: Vec::new(),
        };
        rows.row("router mode", &|c| c.router_mode.clone());
        if self.configs.iter().any(|c| c.without_kv_events.is_some()) {
            rows.row("kv events", &|c| match &c.without_kv_events {
                None => "on".to_owned(),
                Some(config) => format!("off (ttl {} s)", config.ttl.as_secs_f64()),
            });
        }
        rows.row("requests served", &|c| {
            format!("{}/{}", c.served, c.requests)
        });
        let stages = self
            .configs
            .iter()
            .map(|c| c.stages.len())
            .max()
            .unwrap_or(0);
        for index in 0..stages {
            rows.stage(index, stages);
        }
        rows.outcomes();
        rows.router_cost();
        rows.rows
    }

    /// The side-by-side table for a terminal.
    pub fn table(&self) -> String {
        let rows = self.rows();
        let headers: Vec<String> = self.configs.iter().map(|c| c.name.clone()).collect();
        let label_width = rows
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        let widths: Vec<usize> = (0..headers.len())
            .map(|i| {
                rows.iter()
                    .map(|(_, cells)| cells[i].chars().count())
                    .chain([headers[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let w = &self.workload;
        let _ = writeln!(
            out,
            "workload: {} — {} requests, {} blocks of {} tokens, {:.0} s",
            w.name, w.requests, w.blocks, w.block_size, w.span_s
        );
        let c = &self.cluster;
        let _ = writeln!(
            out,
            "cluster: {} workers per role, {} KV blocks each, prefill {} tok/s, decode {} tok/s, fetch {} blocks/s + {} ms",
            c.workers_per_role,
            c.kv_capacity_blocks,
            c.prefill_tokens_per_s,
            c.decode_tokens_per_s,
            c.fetch_blocks_per_s,
            c.fetch_latency_us / 1000.0
        );
        if !w.bad_lines.is_empty() {
            let _ = writeln!(out, "skipped {} bad trace lines", w.bad_lines.len());
        }
        let _ = write!(out, "\n{:label_width$}", "");
        for (header, width) in headers.iter().zip(&widths) {
            let _ = write!(out, "  {header:>width$}");
        }
        out.push('\n');
        let total = label_width + widths.iter().map(|w| w + 2).sum::<usize>();
        out.push_str(&"─".repeat(total));
        out.push('\n');
        for (label, cells) in &rows {
            let _ = write!(out, "{label:label_width$}");
            for (cell, width) in cells.iter().zip(&widths) {
                let _ = write!(out, "  {cell:>width$}");
            }
            out.push('\n');
        }
        out
    }
}

/// The table's rows as they are built: one cell per configuration in each.
struct Rows<'a> {
    configs: &'a [ConfigReport],
    rows: Vec<(String, Vec<String>)>,
}

impl Rows<'_> {
    fn row(&mut self, label: &str, cell: &dyn Fn(&ConfigReport) -> String) {
        self.rows
            .push((label.to_owned(), self.configs.iter().map(cell).collect()));
    }

    /// How stage `index` (of `stages`) obtained its blocks.
    fn stage(&mut self, index: usize, stages: usize) {
        let stage = |c: &ConfigReport| c.stages.get(index).cloned().unwrap_or_default();
        let prefix = if stages > 1 {
            format!("[stage {}] ", index + 1)
        } else {
            String::new()
        };
        if stages > 1 {
            self.row(&format!("{prefix}role"), &|c| stage(c).role);
        }
        self.row(&format!("{prefix}hit rate local"), &|c| {
            percent(stage(c).local_rate)
        });
        self.row(&format!("{prefix}hit rate fetched"), &|c| {
            percent(stage(c).fetched_rate)
        });
        let recomputed = if index > 0 {
            "transferred"
        } else {
            "recomputed"
        };
        self.row(&format!("{prefix}{recomputed}"), &|c| {
            percent(stage(c).recomputed_rate)
        });
        self.row(&format!("{prefix}blocks fetched / wasted"), &|c| {
            let s = stage(c);
            format!("{} / {}", s.fetched, s.fetch_wasted)
        });
        self.row(&format!("{prefix}hint blocks already evicted"), &|c| {
            stage(c).hint_blocks_evicted.to_string()
        });
        self.row(&format!("{prefix}router view right / mean error"), &|c| {
            let s = stage(c);
            if s.served == 0 {
                return "-".to_owned();
            }
            format!(
                "{:.2}% / {:.2} blk",
                s.router_view_exact_rate * 100.0,
                s.router_view_mean_error_blocks
            )
        });
    }

    /// What users of the cluster saw: TTFT, balance, hints and failures.
    fn outcomes(&mut self) {
        self.row("TTFT p50 / p90 / p99 (ms)", &|c| {
            format!(
                "{:.0} / {:.0} / {:.0}",
                c.ttft_ms.p50, c.ttft_ms.p90, c.ttft_ms.p99
            )
        });
        self.row("load max/mean (busy time)", &|c| {
            c.load
                .iter()
                .map(|l| format!("{:.2}", l.max_over_mean))
                .collect::<Vec<_>>()
                .join(" / ")
        });
        self.row("hints / actions sent", &|c| {
            format!("{} / {}", c.hints.hints_sent, c.hints.actions)
        });
        self.row("kv.fetch run / other ignored", &|c| {
            format!("{} / {}", c.hints.fetch_actions, c.hints.other_actions)
        });
        self.row("policy failures", &|c| c.hints.policy_failures.to_string());
        self.row("booking failures", &|c| {
            c.book_failures.values().sum::<usize>().to_string()
        });
    }

    /// What the router itself cost on the wall clock.
    fn router_cost(&mut self) {
        self.row("book() p50 / p99 (µs)", &|c| {
            format!("{:.1} / {:.1}", c.router.book_p50_us, c.router.book_p99_us)
        });
        self.row("bookings/s in book()", &|c| {
            thousands(c.router.bookings_per_s_router)
        });
        self.row("bookings/s end to end", &|c| {
            thousands(c.router.bookings_per_s_end_to_end)
        });
        self.row("wall ms: total / book() / events", &|c| {
            format!(
                "{:.0} / {:.0} / {:.0}",
                c.router.wall_ms, c.router.book_ms, c.router.event_apply_ms
            )
        });
    }
}

/// `0.4567` → `45.7%`.
pub fn percent(value: f64) -> String {
    format!("{:.1}%", value * 100.0)
}

/// `123456.7` → `123,457`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(percent(0.4567), "45.7%");
    }
}
