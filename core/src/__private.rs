//! Items used by the code that `#[hint_policy]` and `#[worker_selection_policy]` generate.
//! Not a public API: names here may change in any release.

pub use inventory;
pub use serde;
pub use std::borrow::Cow;

pub use crate::plugins::registration::{PolicyRegistration, RegisteredBuild};
pub use crate::plugins::{
    Commitments, HintHost, HintPolicy, HintPolicyConstructor, HintPolicyParameters, ParameterError,
    WorkerSelectionConstructor, WorkerSelectionParameters, WorkerSelectionPolicy,
};

use serde::de::DeserializeOwned;
use std::fmt::Display;

/// Provider for a hint policy whose struct is its own parameters type.
pub fn build_hint_from_self<T>(
    parameters: HintPolicyParameters,
) -> Result<HintPolicyConstructor, ParameterError>
where
    T: HintPolicy + DeserializeOwned + 'static,
{
    let policy: T = parameters.deserialize()?;
    Ok(HintPolicyConstructor::shared(policy))
}

/// Provider for a hint policy built from a separate parameters type `P` through `TryFrom<P>`.
pub fn build_hint_via<T, P>(
    parameters: HintPolicyParameters,
) -> Result<HintPolicyConstructor, ParameterError>
where
    T: HintPolicy + TryFrom<P> + 'static,
    <T as TryFrom<P>>::Error: Display,
    P: DeserializeOwned,
{
    let config: P = parameters.deserialize()?;
    let policy = T::try_from(config).map_err(ParameterError::rejected)?;
    Ok(HintPolicyConstructor::shared(policy))
}

/// Provider for a worker-selection policy whose struct is its own parameters type.
pub fn build_selection_from_self<T>(
    parameters: WorkerSelectionParameters,
) -> Result<WorkerSelectionConstructor, ParameterError>
where
    T: WorkerSelectionPolicy + DeserializeOwned + 'static,
{
    let policy: T = parameters.deserialize()?;
    Ok(WorkerSelectionConstructor::shared(policy))
}

/// Provider for a worker-selection policy built from a separate parameters type `P`.
pub fn build_selection_via<T, P>(
    parameters: WorkerSelectionParameters,
) -> Result<WorkerSelectionConstructor, ParameterError>
where
    T: WorkerSelectionPolicy + TryFrom<P> + 'static,
    <T as TryFrom<P>>::Error: Display,
    P: DeserializeOwned,
{
    let config: P = parameters.deserialize()?;
    let policy = T::try_from(config).map_err(ParameterError::rejected)?;
    Ok(WorkerSelectionConstructor::shared(policy))
}
