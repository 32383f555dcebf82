//! The README's replay tables are what the current code prints, except the wall-clock rows:
//! the embedded, seeded default (`kv-router replay`) always, and the Mooncake trace comparison
//! when `KV_ROUTER_TRACE` names the trace (its `page.yaml` column is left out: that
//! configuration, the hint-plugin page's YAML, sets no `seed`, so its tie-breaks differ from run
//! to run). When the figures move on purpose, regenerate the README's blocks with
//!
//! ```text
//! UPDATE_README=1 cargo test --release -p kv-router --test readme_replay_table
//! ```
//!
//! (release, so the wall-clock rows it writes are a release build's; set `KV_ROUTER_TRACE` too,
//! or the trace table is left as it is).

use dynamo_kv_router::plugins::PolicyRegistry;
use harness_prefetch as _; // page.yaml lists harness_prefetch
use kv_router::{EXIT_OK, run_args};
use std::path::{Path, PathBuf};

/// Rows measured on the wall clock: they vary with the machine and are not compared.
const WALL_CLOCK_ROWS: [&str; 4] = [
    "book() p50 / p99 (µs)",
    "bookings/s in book()",
    "bookings/s end to end",
    "wall ms: total / book() / events",
];

/// One table of the README: the text just before its block, the command line that prints it
/// (after `kv-router`), and the columns left out of the comparison.
struct Table {
    introduction: &'static str,
    args: Vec<String>,
    unseeded_columns: &'static [&'static str],
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn default_table() -> Table {
    Table {
        introduction: "configurations: the page's `kvcr` (`shared_cache_multiplier: 0.5`) with `kv_fetch`, and\n`dynamo-default-cost-fn` with `hints: []`. It prints:\n\n```text\n",
        args: vec!["replay".into()],
        unseeded_columns: &[],
    }
}

fn trace_table(trace: &Path) -> Table {
    let config = |path: &str| root().join(path).display().to_string();
    Table {
        introduction: "    --config replay/configs/kvcr-kv-fetch.yaml --report replay.html\n```\n\n```text\n",
        args: vec![
            "replay".into(),
            "--trace".into(),
            trace.display().to_string(),
            "--workers".into(),
            "16".into(),
            "--config".into(),
            config("examples/router-build/page.yaml"),
            "--config".into(),
            config("replay/configs/default-cost-no-hints.yaml"),
            "--config".into(),
            config("replay/configs/kvcr-kv-fetch.yaml"),
        ],
        unseeded_columns: &["page.yaml"],
    }
}

/// The byte range of the table's text inside the README.
fn table_range(readme: &str, table: &Table) -> std::ops::Range<usize> {
    let start = readme
        .find(table.introduction)
        .map(|at| at + table.introduction.len())
        .unwrap_or_else(|| {
            panic!(
                "the README no longer introduces a replay table with {:?}",
                table.introduction
            )
        });
    let end = start
        + readme[start..]
            .find("```")
            .expect("the README's table block is closed");
    start..end
}

/// The table's lines as (label, one cell per configuration), wall-clock rows and the rule
/// under the header left out, and the cells of `unseeded` columns blanked. Cells are cut at the
/// column edges the header gives (cells are right-aligned under their configuration's name), so
/// an empty cell keeps its column.
fn comparable(table: &str, unseeded: &[&str]) -> Vec<(String, Vec<String>)> {
    let lines: Vec<Vec<char>> = table.lines().map(|l| l.chars().collect()).collect();
    let header_at = lines
        .iter()
        .position(|l| l.first() == Some(&' '))
        .expect("the table has a header line");
    let header: String = lines[header_at].iter().collect();
    let names: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let mut ends = Vec::new();
    let mut from = 0;
    for name in &names {
        let at = header[from..]
            .find(name)
            .expect("each name is in the header")
            + from;
        from = at + name.len();
        ends.push(header[..from].chars().count());
    }
    let mut rows = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let text: String = line.iter().collect();
        let wall_clock = WALL_CLOCK_ROWS.iter().any(|row| text.starts_with(row));
        if wall_clock || text.starts_with('─') || text.is_empty() {
            continue;
        }
        if index < header_at {
            rows.push((text, Vec::new()));
            continue;
        }
        let label = text.split("  ").next().unwrap_or("").trim().to_owned();
        let cut = |from: usize, to: usize| -> String {
            line.get(from.min(line.len())..to.min(line.len()))
                .map(|cell| cell.iter().collect::<String>().trim().to_owned())
                .unwrap_or_default()
        };
        // Cells start after the label (two or more spaces separate them); each ends at its
        // column's edge.
        let mut start = label.chars().count();
        let cells = names
            .iter()
            .zip(&ends)
            .map(|(name, end)| {
                let cell = cut(start, *end);
                start = *end;
                if unseeded.contains(name) && index != header_at {
                    String::from("(not compared)")
                } else {
                    cell
                }
            })
            .collect();
        let label = if index == header_at {
            String::from("(configurations)")
        } else {
            label
        };
        rows.push((label, cells));
    }
    rows
}

