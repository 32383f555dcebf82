//! The two kinds of policy a registry holds.

use std::fmt;

/// The two kinds of policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Chooses the worker (`worker_selection.<role>.type`).
    WorkerSelection,
    /// Adds actions for the booked worker (`worker_selection.<role>.hints[].type`).
    Hint,
}

impl PolicyKind {
    /// The kind as people read it: `worker-selection` or `hint`.
    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyKind::WorkerSelection => "worker-selection",
            PolicyKind::Hint => "hint",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
