//! Where a hint policy runs by default.

use std::borrow::Cow;
use std::fmt;

/// A worker-selection policy under which a hint policy runs by default, that is, in every role
/// whose entry has no `hints` key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HintHost {
    /// Roles whose worker-selection policy has this type.
    WorkerSelection(Cow<'static, str>),
    /// Roles with any worker-selection policy.
    AnyWorkerSelection,
}

impl HintHost {
    /// Roles whose worker-selection policy is `policy_type`.
    pub fn worker_selection(policy_type: impl Into<Cow<'static, str>>) -> Self {
        Self::WorkerSelection(policy_type.into())
    }

    /// Whether a role whose selection policy is `selection_type` runs this default.
    pub fn hosts(&self, selection_type: &str) -> bool {
        match self {
            Self::WorkerSelection(name) => name == selection_type,
            Self::AnyWorkerSelection => true,
        }
    }
}

impl fmt::Display for HintHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WorkerSelection(name) => f.write_str(name),
            Self::AnyWorkerSelection => f.write_str("any"),
        }
    }
}
