//! The hint-policy trait and its provider.

use super::{
    Commitments, HintAction, HintContext, HintPolicyConstructor, HintPolicyParameters,
    ParameterError, PolicyError,
};
use std::sync::Arc;

/// A policy that adds engine-directed KV actions to the worker the router booked.
///
/// The router calls [`build_hints`](HintPolicy::build_hints) once per booking on a worker that
/// advertises `router_hint`. A policy never changes the choice of worker; it only returns
/// actions for it. An error or a panic drops only this policy's actions.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a hint policy: it does not implement `HintPolicy`",
    label = "`HintPolicy` is not implemented for `{Self}`",
    note = "write `impl HintPolicy for {Self} {{ fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {{ ... }} }}`"
)]
pub trait HintPolicy: Send + Sync {
    /// The actions for the booked worker, in the engine's format (without `action_id`).
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError>;

    /// What this instance carries out beyond plain actions. A policy that sends committed KV
    /// copies returns [`Commitments::KV_COPY`] (or declares it with `#[hint_policy(commits = KV_COPY)]`).
    fn commitments(&self) -> Commitments {
        Commitments::NONE
    }
}

/// Turns a role's `parameters` into a constructor of hint-policy instances. Runs at startup,
/// once per role entry, never per request.
pub type HintPolicyProvider = Arc<
    dyn Fn(HintPolicyParameters) -> Result<HintPolicyConstructor, ParameterError> + Send + Sync,
>;
