//! Why a configuration was rejected: the problem, the file, line and column of the offending
//! entry, and the role it belongs to.

use super::position::Position;
use super::snippet::{self, Diagnostic};
use crate::identity::Role;
use crate::plugins::name::NameProblem;
use crate::plugins::{ParameterError, RegistryError};
use crate::setup::RouterMode;

/// A configuration the router cannot start with. Its message names the file, line and column,
/// the entry (a path such as `worker_selection.decode.hints[1]`, which names the role) and what
/// to do; [`render`](Self::render) adds the YAML snippet with a caret under the entry.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.message())]
pub struct ConfigError {
    /// The configuration file, as named to the loader.
    pub file: String,
    /// Where the offending entry starts.
    pub position: Position,
    /// The role whose entry is wrong, if the problem is inside one.
    pub role: Option<Role>,
    /// What is wrong (boxed: the error travels through every startup check).
    #[source]
    pub problem: Box<ConfigProblem>,
}

impl ConfigError {
    fn message(&self) -> String {
        if self.position.is_known() {
            format!("{}:{}: {}", self.file, self.position, self.problem)
        } else {
            format!("{}: {}", self.file, self.problem)
        }
    }

    pub(super) fn new(
        file: &str,
        position: Position,
        role: Option<Role>,
        problem: ConfigProblem,
    ) -> Self {
        Self {
            file: file.to_owned(),
            position,
            role,
            problem: Box::new(problem),
        }
    }

    /// The error for people: the message, the position, and the offending line of `source`
    /// (the file's text) with a caret under the entry.
    pub fn render(&self, source: &str) -> String {
        let diagnostic = Diagnostic {
            message: &self.problem,
            file: &self.file,
            position: self.position,
            role: self.role,
        };
        snippet::render(&diagnostic, source)
    }
}

