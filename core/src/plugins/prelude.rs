//! Everything a plugin author needs, in one import:
//!
//! ```
//! use dynamo_kv_router::plugins::prelude::*;
//! ```

pub use super::{
    BlockLookup, Candidate, Commitments, HintAction, HintContext, HintHost, HintPolicy,
    HintPolicyConstructor, HintPolicyParameters, HintPolicyProvider, KvCopy, ParameterError,
    Partition, PolicyError, PolicyRegistry, RegistryError, RequestView, Selection, SessionContext,
    WorkerLoad, WorkerSelectionConstructor, WorkerSelectionContext, WorkerSelectionParameters,
    WorkerSelectionPolicy, WorkerSelectionProvider,
};
pub use crate::identity::{Role, WorkerId};
pub use dynamo_kv_router_macros::{hint_policy, worker_selection_policy};
pub use schemars::JsonSchema;
pub use serde::Deserialize;
pub use std::sync::Arc;
