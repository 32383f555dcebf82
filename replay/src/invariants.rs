//! Checks of a replay that compare independent sources: the simulated workers' caches, the KV
//! events they published, and the router's own view built from those events.
//!
//! None of them holds by construction: each compares two records kept by different code.

use serde::Serialize;

/// Violations found in one replay (all zero when the simulation and the router agree).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Invariants {
    /// Blocks named by a `stored` event that the worker's cache did not hold right after the
    /// event was published.
    pub stored_not_held: u64,
    /// Workers whose blocks stored minus blocks removed, summed over their KV events, differ from
    /// the number of blocks their cache holds at the end.
    pub ledger_mismatches: u64,
    /// Served stages whose prompt prefix, as the router's index holds it at the end of the
    /// replay (every event delivered), differs from what the serving worker's cache holds.
    pub router_view_mismatches_at_end: u64,
    /// Served stages whose `local` and `fetched` counts differ from a recount over the prompt:
    /// every block past the prefix held at start and before the first computed block must be
    /// either held by the worker (local) or held by a fetch source and not by the worker
    /// (fetched).
    pub reuse_recount_mismatches: u64,
}

impl Invariants {
    /// Whether no violation was found.
    pub fn hold(&self) -> bool {
        *self == Self::default()
    }

    /// One line per violated invariant, saying what disagreed.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |count: u64, what: &str| {
            if count > 0 {
                out.push(format!("{count} {what}"));
            }
        };
        check(
            self.stored_not_held,
            "blocks announced in `stored` events were not in the worker's cache",
        );
        check(
            self.ledger_mismatches,
            "workers' stored − removed blocks differ from their final cache occupancy",
        );
        check(
            self.router_view_mismatches_at_end,
            "prefixes in the router's final index differ from the workers' caches",
        );
        check(
            self.reuse_recount_mismatches,
            "requests' local/fetched counts differ from a recount over the prompt",
        );
        out
    }

    /// Adds another replay's violations.
    pub fn add(&mut self, other: &Invariants) {
        self.stored_not_held += other.stored_not_held;
        self.ledger_mismatches += other.ledger_mismatches;
        self.router_view_mismatches_at_end += other.router_view_mismatches_at_end;
        self.reuse_recount_mismatches += other.reuse_recount_mismatches;
    }
}
