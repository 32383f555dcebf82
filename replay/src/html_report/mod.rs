//! The comparison as one self-contained HTML page with inline SVG plots: hit rate over time
//! against the workload's ideal, the TTFT CDF on a logarithmic time axis, and per-worker busy
//! time as bars. Each plot's legend sits beside it, never over the data.

mod charts;

use crate::report::{Comparison, percent};
use charts::{Axes, Owner, Series, Style};
use std::fmt::Write as _;

/// Text made safe for HTML (and for SVG text).
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page's style sheet.
const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse}\
td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child{text-align:left}\
figure{margin:1.5em 0}";

/// The label of the ideal hit-rate line.
const IDEAL_LABEL: &str = "ideal (infinite cache, one worker)";

impl Comparison {
    /// The comparison as a single self-contained HTML page.
    pub fn to_html(&self) -> String {
        let mut page = String::new();
        self.write_head(&mut page);
        self.write_table(&mut page);
        for (caption, svg) in self.figures() {
            let _ = writeln!(
                page,
                "<figure>{svg}<figcaption>{}</figcaption></figure>",
                escape(&caption)
            );
        }
        page.push_str("</body></html>\n");
        page
    }

    /// The document head, the title and the workload and cluster lines.
    fn write_head(&self, page: &mut String) {
        let w = &self.workload;
        let _ = write!(
            page,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kv-router replay</title>\
             <style>{STYLE}</style></head><body>\n<h1>kv-router replay</h1>\n\
             <p>Workload: {} — {} requests, {} blocks of {} tokens, {:.0} s of arrivals. \
             Ideal hit rate (every block cached forever on one worker): {}.</p>\n",
            escape(&w.name),
            w.requests,
            w.blocks,
            w.block_size,
            w.span_s,
            percent(w.ideal_hit_rate.overall)
        );
        let c = &self.cluster;
        let _ = writeln!(
            page,
            "<p>Cluster: {} workers per role, {} KV blocks each, prefill {} tokens/s, decode {} tokens/s per request, fetch {} blocks/s + {} ms.</p>",
            c.workers_per_role,
            c.kv_capacity_blocks,
            c.prefill_tokens_per_s,
            c.decode_tokens_per_s,
            c.fetch_blocks_per_s,
            c.fetch_latency_us / 1000.0
        );
    }

    /// The side-by-side table.
    fn write_table(&self, page: &mut String) {
        page.push_str("<table><thead><tr><th></th>");
        for config in &self.configs {
            let _ = write!(page, "<th>{}</th>", escape(&config.name));
        }
        page.push_str("</tr></thead><tbody>\n");
        for (label, cells) in self.rows() {
            let _ = write!(page, "<tr><td>{}</td>", escape(&label));
            for cell in cells {
                let _ = write!(page, "<td>{}</td>", escape(&cell));
            }
            page.push_str("</tr>\n");
        }
        page.push_str("</tbody></table>\n");
    }

    /// Each figure's caption and SVG.
    fn figures(&self) -> [(String, String); 3] {
        let hit_rate = Axes {
            title: "Hit rate over time",
            x_label: "time (s)",
            y_label: "blocks reused (%)",
            y_max: Some(100.0),
        };
        let ttft = Axes {
            title: "TTFT CDF",
            x_label: "TTFT (ms, logarithmic)",
            y_label: "requests (%)",
            y_max: Some(100.0),
        };
        let load = Axes {
            title: "Per-worker busy time",
            x_label: "worker",
            y_label: "busy (s)",
            y_max: None,
        };
        [
            (
                "Prefix hit rate over time (block-weighted, first stage, by arrival); the dashed line is the most any routing could reuse".to_owned(),
                charts::chart(&hit_rate, Style::Lines, &self.hit_rate_series()),
            ),
            (
                "Estimated time to first token".to_owned(),
                charts::chart(&ttft, Style::LogLines, &self.ttft_series()),
            ),
            (
                "Busy time (prefill, fetch, transfer) of each worker".to_owned(),
                charts::chart(&load, Style::Bars, &self.busy_series()),
            ),
        ]
    }

    /// Each configuration's first-stage reuse over time, then the workload's ideal.
    fn hit_rate_series(&self) -> Vec<Series> {
        let configs = self.configs.iter().enumerate().map(|(config, c)| Series {
            owner: Owner::Config { config, stage: 0 },
            label: format!("{} (local + fetched)", c.name),
            points: c
                .hit_rate_over_time
                .iter()
                .map(|p| (p.t_s, p.reused * 100.0))
                .collect(),
        });
        let ideal = Series {
            owner: Owner::Reference,
            label: IDEAL_LABEL.to_owned(),
            points: self
                .workload
                .ideal_hit_rate
                .over_time
                .iter()
                .map(|p| (p.t_s, p.reused * 100.0))
                .collect(),
        };
        configs.chain([ideal]).collect()
    }

    /// Each configuration's TTFT CDF.
    fn ttft_series(&self) -> Vec<Series> {
        self.configs
            .iter()
            .enumerate()
            .map(|(config, c)| Series {
                owner: Owner::Config { config, stage: 0 },
                label: c.name.clone(),
                points: c.ttft_cdf.iter().map(|(ms, f)| (*ms, f * 100.0)).collect(),
            })
            .collect()
    }

    /// Each configuration's (and, with several roles, each stage's) busy time per worker.
    fn busy_series(&self) -> Vec<Series> {
        self.configs
            .iter()
            .enumerate()
            .flat_map(|(config, c)| {
                let several = c.load.len() > 1;
                c.load.iter().enumerate().map(move |(stage, l)| Series {
                    owner: Owner::Config { config, stage },
                    label: if several {
                        format!("{} ({})", c.name, l.role)
                    } else {
                        c.name.clone()
                    },
                    points: l
                        .busy_s
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (i as f64, *s))
                        .collect(),
                })
            })
            .collect()
    }
}