/// What is wrong with a configuration, and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigProblem {
    /// The file could not be read.
    #[error("cannot read the configuration: {message}; check the path and its permissions")]
    Read {
        /// The I/O error.
        message: String,
    },
    /// The file is larger than [`MAX_CONFIG_BYTES`](super::MAX_CONFIG_BYTES).
    #[error(
        "the configuration is {size} bytes, over the {limit}-byte limit; a router configuration is a few kilobytes, check that this is the right file"
    )]
    TooLarge {
        /// The file's size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// The YAML is malformed or does not follow the schema (including duplicate and unknown keys).
    #[error("{message}; {help}")]
    Yaml {
        /// The parser's message.
        message: String,
        /// What to do.
        help: &'static str,
    },
    /// The document expands past the parser's budget (aliases, nesting, size).
    #[error(
        "{message}; the document exceeds the parser's safety budget: write values out instead of expanding aliases (`*name`) repeatedly, and keep nesting shallow"
    )]
    Budget {
        /// The parser's message.
        message: String,
    },
    /// `router_mode` is not a known mode.
    #[error(
        "router_mode: unknown router mode `{value}`; use one of: kv, round-robin, random, least-loaded"
    )]
    UnknownRouterMode {
        /// The value written.
        value: String,
    },
    /// `block_size` is zero.
    #[error(
        "block_size: must be at least 1; set it to the engines' KV block size in tokens (for example 16)"
    )]
    ZeroBlockSize,
    /// A key of the `nats` mapping holds a value NATS would refuse.
    #[error("nats.{key}: `{value}` is not usable: {reason}")]
    InvalidNats {
        /// The key (`url`, `stream`, …).
        key: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// KV mode with no role configured.
    #[error(
        "worker_selection: no role is configured; router_mode `kv` needs an entry for at least one of `aggregated`, `prefill`, `decode`"
    )]
    NoRoles,
    /// A `type` names no linked policy of the right kind.
    #[error(
        "{path}: {source}; run `kv-router catalog` to list the linked policies, or link the crate that provides it"
    )]
    UnknownPolicy {
        /// The entry's path, such as `worker_selection.decode.hints[0].type`.
        path: String,
        /// The registry's answer: the linked types and the closest one.
        source: RegistryError,
    },
    /// `parameters` is present but not a mapping.
    #[error(
        "{path}: parameters must be a mapping of field names to values, found {found}; write them as `parameters: {{field: value}}`"
    )]
    ParametersNotMapping {
        /// The path of the `parameters` key.
        path: String,
        /// What was found instead.
        found: &'static str,
    },
    /// A provider rejected its parameters (the error's path starts at `worker_selection`).
    #[error(
        "{error}; fix the value (run `kv-router catalog describe {policy}` for the policy's parameters)"
    )]
    Parameters {
        /// The rejection, with the full field path.
        error: ParameterError,
        /// The policy type.
        policy: String,
    },
    /// A hint policy that runs by default rejects the default (empty) parameters.
    #[error(
        "{path}: hint policy `{policy}` runs by default under `{selection}` but rejects default parameters ({error}); list the role's hints explicitly with the parameters it needs, or `hints: []`"
    )]
    DefaultHintRejected {
        /// The role's path.
        path: String,
        /// The hint policy type.
        policy: String,
        /// The selection policy type.
        selection: String,
        /// The rejection.
        error: ParameterError,
    },
    /// Hints are listed while the router does not route on KV.
    #[error(
        "{path}: {count} hint {policies} listed while router_mode is `{mode}`; hints run only on the KV path: use router_mode `kv`, or `hints: []`"
    )]
    HintsOutsideKvMode {
        /// The `hints` path.
        path: String,
        /// How many are listed.
        count: usize,
        /// `policy is` or `policies are`.
        policies: &'static str,
        /// The effective router mode.
        mode: RouterMode,
    },
    /// A hint type is listed more than once and this entry has no name.
    #[error(
        "{path}: hint type `{policy}` is listed {count} times in this role and this entry has no `name`; give each of its entries a unique `name`"
    )]
    UnnamedRepeatedHint {
        /// The entry's path.
        path: String,
        /// The repeated type.
        policy: String,
        /// How many times the role lists it.
        count: usize,
    },
    /// Two hint entries of a role share a name (or a name equals an unnamed entry's type).
    #[error(
        "{path}: hint name `{name}` is already used by {other} in this role; names within a role must be unique"
    )]
    DuplicateHintName {
        /// The path of the second `name`.
        path: String,
        /// The name.
        name: String,
        /// The entry that uses it first.
        other: String,
    },
    /// A hint name does not match `[A-Za-z0-9_.-]+`.
    #[error("{path}: invalid hint name {name:?}: {problem}")]
    MalformedHintName {
        /// The path of the `name`.
        path: String,
        /// The name.
        name: String,
        /// What is wrong with it.
        problem: NameProblem,
    },
    /// Shadows are listed while the router does not route on KV.
    #[error(
        "{path}: shadow policies are listed while router_mode is `{mode}`; shadows are evaluated on the KV path only: use router_mode `kv`, or remove `shadow`"
    )]
    ShadowOutsideKvMode {
        /// The `shadow` path.
        path: String,
        /// The effective router mode.
        mode: RouterMode,
    },
    /// Two shadows of a role share a name (or a name equals an unnamed shadow's type).
    #[error(
        "{path}: shadow name `{name}` is already used by {other} in this role; give each shadow a unique `name`"
    )]
    DuplicateShadowName {
        /// The path of the second shadow.
        path: String,
        /// The name.
        name: String,
        /// The shadow that uses it first.
        other: String,
    },
    /// A shadow name does not match `[A-Za-z0-9_.-]+`.
    #[error("{path}: invalid shadow name {name:?}: {problem}")]
    MalformedShadowName {
        /// The path of the `name`.
        path: String,
        /// The name.
        name: String,
        /// What is wrong with it.
        problem: NameProblem,
    },
    /// The selection policy commits KV copies and no hint policy sends them.
    #[error(
        "{path}: worker-selection policy `{selection}`, as configured, commits KV copies, but the role runs no hint policy that sends them; add exactly one to `hints` ({available}), or configure `{selection}` not to commit copies"
    )]
    MissingKvCopySender {
        /// The role's (or its `hints`') path.
        path: String,
        /// The selection policy type.
        selection: String,
        /// The linked hint policies that send KV copies, for the message.
        available: String,
    },
    /// The selection policy commits KV copies and several hint policies would send them.
    #[error(
        "{path}: worker-selection policy `{selection}` commits KV copies and {count} hint policies send them ({senders}); keep exactly one"
    )]
    SeveralKvCopySenders {
        /// The `hints` path.
        path: String,
        /// The selection policy type.
        selection: String,
        /// How many send them.
        count: usize,
        /// Their labels.
        senders: String,
    },
}
