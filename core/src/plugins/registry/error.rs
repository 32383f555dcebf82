//! Why a registration or a lookup failed.

use super::{PolicyKind, SourceLocation};
use crate::plugins::name::NameProblem;

/// Why a registration or a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The name is empty, malformed or reserved.
    #[error("invalid policy name {name:?} registered by {location}: {problem}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// What is wrong with it.
        problem: NameProblem,
        /// Where it was registered.
        location: SourceLocation,
    },
    /// Two registrations use one name.
    #[error(
        "policy name `{name}` is registered twice: by {first} and by {second}; rename one of them or link only one of the crates"
    )]
    Duplicate {
        /// The name.
        name: String,
        /// The registration that came first.
        first: Box<SourceLocation>,
        /// The registration that came second.
        second: Box<SourceLocation>,
    },
    /// No linked policy of that kind (or, when `kind` is `None`, of either kind) has the name.
    #[error("{}", unknown_message(*.kind, name, linked, suggestion.as_deref()))]
    UnknownPolicy {
        /// The kind looked up; `None` for a lookup of either kind.
        kind: Option<PolicyKind>,
        /// The name looked up.
        name: String,
        /// The linked names of that kind (of either kind when `kind` is `None`), sorted.
        linked: Vec<String>,
        /// The closest linked name, if one is close.
        suggestion: Option<String>,
    },
    /// The name belongs to a policy of the other kind.
    #[error("`{name}` is a {actual} policy, not a {expected} policy")]
    WrongKind {
        /// The name looked up.
        name: String,
        /// The kind looked up.
        expected: PolicyKind,
        /// The kind registered.
        actual: PolicyKind,
    },
}

fn unknown_message(
    kind: Option<PolicyKind>,
    name: &str,
    linked: &[String],
    suggestion: Option<&str>,
) -> String {
    // `unknown hint policy type`, or `unknown policy type` for a lookup of either kind.
    let kind = kind.map_or(String::new(), |kind| format!("{kind} "));
    let mut message = format!("unknown {kind}policy type `{name}`");
    if let Some(suggestion) = suggestion {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    }
    if linked.is_empty() {
        message.push_str(&format!(
            "; no {kind}policies are linked into this build: link a catalog crate (for example `use dynamo_router_catalog as _;`)"
        ));
    } else {
        message.push_str(&format!(
            "; linked {kind}policy types: {}",
            linked.join(", ")
        ));
    }
    message
}
