//! The README's table for `kv-router replay` (the embedded, seeded default) is what the current
//! code prints, except the wall-clock rows. When the figures move on purpose, regenerate the
//! README's block with
//!
//! ```text
//! UPDATE_README=1 cargo test --release -p kv-router --test readme_replay_table
//! ```
//!
//! (release, so the wall-clock rows it writes are a release build's).

use dynamo_kv_router::plugins::PolicyRegistry;
use kv_router::{EXIT_OK, run_args};
use std::path::PathBuf;

/// Rows measured on the wall clock: they vary with the machine and are not compared.
const WALL_CLOCK_ROWS: [&str; 4] = [
    "book() p50 / p99 (µs)",
    "bookings/s in book()",
    "bookings/s end to end",
    "wall ms: total / book() / events",
];

/// The sentence that introduces the block in the README.
const INTRODUCTION: &str = "configurations: the page's `kvcr` (`shared_cache_multiplier: 0.5`) with `kv_fetch`, and\n`dynamo-default-cost-fn` with `hints: []`. It prints:\n\n```text\n";

fn readme_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md")
}

/// The byte range of the table's text inside the README.
fn table_range(readme: &str) -> std::ops::Range<usize> {
    let start = readme
        .find(INTRODUCTION)
        .map(|at| at + INTRODUCTION.len())
        .expect("the README introduces the default replay's table with its usual sentence");
    let end = start
        + readme[start..]
            .find("```")
            .expect("the README's table block is closed");
    start..end
}

/// Each line cut into its cells (runs of two or more spaces separate them), wall-clock rows
/// left out.
fn comparable(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|line| !WALL_CLOCK_ROWS.iter().any(|row| line.starts_with(row)))
        // The rule under the header is as wide as the widest cells, wall-clock ones included.
        .filter(|line| !line.starts_with('─'))
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn current_table() -> String {
    let registry = PolicyRegistry::linked().unwrap_or_else(|error| panic!("{error}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_args(["kv-router", "replay"], &registry, &mut out, &mut err);
    assert_eq!(code, EXIT_OK, "{}", String::from_utf8_lossy(&err));
    String::from_utf8(out).expect("the table is UTF-8")
}

/// The rows that differ, matched by their first cell (the label), so that one added or
/// removed row shows as one line rather than shifting every row after it.
fn diff(expected: &[Vec<String>], actual: &[Vec<String>]) -> String {
    let label = |row: &Vec<String>| row.first().cloned().unwrap_or_default();
    let find =
        |rows: &[Vec<String>], wanted: &str| rows.iter().find(|r| label(r) == wanted).cloned();
    let mut lines = String::new();
    for row in expected {
        match find(actual, &label(row)) {
            Some(current) if current == *row => {}
            Some(current) => {
                lines.push_str(&format!("- README:  {}\n", row.join(" | ")));
                lines.push_str(&format!("+ current: {}\n", current.join(" | ")));
            }
            None => lines.push_str(&format!("- README only:  {}\n", row.join(" | "))),
        }
    }
    for row in actual {
        if find(expected, &label(row)).is_none() {
            lines.push_str(&format!("+ current only: {}\n", row.join(" | ")));
        }
    }
    lines
}

#[test]
fn the_readmes_default_replay_table_is_what_the_code_prints() {
    let path = readme_path();
    let readme = std::fs::read_to_string(&path).expect("README.md is readable");
    let range = table_range(&readme);
    let current = current_table();
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!(
            "{}{current}{}",
            &readme[..range.start],
            &readme[range.end..]
        );
        std::fs::write(&path, updated).expect("README.md is writable");
        return;
    }
    let (expected, actual) = (comparable(&readme[range]), comparable(&current));
    assert!(
        expected == actual,
        "the README's `kv-router replay` table differs from the current output \
         (wall-clock rows aside):\n{}\nIf the change is intended, regenerate the block with\n  \
         UPDATE_README=1 cargo test --release -p kv-router --test readme_replay_table\n\
         and update the prose around it.\nCurrent output:\n{current}",
        diff(&expected, &actual)
    );
}

#[test]
fn wall_clock_rows_are_the_only_ones_left_out() {
    let table = current_table();
    let compared = comparable(&table);
    assert_eq!(
        compared.len() + WALL_CLOCK_ROWS.len() + 1,
        table.lines().count()
    );
    assert!(
        compared
            .iter()
            .any(|cells| cells.first().is_some_and(|c| c == "hit rate local") && cells.len() == 3)
    );
}
