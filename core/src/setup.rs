//! What a router runs, per role: the constructed policies that configuration loading produced.

use crate::identity::Role;
use crate::plugins::registry::{ConstructedHintPolicy, ConstructedSelectionPolicy};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// How the router chooses workers: by KV overlap and policies, or by a KV-blind rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RouterMode {
    /// KV-aware: the KV index, the role's selection policy, and hint policies.
    #[default]
    Kv,
    /// Each role's workers in turn.
    RoundRobin,
    /// A uniformly random worker of the role.
    Random,
    /// The worker with the fewest active blocks (ties: smaller id).
    LeastLoaded,
}

impl RouterMode {
    /// Every mode, in documentation order.
    pub const ALL: [RouterMode; 4] = [
        RouterMode::Kv,
        RouterMode::RoundRobin,
        RouterMode::Random,
        RouterMode::LeastLoaded,
    ];

    /// The mode's name in configuration and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            RouterMode::Kv => "kv",
            RouterMode::RoundRobin => "round-robin",
            RouterMode::Random => "random",
            RouterMode::LeastLoaded => "least-loaded",
        }
    }
}

impl fmt::Display for RouterMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A router mode name that is not one of `kv`, `round-robin`, `random`, `least-loaded`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown router mode `{0}`; expected one of: kv, round-robin, random, least-loaded")]
pub struct UnknownRouterMode(pub String);

impl FromStr for RouterMode {
    type Err = UnknownRouterMode;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        RouterMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == name)
            .ok_or_else(|| UnknownRouterMode(name.to_owned()))
    }
}

/// Why a hint policy runs in a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintOrigin {
    /// The role's `hints` list names it.
    Listed,
    /// The role has no `hints` key and the policy is a registered default for its selection type.
    Default,
}

/// One hint policy a role runs, in list order.
#[derive(Clone)]
pub struct RoleHint {
    /// The hint policy type.
    pub policy_type: String,
    /// The entry's `name`, when the role gave one.
    pub name: Option<String>,
    /// Why it runs.
    pub origin: HintOrigin,
    /// The constructed instance and its commitments.
    pub constructed: ConstructedHintPolicy,
}

impl RoleHint {
    /// The label used in logs and counters: the name if given, else the type.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.policy_type)
    }
}

/// The policies one role runs.
#[derive(Clone)]
pub struct RolePolicies {
    /// The worker-selection policy type.
    pub selection_type: String,
    /// The constructed selection policy and its commitments.
    pub selection: ConstructedSelectionPolicy,
    /// The hint policies, in the order they run.
    pub hints: Vec<RoleHint>,
    /// The role's shadow policies, in configuration order (empty for a shadow itself).
    pub shadows: Vec<ShadowPolicies>,
}

impl RolePolicies {
    /// A role running `selection` (of type `selection_type`) and `hints`, with no shadows.
    pub fn new(
        selection_type: impl Into<String>,
        selection: ConstructedSelectionPolicy,
        hints: Vec<RoleHint>,
    ) -> Self {
        Self {
            selection_type: selection_type.into(),
            selection,
            hints,
            shadows: Vec::new(),
        }
    }
}

/// A candidate configuration of a role that sees every request the role books and records what
/// it would have done (its choice, cached blocks, hints), while the live policies book.
#[derive(Clone)]
pub struct ShadowPolicies {
    /// Its name in reports: the entry's `name`, else its selection type.
    pub name: String,
    /// Its selection and hint policies.
    pub policies: RolePolicies,
}

/// Everything a router needs from its configuration, already validated and constructed.
#[derive(Clone)]
pub struct RouterSetup {
    /// The routing mode.
    pub router_mode: RouterMode,
    /// Tokens per KV block.
    pub block_size: u32,
    /// The configured roles.
    pub roles: BTreeMap<Role, RolePolicies>,
}
