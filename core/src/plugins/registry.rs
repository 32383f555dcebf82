//! The policy registry: every policy a router build can configure, from link-time
//! registrations and from manual `register_*` calls, under the same checks.

use super::name::{self, NameProblem};
use super::registration::{PolicyRegistration, RegisteredBuild, linked_registrations};
use super::{
    Commitments, HintHost, HintPolicy, HintPolicyProvider, ParameterError, Partition,
    PolicyParameters, WorkerSelectionPolicy, WorkerSelectionProvider,
};
use std::collections::BTreeMap;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;

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

/// Where a policy was registered: its crate (unknown for manual registrations) and `file:line`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLocation {
    /// The crate that registered the policy, when known.
    pub crate_name: Option<String>,
    /// The source file.
    pub file: String,
    /// The source line.
    pub line: u32,
}

impl SourceLocation {
    fn caller(location: &Location<'_>) -> Self {
        Self {
            crate_name: None,
            file: location.file().to_owned(),
            line: location.line(),
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.crate_name {
            Some(krate) => write!(f, "crate `{krate}` at {}:{}", self.file, self.line),
            None => write!(f, "a manual registration at {}:{}", self.file, self.line),
        }
    }
}

#[derive(Clone)]
enum Provider {
    Hint(HintPolicyProvider),
    WorkerSelection(WorkerSelectionProvider),
}

/// One registered policy: what catalogs and the CLI list, and how to build it.
#[derive(Clone)]
pub struct PolicyEntry {
    /// The type name used in configurations.
    pub name: String,
    /// The kind of policy.
    pub kind: PolicyKind,
    /// The first paragraph of its description.
    pub summary: String,
    /// Its full description (the doc comment of the policy type).
    pub description: String,
    /// For hint policies: the selection policies it runs under by default.
    pub defaults: Vec<HintHost>,
    /// What it declares it commits (selection) or sends (hint).
    pub commitments: Commitments,
    /// The Rust type of the policy, when known.
    pub type_name: Option<String>,
    /// The Rust type of its parameters, when known.
    pub parameters_type: Option<String>,
    /// Where it was registered.
    pub location: SourceLocation,
    provider: Provider,
}

impl fmt::Debug for PolicyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyEntry")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("summary", &self.summary)
            .field("defaults", &self.defaults)
            .field("commitments", &self.commitments)
            .field("type_name", &self.type_name)
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// A hint policy instance built for one role, with what it sends.
#[derive(Clone)]
pub struct ConstructedHintPolicy {
    /// The instance.
    pub policy: Arc<dyn HintPolicy>,
    /// Its effective commitments: the registration's declaration plus the instance's own.
    pub commitments: Commitments,
}

/// A worker-selection policy instance built for one role, with what it commits.
#[derive(Clone)]
pub struct ConstructedSelectionPolicy {
    /// The instance.
    pub policy: Arc<dyn WorkerSelectionPolicy>,
    /// What this instance, as configured, commits the booked worker to.
    pub commitments: Commitments,
}

impl PolicyEntry {
    /// Builds the hint-policy instance for `partition` from `parameters` (errors keep the field
    /// path relative to the parameters mapping).
    pub fn construct_hint(
        &self,
        parameters: PolicyParameters,
        partition: &Partition,
    ) -> Result<ConstructedHintPolicy, ConstructError> {
        let Provider::Hint(provider) = &self.provider else {
            return Err(ConstructError::WrongKind(self.wrong_kind(PolicyKind::Hint)));
        };
        let policy = provider(parameters)?.construct(partition)?;
        let commitments = self.commitments | policy.commitments();
        Ok(ConstructedHintPolicy {
            policy,
            commitments,
        })
    }

    /// Builds the worker-selection instance for `partition` from `parameters`.
    pub fn construct_worker_selection(
        &self,
        parameters: PolicyParameters,
        partition: &Partition,
    ) -> Result<ConstructedSelectionPolicy, ConstructError> {
        let Provider::WorkerSelection(provider) = &self.provider else {
            return Err(ConstructError::WrongKind(
                self.wrong_kind(PolicyKind::WorkerSelection),
            ));
        };
        let policy = provider(parameters)?.construct(partition)?;
        let commitments = policy.commitments();
        Ok(ConstructedSelectionPolicy {
            policy,
            commitments,
        })
    }

