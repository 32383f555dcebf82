//! One registered policy: what catalogs and the CLI list about it, and, for each kind, the
//! typed entry that builds its instances.

use super::{PolicyKind, SourceLocation};
use crate::plugins::registration::{PolicyRegistration, RegisteredBuild};
use crate::plugins::{
    Commitments, HintHost, HintPolicy, HintPolicyProvider, ParameterError, ParametersSchemaFn,
    Partition, PolicyParameters, WorkerSelectionPolicy, WorkerSelectionProvider,
};
use schemars::Schema;
use std::fmt;
use std::ops::Deref;
use std::panic::Location;
use std::sync::Arc;

/// One registered policy: what catalogs and the CLI list. Its instances are built through the
/// entry of its kind, [`HintPolicyEntry`] or [`WorkerSelectionPolicyEntry`], which the
/// registry's typed lookups return.
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

impl PolicyEntry {
    /// Whether this hint policy runs by default in a role whose selection policy is `selection_type`.
    pub fn is_default_under(&self, selection_type: &str) -> bool {
        self.kind == PolicyKind::Hint && self.defaults.iter().any(|host| host.hosts(selection_type))
    }

    fn manual(name: &str, kind: PolicyKind, location: &Location<'_>) -> Self {
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
        }
    }

    /// Replaces the description (and so the summary) and the declared commitments.
    pub(super) fn describe(&mut self, description: &str, commitments: Commitments) {
        self.description = normalise_doc(description);
        self.summary = summary_of(&self.description);
        self.commitments = commitments;
    }
}

/// A hint policy instance built for one role, with what it sends.
#[derive(Clone)]
pub struct ConstructedHintPolicy {
    /// The instance.
    pub instance: Arc<dyn HintPolicy>,
    /// Its effective commitments: the registration's declaration plus the instance's own.
    pub commitments: Commitments,
}

/// A worker-selection policy instance built for one role, with what it commits.
#[derive(Clone)]
pub struct ConstructedSelectionPolicy {
    /// The instance.
    pub instance: Arc<dyn WorkerSelectionPolicy>,
    /// What this instance, as configured, commits the booked worker to.
    pub commitments: Commitments,
}

/// Where a registered policy's parameters schema comes from.
#[derive(Clone)]
pub(super) enum ParametersSchemaSource {
    /// A link-time registration's function (itself `None` for an undescribed type).
    Linked(ParametersSchemaFn),
    /// Given by hand ([`PolicyRegistry::set_parameters_schema`](super::PolicyRegistry::set_parameters_schema)),
    /// or `None` for a manual registration that gave none.
    Given(Option<Schema>),
}

impl ParametersSchemaSource {
    fn schema(&self) -> Option<Schema> {
        match self {
            Self::Linked(schema) => schema(),
            Self::Given(schema) => schema.clone(),
        }
    }
}

/// A registered hint policy: its [`PolicyEntry`] (through `Deref`) and its provider.
#[derive(Clone)]
pub struct HintPolicyEntry {
    entry: PolicyEntry,
    provider: HintPolicyProvider,
    parameters_schema: ParametersSchemaSource,
}

impl HintPolicyEntry {
    /// The JSON Schema of its parameters, or `None` when they are not described.
    pub fn parameters_schema(&self) -> Option<Schema> {
        self.parameters_schema.schema()
    }

    /// Builds the hint-policy instance for `partition` from `parameters` (errors keep the field
    /// path relative to the parameters mapping).
    pub fn construct_hint(
        &self,
        parameters: PolicyParameters,
        partition: &Partition,
    ) -> Result<ConstructedHintPolicy, ParameterError> {
        let policy = (self.provider)(parameters)?.construct(partition)?;
        let commitments = self.entry.commitments | policy.commitments();
        Ok(ConstructedHintPolicy {
            instance: policy,
            commitments,
        })
    }
}

/// A registered worker-selection policy: its [`PolicyEntry`] (through `Deref`) and its
/// provider.
#[derive(Clone)]
pub struct WorkerSelectionPolicyEntry {
    entry: PolicyEntry,
    provider: WorkerSelectionProvider,
    parameters_schema: ParametersSchemaSource,
}

impl WorkerSelectionPolicyEntry {
    /// The JSON Schema of its parameters, or `None` when they are not described.
    pub fn parameters_schema(&self) -> Option<Schema> {
        self.parameters_schema.schema()
    }

