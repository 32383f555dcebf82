//! Skips that say so.
//!
//! A test that cannot run here (no trace, no Python) calls [`skip_unless_ci`] and returns. Outside
//! CI it writes one line, `SKIPPED: <test>: <reason>`, straight to the process's standard error,
//! which the test harness does not capture, so the line shows in `cargo test`'s output and
//! `.ci/run` counts it in its summary (`N passed, N failed, N skipped`). Under CI (`CI=true`),
//! where everything a test needs is provided, the same call fails the test instead.
//!
//! ```
//! fn trace_or_skip() -> Option<std::path::PathBuf> {
//!     match std::env::var_os("KV_ROUTER_TRACE") {
//!         Some(path) => Some(path.into()),
//!         None => {
//!             test_skip::skip_unless_ci("mooncake_trace", "set KV_ROUTER_TRACE to the trace");
//!             None
//!         }
//!     }
//! }
//! ```

use std::io::Write as _;

/// What starts a skip line; `.ci/run` counts the lines that start with it.
pub const MARKER: &str = "SKIPPED: ";

/// The environment variable CI services set to `true`.
pub const CI_VARIABLE: &str = "CI";

/// Whether the tests run under CI (`CI=true` or `CI=1`), where nothing may be skipped.
pub fn in_ci() -> bool {
    ci_value_means_ci(std::env::var(CI_VARIABLE).ok().as_deref())
}

fn ci_value_means_ci(value: Option<&str>) -> bool {
    matches!(value.map(str::trim), Some(v) if v.eq_ignore_ascii_case("true") || v == "1")
}

/// The line a skip prints: the marker, the test's name and the reason.
pub fn skip_line(test: &str, reason: &str) -> String {
    let reason = reason.replace('\n', " ");
    format!("{MARKER}{test}: {reason}")
}

/// Reports that `test` is skipped because of `reason`: under CI this panics (the test fails),
/// elsewhere it writes the skip line to standard error. The caller returns afterwards.
#[track_caller]
pub fn skip_unless_ci(test: &str, reason: &str) {
    if in_ci() {
        panic!("{test} cannot run: {reason}; under CI (CI=true) this is a failure, not a skip");
    }
    skip(test, reason);
}

/// Writes the skip line for `test` to standard error, bypassing the harness's capture, whatever
/// the environment (for optional tests that may be skipped under CI too).
pub fn skip(test: &str, reason: &str) {
    let line = skip_line(test, reason);
    let mut stderr = std::io::stderr().lock();
    // The leading newline puts the marker at the start of a line even when the harness has
    // already printed `test <name> ... ` (single-threaded runs). A closed standard error
    // leaves nothing to report to.
    let _ = writeln!(stderr, "\n{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_starts_with_the_marker_and_stays_on_one_line() {
        assert_eq!(
            skip_line("trace", "no file\nat all"),
            "SKIPPED: trace: no file at all"
        );
        assert!(skip_line("a", "b").starts_with(MARKER));
    }

    #[test]
    fn ci_is_recognised_from_its_usual_values() {
        for value in ["true", "TRUE", "1", " true "] {
            assert!(ci_value_means_ci(Some(value)), "{value}");
        }
        for value in ["false", "0", ""] {
            assert!(!ci_value_means_ci(Some(value)), "{value}");
        }
        assert!(!ci_value_means_ci(None));
    }
}