    /// Whether this hint policy runs by default in a role whose selection policy is `selection_type`.
    pub fn is_default_under(&self, selection_type: &str) -> bool {
        self.kind == PolicyKind::Hint && self.defaults.iter().any(|host| host.hosts(selection_type))
    }

    fn wrong_kind(&self, expected: PolicyKind) -> RegistryError {
        RegistryError::WrongKind {
            name: self.name.clone(),
            expected,
            actual: self.kind,
        }
    }

    fn from_registration(registration: &'static PolicyRegistration) -> Self {
        let (kind, provider) = match registration.build {
            RegisteredBuild::Hint(build) => (PolicyKind::Hint, Provider::Hint(Arc::new(build))),
            RegisteredBuild::WorkerSelection(build) => (
                PolicyKind::WorkerSelection,
                Provider::WorkerSelection(Arc::new(build)),
            ),
        };
        let description = normalise_doc(registration.doc);
        Self {
            name: registration.name.to_owned(),
            kind,
            summary: summary_of(&description),
            description,
            defaults: registration.defaults.to_vec(),
            commitments: registration.commitments,
            type_name: Some(registration.type_name.to_owned()),
            parameters_type: Some(registration.parameters_type.to_owned()),
            location: SourceLocation {
                crate_name: Some(registration.crate_name.to_owned()),
                file: registration.file.to_owned(),
                line: registration.line,
            },
            provider,
        }
    }

    fn manual(name: &str, kind: PolicyKind, provider: Provider, location: &Location<'_>) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            summary: String::new(),
            description: String::new(),
            defaults: Vec::new(),
            commitments: Commitments::NONE,
            type_name: None,
            parameters_type: None,
            location: SourceLocation::caller(location),
            provider,
        }
    }
}

/// Why a policy instance could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConstructError {
    /// The provider or constructor rejected the parameters.
    #[error(transparent)]
    Parameters(#[from] ParameterError),
    /// The entry is not of the kind asked for.
    #[error(transparent)]
    WrongKind(RegistryError),
}

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
    /// No linked policy of that kind has the name.
    #[error("{}", unknown_message(*.kind, name, linked, suggestion.as_deref()))]
    UnknownPolicy {
        /// The kind looked up.
        kind: PolicyKind,
        /// The name looked up.
        name: String,
        /// The linked names of that kind, sorted.
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
    /// A provider rejected its parameters.
    #[error(transparent)]
    Parameters(#[from] ParameterError),
}

fn unknown_message(
    kind: PolicyKind,
    name: &str,
    linked: &[String],
    suggestion: Option<&str>,
) -> String {
    let mut message = format!("unknown {kind} policy type `{name}`");
    if let Some(suggestion) = suggestion {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    }
    if linked.is_empty() {
        message.push_str(&format!(
            "; no {kind} policies are linked into this build: link a catalog crate (for example `use dynamo_router_catalog as _;`)"
        ));
    } else {
        message.push_str(&format!(
            "; linked {kind} policy types: {}",
            linked.join(", ")
        ));
    }
    message
}

/// The set of policies a router build can configure, keyed by unique name.
#[derive(Clone, Default)]
pub struct PolicyRegistry {
    entries: BTreeMap<String, PolicyEntry>,
}

impl fmt::Debug for PolicyRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.values()).finish()
    }
}