fn current_output(table: &Table) -> String {
    let registry = PolicyRegistry::linked().unwrap_or_else(|error| panic!("{error}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let args = std::iter::once("kv-router".to_owned()).chain(table.args.iter().cloned());
    let code = run_args(args, &registry, &mut out, &mut err);
    assert_eq!(code, EXIT_OK, "{}", String::from_utf8_lossy(&err));
    String::from_utf8(out).expect("the table is UTF-8")
}

/// The rows that differ, matched by their label, so that one added or removed row shows as one
/// line rather than shifting every row after it.
fn diff(expected: &[(String, Vec<String>)], actual: &[(String, Vec<String>)]) -> String {
    let show = |(label, cells): &(String, Vec<String>)| format!("{label} | {}", cells.join(" | "));
    let find =
        |rows: &[(String, Vec<String>)], label: &str| rows.iter().find(|r| r.0 == label).cloned();
    let mut lines = String::new();
    for row in expected {
        match find(actual, &row.0) {
            Some(current) if current == *row => {}
            Some(current) => {
                lines.push_str(&format!("- README:  {}\n", show(row)));
                lines.push_str(&format!("+ current: {}\n", show(&current)));
            }
            None => lines.push_str(&format!("- README only:  {}\n", show(row))),
        }
    }
    for row in actual {
        if find(expected, &row.0).is_none() {
            lines.push_str(&format!("+ current only: {}\n", show(row)));
        }
    }
    lines
}

/// Compares the README's block with the current output, or rewrites the block under
/// `UPDATE_README`.
fn check(table: &Table) {
    let path = root().join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md is readable");
    let range = table_range(&readme, table);
    let current = current_output(table);
    let current = current
        .lines()
        .filter(|line| !line.starts_with("report: "))
        .map(|line| format!("{line}\n"))
        .collect::<String>();
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!(
            "{}{current}{}",
            &readme[..range.start],
            &readme[range.end..]
        );
        std::fs::write(&path, updated).expect("README.md is writable");
        return;
    }
    let expected = comparable(&readme[range], table.unseeded_columns);
    let actual = comparable(&current, table.unseeded_columns);
    assert!(
        expected == actual,
        "the README's table for `kv-router {}` differs from the current output \
         (wall-clock rows aside):\n{}\nIf the change is intended, regenerate the README's tables with\n  \
         UPDATE_README=1 KV_ROUTER_TRACE=<the trace> cargo test --release -p kv-router --test readme_replay_table\n\
         and update the prose around them.\nCurrent output:\n{current}",
        table.args.join(" "),
        diff(&expected, &actual)
    );
}

#[test]
fn the_readmes_default_replay_table_is_what_the_code_prints() {
    check(&default_table());
}

#[test]
fn the_readmes_trace_table_is_what_the_code_prints_for_seeded_configurations() {
    const TEST: &str = "the_readmes_trace_table_is_what_the_code_prints_for_seeded_configurations";
    let Some(trace) = std::env::var_os("KV_ROUTER_TRACE").map(PathBuf::from) else {
        test_skip::skip_unless_ci(TEST, "set KV_ROUTER_TRACE to the Mooncake trace");
        return;
    };
    check(&trace_table(&trace));
}

#[test]
fn only_wall_clock_rows_and_unseeded_columns_are_left_out() {
    let table = current_output(&default_table());
    let rows = comparable(&table, &[]);
    // Left out: the wall-clock rows, the rule under the header and the blank line above it.
    assert_eq!(
        rows.len() + WALL_CLOCK_ROWS.len() + 2,
        table.lines().count()
    );
    let hit_rate = rows.iter().find(|(label, _)| label == "hit rate local");
    assert_eq!(
        hit_rate.map(|(_, cells)| cells.len()),
        Some(2),
        "one cell per configuration"
    );
    // A column left out is blanked in every row but the header.
    let blanked = comparable(&table, &["kvcr+kv_fetch"]);
    let served = blanked
        .iter()
        .find(|(label, _)| label == "requests served")
        .unwrap();
    assert_eq!(served.1[0], "(not compared)");
    assert_eq!(served.1[1], "2993/2993");
}

#[test]
fn an_empty_cell_keeps_its_column() {
    let table = "\
workload: w
cluster: c

                     a.yaml       bb.yaml
────────────────────────────────────────
[stage 2] role       decode              
[stage 2] hit rate    34.0%          0.0%
";
    let rows = comparable(table, &[]);
    assert_eq!(rows[2].0, "(configurations)");
    assert_eq!(rows[2].1, ["a.yaml", "bb.yaml"]);
    let role = &rows[3];
    assert_eq!(role.0, "[stage 2] role");
    assert_eq!(role.1, ["decode", ""]);
    assert_eq!(rows[4].1, ["34.0%", "0.0%"]);
}