    /// Builds the worker-selection instance for `partition` from `parameters`.
    pub fn construct_worker_selection(
        &self,
        parameters: PolicyParameters,
        partition: &Partition,
    ) -> Result<ConstructedSelectionPolicy, ParameterError> {
        let policy = (self.provider)(parameters)?.construct(partition)?;
        let commitments = policy.commitments();
        Ok(ConstructedSelectionPolicy {
            instance: policy,
            commitments,
        })
    }
}

impl Deref for HintPolicyEntry {
    type Target = PolicyEntry;

    fn deref(&self) -> &PolicyEntry {
        &self.entry
    }
}

impl Deref for WorkerSelectionPolicyEntry {
    type Target = PolicyEntry;

    fn deref(&self) -> &PolicyEntry {
        &self.entry
    }
}

impl fmt::Debug for HintPolicyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.entry.fmt(f)
    }
}

impl fmt::Debug for WorkerSelectionPolicyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.entry.fmt(f)
    }
}

/// A registered policy of either kind, as the registry keeps it.
#[derive(Clone)]
pub(super) enum RegisteredPolicy {
    Hint(HintPolicyEntry),
    WorkerSelection(WorkerSelectionPolicyEntry),
}

impl RegisteredPolicy {
    /// What every policy has.
    pub(super) fn entry(&self) -> &PolicyEntry {
        match self {
            Self::Hint(hint) => &hint.entry,
            Self::WorkerSelection(selection) => &selection.entry,
        }
    }

    pub(super) fn entry_mut(&mut self) -> &mut PolicyEntry {
        match self {
            Self::Hint(hint) => &mut hint.entry,
            Self::WorkerSelection(selection) => &mut selection.entry,
        }
    }

    /// The JSON Schema of its parameters, or `None` when they are not described.
    pub(super) fn parameters_schema(&self) -> Option<Schema> {
        match self {
            Self::Hint(hint) => hint.parameters_schema(),
            Self::WorkerSelection(selection) => selection.parameters_schema(),
        }
    }

    /// Replaces the schema of its parameters.
    pub(super) fn set_parameters_schema(&mut self, schema: Schema) {
        let source = ParametersSchemaSource::Given(Some(schema));
        match self {
            Self::Hint(hint) => hint.parameters_schema = source,
            Self::WorkerSelection(selection) => selection.parameters_schema = source,
        }
    }

    /// A hint policy registered by hand.
    pub(super) fn manual_hint(
        name: &str,
        provider: HintPolicyProvider,
        defaults: Vec<HintHost>,
        location: &Location<'_>,
    ) -> Self {
        let mut entry = PolicyEntry::manual(name, PolicyKind::Hint, location);
        entry.defaults = defaults;
        Self::Hint(HintPolicyEntry {
            entry,
            provider,
            parameters_schema: ParametersSchemaSource::Given(None),
        })
    }

    /// A worker-selection policy registered by hand.
    pub(super) fn manual_worker_selection(
        name: &str,
        provider: WorkerSelectionProvider,
        location: &Location<'_>,
    ) -> Self {
        let entry = PolicyEntry::manual(name, PolicyKind::WorkerSelection, location);
        Self::WorkerSelection(WorkerSelectionPolicyEntry {
            entry,
            provider,
            parameters_schema: ParametersSchemaSource::Given(None),
        })
    }

    /// A policy registered by `#[hint_policy]` or `#[worker_selection_policy]`.
    pub(super) fn from_registration(registration: &'static PolicyRegistration) -> Self {
        let kind = match registration.build {
            RegisteredBuild::Hint(_) => PolicyKind::Hint,
            RegisteredBuild::WorkerSelection(_) => PolicyKind::WorkerSelection,
        };
        let description = normalise_doc(registration.doc);
        let entry = PolicyEntry {
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
        };
        let parameters_schema = ParametersSchemaSource::Linked(registration.parameters_schema);
        match registration.build {
            RegisteredBuild::Hint(build) => Self::Hint(HintPolicyEntry {
                entry,
                provider: Arc::new(build),
                parameters_schema,
            }),
            RegisteredBuild::WorkerSelection(build) => {
                Self::WorkerSelection(WorkerSelectionPolicyEntry {
                    entry,
                    provider: Arc::new(build),
                    parameters_schema,
                })
            }
        }
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

    #[test]
    fn summary_is_the_first_paragraph() {
        let description = normalise_doc(" Sends a prefetch\n for the session.\n\n More detail.");
        assert_eq!(
            summary_of(&description),
            "Sends a prefetch for the session."
        );
    }
}