impl PolicyRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding every policy registered by a crate linked into this binary (through
    /// `#[hint_policy]` and `#[worker_selection_policy]`), checked like manual registrations.
    pub fn linked() -> Result<Self, RegistryError> {
        let mut registry = Self::new();
        let mut registrations: Vec<_> = linked_registrations().collect();
        registrations.sort_by_key(|r| (r.name, r.crate_name, r.file, r.line));
        for registration in registrations {
            registry.insert(PolicyEntry::from_registration(registration))?;
        }
        Ok(registry)
    }

    /// Registers a hint policy under `name`, built by `provider`, running by default under the
    /// selection policies in `defaults` (empty: only where a role lists it).
    #[track_caller]
    pub fn register_hint_policy(
        &mut self,
        name: &str,
        provider: HintPolicyProvider,
        defaults: impl IntoIterator<Item = HintHost>,
    ) -> Result<(), RegistryError> {
        let mut entry = PolicyEntry::manual(
            name,
            PolicyKind::Hint,
            Provider::Hint(provider),
            Location::caller(),
        );
        entry.defaults = defaults.into_iter().collect();
        self.insert(entry)
    }

    /// Registers a worker-selection policy under `name`, built by `provider`.
    #[track_caller]
    pub fn register_worker_selection_policy(
        &mut self,
        name: &str,
        provider: WorkerSelectionProvider,
    ) -> Result<(), RegistryError> {
        self.insert(PolicyEntry::manual(
            name,
            PolicyKind::WorkerSelection,
            Provider::WorkerSelection(provider),
            Location::caller(),
        ))
    }

    /// Describes the policy registered last under `name` (summary, description, commitments);
    /// for manual registrations, which carry no doc comment.
    pub fn describe(
        &mut self,
        name: &str,
        description: &str,
        commitments: Commitments,
    ) -> Result<(), RegistryError> {
        let entry = self
            .entries
            .get_mut(name)
            .ok_or_else(|| unknown(name, None, &BTreeMap::new()))?;
        entry.description = normalise_doc(description);
        entry.summary = summary_of(&entry.description);
        entry.commitments = commitments;
        Ok(())
    }

    fn insert(&mut self, entry: PolicyEntry) -> Result<(), RegistryError> {
        name::check_policy_name(&entry.name).map_err(|problem| RegistryError::InvalidName {
            name: entry.name.clone(),
            problem,
            location: entry.location.clone(),
        })?;
        if let Some(first) = self.entries.get(&entry.name) {
            return Err(RegistryError::Duplicate {
                name: entry.name.clone(),
                first: Box::new(first.location.clone()),
                second: Box::new(entry.location),
            });
        }
        self.entries.insert(entry.name.clone(), entry);
        Ok(())
    }

    /// Every registered policy, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = &PolicyEntry> {
        self.entries.values()
    }

    /// The policy named `name`, of either kind.
    pub fn get(&self, name: &str) -> Option<&PolicyEntry> {
        self.entries.get(name)
    }

    /// Whether no policy is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The hint policy named `name`, or an error listing the linked hint policies.
    pub fn hint_policy(&self, name: &str) -> Result<&PolicyEntry, RegistryError> {
        self.lookup(name, PolicyKind::Hint)
    }

    /// The worker-selection policy named `name`, or an error listing the linked ones.
    pub fn worker_selection_policy(&self, name: &str) -> Result<&PolicyEntry, RegistryError> {
        self.lookup(name, PolicyKind::WorkerSelection)
    }

    /// The hint policies that run by default under `selection_type`, in name order.
    pub fn default_hint_policies<'a>(
        &'a self,
        selection_type: &'a str,
    ) -> impl Iterator<Item = &'a PolicyEntry> + 'a {
        self.entries()
            .filter(move |entry| entry.is_default_under(selection_type))
    }

    /// The names of the policies of `kind`, sorted.
    pub fn names(&self, kind: PolicyKind) -> impl Iterator<Item = &str> {
        self.entries()
            .filter(move |entry| entry.kind == kind)
            .map(|entry| entry.name.as_str())
    }

    fn lookup(&self, name: &str, kind: PolicyKind) -> Result<&PolicyEntry, RegistryError> {
        match self.entries.get(name) {
            Some(entry) if entry.kind == kind => Ok(entry),
            Some(entry) => Err(RegistryError::WrongKind {
                name: name.to_owned(),
                expected: kind,
                actual: entry.kind,
            }),
            None => Err(unknown(name, Some(kind), &self.entries)),
        }
    }
}

fn unknown(
    name: &str,
    kind: Option<PolicyKind>,
    entries: &BTreeMap<String, PolicyEntry>,
) -> RegistryError {
    let linked: Vec<String> = entries
        .values()
        .filter(|entry| kind.is_none_or(|kind| entry.kind == kind))
        .map(|entry| entry.name.clone())
        .collect();
    let suggestion = name::closest(name, linked.iter().map(String::as_str)).map(str::to_owned);
    RegistryError::UnknownPolicy {
        kind: kind.unwrap_or(PolicyKind::Hint),
        name: name.to_owned(),
        linked,
        suggestion,
    }
}

