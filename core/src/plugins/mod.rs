//! The plugin API: hint policies, worker-selection policies, their parameters and commitments,
//! and the registry that holds every linked policy.
//!
//! Plugin authors import [`prelude`]; the rest of the modules are the pieces it re-exports.

pub mod candidate;
pub mod commitments;
pub mod constructor;
pub mod hint;
pub mod hint_action;
pub mod hint_context;
pub mod hint_host;
pub mod kv_copy;
pub mod kv_fetch_payload;
pub mod name;
pub mod parameters;
pub mod parameters_schema;
pub mod policy_error;
pub mod prelude;
pub mod registration;
pub mod registry;
pub mod request_view;
pub mod selection;
pub mod session;

pub use candidate::{Candidate, WorkerLoad};
pub use commitments::Commitments;
pub use constructor::{
    HintPolicyConstructor, Partition, PolicyConstructor, WorkerSelectionConstructor,
};
pub use hint::{HintPolicy, HintPolicyProvider};
pub use hint_action::HintAction;
pub use hint_context::HintContext;
pub use hint_host::HintHost;
pub use kv_copy::KvCopy;
pub use kv_fetch_payload::{KV_FETCH_ACTION_TYPE, KV_FETCH_ACTION_VERSION, KvFetchPayload};
pub use parameters::{
    HintPolicyParameters, ParameterError, ParameterErrorKind, PolicyParameters,
    WorkerSelectionParameters,
};
pub use parameters_schema::{ParametersSchemaFn, parameters_schema_of};
pub use policy_error::PolicyError;
pub use registration::PolicyRegistration;
pub use registry::{
    HintPolicyEntry, PolicyEntry, PolicyKind, PolicyRegistry, RegistryError, SourceLocation,
    WorkerSelectionPolicyEntry,
};
pub use request_view::{BlockLookup, RequestView};
pub use selection::{
    Selection, WorkerSelectionContext, WorkerSelectionPolicy, WorkerSelectionProvider,
};
pub use session::SessionContext;
