//! The replay's shadow table: per configuration, what each of its shadow policies would have
//! done on the replayed bookings beside the live policies, in the figures `GET /shadow` gives
//! on a running router. Replaying the shadow's own configuration as one more configuration
//! gives its full effect (the cluster reacting to its choices) to compare with.

use crate::summary::ConfigReport;
use dynamo_kv_router::metrics::ShadowReport;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Reports of several routers (replicas) over one workload, summed per role and shadow; the
/// imbalances are averaged over all their decisions.
pub fn merge_shadow_reports(reports: impl IntoIterator<Item = ShadowReport>) -> Vec<ShadowReport> {
    let mut merged: BTreeMap<(String, String), ShadowReport> = BTreeMap::new();
    for report in reports {
        let key = (report.role.clone(), report.name.clone());
        let Some(sum) = merged.get_mut(&key) else {
            merged.insert(key, report);
            continue;
        };
        let weighted = |a: f64, a_n: u64, b: f64, b_n: u64| {
            let n = (a_n + b_n).max(1) as f64;
            (a * a_n as f64 + b * b_n as f64) / n
        };
        sum.live_imbalance = weighted(
            sum.live_imbalance,
            sum.decisions,
            report.live_imbalance,
            report.decisions,
        );
        sum.shadow_imbalance = weighted(
            sum.shadow_imbalance,
            sum.decisions,
            report.shadow_imbalance,
            report.decisions,
        );
        sum.decisions += report.decisions;
        sum.agreed += report.agreed;
        sum.prompt_blocks += report.prompt_blocks;
        sum.live_cached_blocks += report.live_cached_blocks;
        sum.shadow_cached_blocks += report.shadow_cached_blocks;
        sum.live_hints += report.live_hints;
        sum.shadow_hints += report.shadow_hints;
        sum.live_hint_actions += report.live_hint_actions;
        sum.shadow_hint_actions += report.shadow_hint_actions;
        sum.live_fetch_blocks += report.live_fetch_blocks;
        sum.shadow_fetch_blocks += report.shadow_fetch_blocks;
        sum.failures += report.failures;
    }
    merged.into_values().collect()
}

const HEADERS: [&str; 12] = [
    "config",
    "role",
    "shadow",
    "decisions",
    "agree",
    "hit live",
    "hit shadow",
    "imbalance live",
    "imbalance shadow",
    "hints live/shadow",
    "fetch blocks live/shadow",
    "failures",
];

/// The table of every configuration's shadows, or `None` when no configuration has one.
pub fn shadow_table(configs: &[ConfigReport]) -> Option<String> {
    let rows: Vec<[String; 12]> = configs
        .iter()
        .flat_map(|config| {
            config
                .shadows
                .iter()
                .map(move |shadow| row(&config.name, shadow))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let widths: Vec<usize> = (0..HEADERS.len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .chain([HEADERS[column].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::from(
        "shadows: what each would have done on the same bookings, beside the live policies\n",
    );
    let line = |out: &mut String, cells: &[&str]| {
        for (column, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if column < 3 {
                let _ = write!(out, "{cell:<width$}  ");
            } else {
                let _ = write!(out, "{cell:>width$}  ");
            }
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(&mut out, &HEADERS);
    let total = widths.iter().map(|width| width + 2).sum::<usize>() - 2;
    out.push_str(&"─".repeat(total));
    out.push('\n');
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    Some(out)
}

fn row(config: &str, shadow: &ShadowReport) -> [String; 12] {
    [
        config.to_owned(),
        shadow.role.clone(),
        format!("{} ({})", shadow.name, shadow.selection_type),
        shadow.decisions.to_string(),
        percent(shadow.agreement()),
        percent(shadow.live_hit_rate()),
        percent(shadow.shadow_hit_rate()),
        format!("{:.2}", shadow.live_imbalance),
        format!("{:.2}", shadow.shadow_imbalance),
        format!("{} / {}", shadow.live_hints, shadow.shadow_hints),
        format!(
            "{} / {}",
            shadow.live_fetch_blocks, shadow.shadow_fetch_blocks
        ),
        shadow.failures.to_string(),
    ]
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, decisions: u64, agreed: u64, imbalance: f64) -> ShadowReport {
        ShadowReport {
            role: "decode".to_owned(),
            name: name.to_owned(),
            selection_type: "kvcr".to_owned(),
            decisions,
            agreed,
            shadow_imbalance: imbalance,
            ..ShadowReport::default()
        }
    }

    #[test]
    fn replicas_reports_sum_per_shadow_and_average_the_imbalance() {
        let merged = merge_shadow_reports([
            report("a", 1, 1, 1.0),
            report("b", 5, 0, 2.0),
            report("a", 3, 0, 2.0),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[0].decisions, merged[0].agreed), (4, 1));
        assert!((merged[0].shadow_imbalance - 1.75).abs() < 1e-9);
        assert_eq!(merged[1].decisions, 5);
    }
}
