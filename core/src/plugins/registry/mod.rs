//! The policy registry: every policy a router build can configure, from link-time
//! registrations and from manual `register_*` calls, under the same checks.
//!
//! [`PolicyEntry`] is what is listed about a policy; [`HintPolicyEntry`] and
//! [`WorkerSelectionPolicyEntry`] are the typed entries the lookups return, each able to build
//! instances of its own kind only.

mod entry;
mod error;
mod policy_kind;
mod source_location;

pub use entry::{
    ConstructedHintPolicy, ConstructedSelectionPolicy, HintPolicyEntry, PolicyEntry,
    WorkerSelectionPolicyEntry,
};
pub use error::RegistryError;
pub use policy_kind::PolicyKind;
pub use source_location::SourceLocation;

use super::name;
use super::registration::linked_registrations;
use super::{Commitments, HintHost, HintPolicyProvider, WorkerSelectionProvider};
use entry::RegisteredPolicy;
use schemars::Schema;
use std::collections::BTreeMap;
use std::fmt;
use std::panic::Location;

/// The set of policies a router build can configure, keyed by unique name.
#[derive(Clone, Default)]
pub struct PolicyRegistry {
    entries: BTreeMap<String, RegisteredPolicy>,
}

impl fmt::Debug for PolicyRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries()).finish()
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
            registry.insert(RegisteredPolicy::from_registration(registration))?;
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
        self.insert(RegisteredPolicy::manual_hint(
            name,
            provider,
            defaults.into_iter().collect(),
            Location::caller(),
        ))
    }

    /// Registers a worker-selection policy under `name`, built by `provider`.
    #[track_caller]
    pub fn register_worker_selection_policy(
        &mut self,
        name: &str,
        provider: WorkerSelectionProvider,
    ) -> Result<(), RegistryError> {
        self.insert(RegisteredPolicy::manual_worker_selection(
            name,
            provider,
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
        match self.entries.get_mut(name) {
            Some(policy) => {
                policy.entry_mut().describe(description, commitments);
                Ok(())
            }
            None => Err(self.unknown(name, None)),
        }
    }

    /// Gives the policy registered under `name` the JSON Schema of its parameters (for manual
    /// registrations; link-time ones take it from a parameters type that derives `JsonSchema`).
    /// Build one with [`parameters_schema_of`](crate::plugins::parameters_schema_of).
    pub fn set_parameters_schema(
        &mut self,
        name: &str,
        schema: Schema,
    ) -> Result<(), RegistryError> {
        match self.entries.get_mut(name) {
            Some(policy) => {
                policy.set_parameters_schema(schema);
                Ok(())
            }
            None => Err(self.unknown(name, None)),
        }
    }

    /// The JSON Schema of the parameters of the policy of `kind` named `name`, or `None` when
    /// no such policy is registered or its parameters are not described (any parameters then
    /// pass the schema; the policy's own checks still run at startup).
    pub fn describe_parameters(&self, kind: PolicyKind, name: &str) -> Option<Schema> {
        self.entries
            .get(name)
            .filter(|policy| policy.entry().kind == kind)
            .and_then(RegisteredPolicy::parameters_schema)
    }

    fn insert(&mut self, policy: RegisteredPolicy) -> Result<(), RegistryError> {
        let entry = policy.entry();
        name::check_policy_name(&entry.name).map_err(|problem| RegistryError::InvalidName {
            name: entry.name.clone(),
            problem,
            location: entry.location.clone(),
        })?;
        if let Some(first) = self.entries.get(&entry.name) {
            return Err(RegistryError::Duplicate {
                name: entry.name.clone(),
                first: Box::new(first.entry().location.clone()),
                second: Box::new(entry.location.clone()),
            });
        }
        self.entries.insert(entry.name.clone(), policy);
        Ok(())
    }

    /// Every registered policy, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = &PolicyEntry> {
        self.entries.values().map(RegisteredPolicy::entry)
    }

    /// The policy named `name`, of either kind.
    pub fn get(&self, name: &str) -> Option<&PolicyEntry> {
        self.entries.get(name).map(RegisteredPolicy::entry)
    }

    /// Whether no policy is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The hint policy named `name`, or an error listing the linked hint policies.
    pub fn hint_policy(&self, name: &str) -> Result<&HintPolicyEntry, RegistryError> {
        match self.entries.get(name) {
            Some(RegisteredPolicy::Hint(hint)) => Ok(hint),
            other => Err(self.not_found(name, PolicyKind::Hint, other)),
        }
    }

    /// The worker-selection policy named `name`, or an error listing the linked ones.
    pub fn worker_selection_policy(
        &self,
        name: &str,
    ) -> Result<&WorkerSelectionPolicyEntry, RegistryError> {
        match self.entries.get(name) {
            Some(RegisteredPolicy::WorkerSelection(selection)) => Ok(selection),
            other => Err(self.not_found(name, PolicyKind::WorkerSelection, other)),
        }
    }

    /// The hint policies that run by default under `selection_type`, in name order.
    pub fn default_hint_policies<'a>(
        &'a self,
        selection_type: &'a str,
    ) -> impl Iterator<Item = &'a HintPolicyEntry> + 'a {
        self.entries
            .values()
            .filter_map(move |policy| match policy {
                RegisteredPolicy::Hint(hint) if hint.is_default_under(selection_type) => Some(hint),
                _ => None,
            })
    }

    /// The names of the policies of `kind`, sorted.
    pub fn names(&self, kind: PolicyKind) -> impl Iterator<Item = &str> {
        self.entries()
            .filter(move |entry| entry.kind == kind)
            .map(|entry| entry.name.as_str())
    }

    /// Why a lookup of `kind` found `found` (a policy of the other kind, or nothing).
    fn not_found(
        &self,
        name: &str,
        kind: PolicyKind,
        found: Option<&RegisteredPolicy>,
    ) -> RegistryError {
        match found {
            Some(policy) => RegistryError::WrongKind {
                name: name.to_owned(),
                expected: kind,
                actual: policy.entry().kind,
            },
            None => self.unknown(name, Some(kind)),
        }
    }

    /// The error for a name no policy of `kind` (of either kind when `None`) has.
    fn unknown(&self, name: &str, kind: Option<PolicyKind>) -> RegistryError {
        let linked: Vec<String> = self
            .entries()
            .filter(|entry| kind.is_none_or(|kind| entry.kind == kind))
            .map(|entry| entry.name.clone())
            .collect();
        let suggestion = name::closest(name, linked.iter().map(String::as_str)).map(str::to_owned);
        RegistryError::UnknownPolicy {
            kind,
            name: name.to_owned(),
            linked,
            suggestion,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Role;
    use crate::plugins::{
        HintAction, HintContext, HintPolicy, HintPolicyConstructor, Partition, PolicyError,
        PolicyParameters,
    };
    use std::sync::Arc;

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
                .contains(&format!("registry/mod.rs:{}", first.line)),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .contains(&format!("registry/mod.rs:{}", second.line)),
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
        let entry = registry.hint_policy("h").unwrap();
        assert!(
            entry
                .construct_hint(PolicyParameters::empty(), &partition)
                .is_ok()
        );
        // A hint entry has no selection constructor: the lookup of the other kind fails.
        let error = registry.worker_selection_policy("h").unwrap_err();
        assert!(matches!(error, RegistryError::WrongKind { .. }), "{error}");
        assert_eq!(
            error.to_string(),
            "`h` is a hint policy, not a worker-selection policy"
        );
    }

    #[test]
    fn describing_an_unknown_name_lists_policies_of_both_kinds() {
        let mut registry = PolicyRegistry::new();
        registry
            .register_hint_policy("kv_fetch", noop_provider(), [])
            .unwrap();
        let error = registry
            .describe("kv_fecth", "Fetches.", Commitments::NONE)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown policy type `kv_fecth`; did you mean `kv_fetch`?; linked policy types: kv_fetch"
        );
    }
}