/// Strips the one leading space rustdoc leaves on each doc line and surrounding blank lines.
fn normalise_doc(doc: &str) -> String {
    let lines: Vec<&str> = doc
        .lines()
        .map(|line| line.strip_prefix(' ').unwrap_or(line).trim_end())
        .collect();
    lines.join("\n").trim().to_owned()
}

/// The first paragraph of a description, on one line.
fn summary_of(description: &str) -> String {
    description
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::{HintAction, HintContext, HintPolicyConstructor, PolicyError};
    use crate::router::worker::Role;

    struct Noop;

    impl HintPolicy for Noop {
        fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
            Ok(Vec::new())
        }
    }

    fn noop_provider() -> HintPolicyProvider {
        Arc::new(|_| Ok(HintPolicyConstructor::shared(Noop)))
    }

    #[test]
    fn duplicate_names_report_both_locations() {
        let mut registry = PolicyRegistry::new();
        registry
            .register_hint_policy("x", noop_provider(), [])
            .unwrap();
        let error = registry
            .register_hint_policy("x", noop_provider(), [])
            .unwrap_err();
        let RegistryError::Duplicate { first, second, .. } = &error else {
            panic!("expected a duplicate error, got {error}");
        };
        assert_ne!(first.line, second.line);
        assert!(
            error
                .to_string()
                .contains(&format!("registry.rs:{}", first.line)),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .contains(&format!("registry.rs:{}", second.line)),
            "{error}"
        );
    }

    #[test]
    fn rejects_bad_and_reserved_names() {
        let mut registry = PolicyRegistry::new();
        for bad in ["", "has space", "any", "round-robin", "ü"] {
            let error = registry
                .register_hint_policy(bad, noop_provider(), [])
                .unwrap_err();
            assert!(
                matches!(error, RegistryError::InvalidName { .. }),
                "{bad:?}: {error}"
            );
        }
        assert!(registry.is_empty());
    }

    #[test]
    fn unknown_lookup_lists_linked_and_suggests() {
        let mut registry = PolicyRegistry::new();
        registry
            .register_hint_policy("kv_fetch", noop_provider(), [])
            .unwrap();
        registry
            .register_hint_policy("harness_prefetch", noop_provider(), [])
            .unwrap();
        let error = registry.hint_policy("kv_fecth").unwrap_err().to_string();
        assert_eq!(
            error,
            "unknown hint policy type `kv_fecth`; did you mean `kv_fetch`?; linked hint policy types: harness_prefetch, kv_fetch"
        );
    }

    #[test]
    fn defaults_are_found_in_name_order() {
        let mut registry = PolicyRegistry::new();
        registry
            .register_hint_policy("zeta", noop_provider(), [HintHost::AnyWorkerSelection])
            .unwrap();
        registry
            .register_hint_policy(
                "alpha",
                noop_provider(),
                [HintHost::worker_selection("kvcr")],
            )
            .unwrap();
        registry
            .register_hint_policy("listed_only", noop_provider(), [])
            .unwrap();
        let under_kvcr: Vec<_> = registry
            .default_hint_policies("kvcr")
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(under_kvcr, ["alpha", "zeta"]);
        let under_other: Vec<_> = registry
            .default_hint_policies("other")
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(under_other, ["zeta"]);
    }

    #[test]
    fn constructing_the_wrong_kind_fails() {
        let mut registry = PolicyRegistry::new();
        registry
            .register_hint_policy("h", noop_provider(), [])
            .unwrap();
        let partition = Partition {
            role: Role::Decode,
            block_size: 16,
        };
        let entry = registry.get("h").unwrap();
        assert!(
            entry
                .construct_hint(PolicyParameters::empty(), &partition)
                .is_ok()
        );
        assert!(
            entry
                .construct_worker_selection(PolicyParameters::empty(), &partition)
                .is_err()
        );
        assert!(registry.worker_selection_policy("h").is_err());
    }

    #[test]
    fn summary_is_the_first_paragraph() {
        let description = normalise_doc(" Sends a prefetch\n for the session.\n\n More detail.");
        assert_eq!(
            summary_of(&description),
            "Sends a prefetch for the session."
        );
    }
}
