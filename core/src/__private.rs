//! Items used by the code that `#[hint_policy]` and `#[worker_selection_policy]` generate.
//! Not a public API: names here may change in any release.

pub use inventory;
pub use schemars;
pub use serde;
pub use std::borrow::Cow;

pub use crate::plugins::registration::{PolicyRegistration, RegisteredBuild};
pub use crate::plugins::{
    Commitments, HintHost, HintPolicy, HintPolicyConstructor, HintPolicyParameters, ParameterError,
    WorkerSelectionConstructor, WorkerSelectionParameters, WorkerSelectionPolicy,
};

use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use std::fmt::Display;
use std::marker::PhantomData;

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

/// Asks whether the parameters type `T` describes itself, by autoref specialization: the
/// generated code calls `(&ParametersProbe::<T>::NEW).parameters_schema()` with both traits in
/// scope, and method lookup takes [`DescribedParameters`] (on `&ParametersProbe<T>`) when
/// `T: JsonSchema`, else [`UndescribedParameters`] (on `ParametersProbe<T>`, one deref away).
pub struct ParametersProbe<T: ?Sized>(PhantomData<fn() -> Box<T>>);

impl<T: ?Sized> ParametersProbe<T> {
    /// The probe.
    pub const NEW: Self = Self(PhantomData);
}

impl<T: ?Sized> Clone for ParametersProbe<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for ParametersProbe<T> {}

/// The probe's answer for a parameters type that implements [`JsonSchema`]: its schema.
pub trait DescribedParameters {
    /// The parameters' schema.
    fn parameters_schema(self) -> Option<Schema>;
}

impl<T: JsonSchema> DescribedParameters for &ParametersProbe<T> {
    fn parameters_schema(self) -> Option<Schema> {
        Some(crate::plugins::parameters_schema_of::<T>())
    }
}

/// The probe's answer for any other parameters type: not described.
pub trait UndescribedParameters {
    /// No schema.
    fn parameters_schema(self) -> Option<Schema>;
}

impl<T: ?Sized> UndescribedParameters for ParametersProbe<T> {
    fn parameters_schema(self) -> Option<Schema> {
        None
    }
}
