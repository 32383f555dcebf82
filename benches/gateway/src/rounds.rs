//! Several rounds of the whole run, in turns, and what they agree on. On a shared 2-core
//! machine the same gateway's added latency moves by a factor of two between runs a minute
//! apart, so one round's ratio says little; the median over rounds run in turns says more.
//!
//! Enters: per round, each gateway's figures (a label and a value per figure). Leaves: a table
//! of each figure's median over the rounds and its range, per gateway, and the medians as
//! JSON.

use crate::table::{fmt, layout};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One gateway's figures in one round: `(label, value)` in display order.
pub struct RoundFigures {
    /// The gateway.
    pub name: String,
    /// Its figures; a figure the round did not measure is left out.
    pub figures: Vec<(String, f64)>,
}

/// Median and range of each figure over the rounds, per gateway (in the order of `names`).
pub fn summary(names: &[String], rounds: &[Vec<RoundFigures>]) -> (String, Value) {
    let mut labels: Vec<String> = Vec::new();
    let mut values: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for round in rounds {
        for gateway in round {
            for (label, value) in &gateway.figures {
                if !labels.contains(label) {
                    labels.push(label.clone());
                }
                if value.is_finite() {
                    values
                        .entry((gateway.name.clone(), label.clone()))
                        .or_default()
                        .push(*value);
                }
            }
        }
    }
    let mut json_out = serde_json::Map::new();
    let rows: Vec<(String, Vec<String>)> = labels
        .iter()
        .map(|label| {
            let cells = names
                .iter()
                .map(|name| {
                    let Some(mut seen) = values.get(&(name.clone(), label.clone())).cloned() else {
                        return "-".to_owned();
                    };
                    seen.sort_by(f64::total_cmp);
                    let middle = median(&seen);
                    json_out
                        .entry(name.clone())
                        .or_insert_with(|| json!({}))
                        .as_object_mut()
                        .map(|figures| figures.insert(label.clone(), json!(middle)));
                    format!(
                        "{} ({}–{})",
                        fmt(middle, 0),
                        fmt(seen[0], 0),
                        fmt(seen[seen.len() - 1], 0)
                    )
                })
                .collect();
            (format!("{label}, median (range)"), cells)
        })
        .collect();
    let columns: Vec<&str> = names.iter().map(String::as_str).collect();
    (layout(&columns, &rows), Value::Object(json_out))
}

/// The median of `sorted` (the mean of the middle two for an even count).
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n % 2 {
        1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(name: &str, added: f64) -> RoundFigures {
        RoundFigures {
            name: name.into(),
            figures: vec![("added p50".into(), added)],
        }
    }

    #[test]
    fn medians_and_ranges_per_gateway() {
        let rounds = vec![
            vec![figures("a", 300.0), figures("b", 10.0)],
            vec![figures("a", 100.0), figures("b", f64::NAN)],
            vec![figures("a", 200.0), figures("b", 30.0)],
        ];
        let (table, json) = summary(&["a".into(), "b".into()], &rounds);
        assert!(table.contains("200 (100–300)"), "{table}");
        assert!(table.contains("20 (10–30)"), "{table}");
        assert_eq!(json["a"]["added p50"], 200.0);
        assert_eq!(json["b"]["added p50"], 20.0);
    }
}
