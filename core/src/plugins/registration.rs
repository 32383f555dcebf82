//! The link-time registration record that `#[hint_policy]` and `#[worker_selection_policy]`
//! submit through `inventory`.

use super::{
    Commitments, HintHost, HintPolicyConstructor, HintPolicyParameters, ParameterError,
    ParametersSchemaFn, WorkerSelectionConstructor, WorkerSelectionParameters,
};

/// A policy registered at link time. The attribute macros build one as a `const` and submit it
/// with `inventory`; [`PolicyRegistry::linked`](super::PolicyRegistry::linked) collects them all
/// and applies the same checks as manual registration.
#[derive(Debug)]
pub struct PolicyRegistration {
    /// The policy type name used in configurations.
    pub name: &'static str,
    /// How to build instances from parameters; also says the kind of policy.
    pub build: RegisteredBuild,
    /// For hint policies: the selection policies it runs under by default.
    pub defaults: &'static [HintHost],
    /// What the policy declares it commits (selection) or sends (hint).
    pub commitments: Commitments,
    /// The doc comment of the policy type; its first paragraph is the summary.
    pub doc: &'static str,
    /// The Rust type of the policy.
    pub type_name: &'static str,
    /// The Rust type of its parameters.
    pub parameters_type: &'static str,
    /// The JSON Schema of its parameters; `None` when the parameters type does not implement
    /// `JsonSchema` (the parameters are then not described).
    pub parameters_schema: ParametersSchemaFn,
    /// The crate that registered it.
    pub crate_name: &'static str,
    /// The source file of the registration.
    pub file: &'static str,
    /// The source line of the registration.
    pub line: u32,
}

/// The provider function of a link-time registration.
#[derive(Clone, Copy)]
pub enum RegisteredBuild {
    /// A hint policy.
    Hint(fn(HintPolicyParameters) -> Result<HintPolicyConstructor, ParameterError>),
    /// A worker-selection policy.
    WorkerSelection(
        fn(WorkerSelectionParameters) -> Result<WorkerSelectionConstructor, ParameterError>,
    ),
}

impl std::fmt::Debug for RegisteredBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Hint(_) => f.write_str("Hint(..)"),
            Self::WorkerSelection(_) => f.write_str("WorkerSelection(..)"),
        }
    }
}

inventory::collect!(PolicyRegistration);

/// Every registration linked into this binary, in link order.
pub fn linked_registrations() -> impl Iterator<Item = &'static PolicyRegistration> {
    inventory::iter::<PolicyRegistration>.into_iter()
}
