//! The worker-selection policy trait, its context, its result and its provider.

use super::{
    Candidate, Commitments, KvCopy, ParameterError, PolicyError, RequestView,
    WorkerSelectionConstructor, WorkerSelectionParameters,
};
use crate::identity::WorkerId;
use std::sync::Arc;

/// What a worker-selection policy sees of one booking.
#[derive(Clone, Copy, Debug)]
pub struct WorkerSelectionContext<'a> {
    request: RequestView<'a>,
}

impl<'a> WorkerSelectionContext<'a> {
    /// The context for choosing a worker for `request`.
    pub fn new(request: RequestView<'a>) -> Self {
        Self { request }
    }

    /// The request being booked.
    pub fn request(&self) -> &RequestView<'a> {
        &self.request
    }

    /// The role's workers, each with its cached prefix length, load and capabilities.
    pub fn candidates(&self) -> &'a [Candidate] {
        self.request.candidates
    }
}

/// The worker a selection policy chose, and the KV copy it committed that worker to, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The chosen worker; it must be one of the candidates.
    pub worker: WorkerId,
    /// The KV copy the chosen worker is committed to, if the choice relied on one.
    pub kv_copy: Option<KvCopy>,
}

impl Selection {
    /// A plain choice of `worker` with no commitment.
    pub fn worker(worker: WorkerId) -> Self {
        Self {
            worker,
            kv_copy: None,
        }
    }

    /// A choice of `worker` that commits it to `copy`.
    pub fn with_kv_copy(worker: WorkerId, copy: KvCopy) -> Self {
        Self {
            worker,
            kv_copy: Some(copy),
        }
    }
}

/// A policy that chooses which worker of a role serves a request.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a worker-selection policy: it does not implement `WorkerSelectionPolicy`",
    label = "`WorkerSelectionPolicy` is not implemented for `{Self}`",
    note = "write `impl WorkerSelectionPolicy for {Self} {{ fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {{ ... }} }}`"
)]
pub trait WorkerSelectionPolicy: Send + Sync {
    /// Chooses one of the context's candidates (there is always at least one).
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError>;

    /// What this instance, as configured, may commit the booked worker to. A policy that
    /// returns [`Commitments::KV_COPY`] requires its role to run exactly one hint policy that
    /// sends KV copies.
    fn commitments(&self) -> Commitments {
        Commitments::NONE
    }
}

/// Turns a role's `parameters` into a constructor of selection-policy instances.
pub type WorkerSelectionProvider = Arc<
    dyn Fn(WorkerSelectionParameters) -> Result<WorkerSelectionConstructor, ParameterError>
        + Send
        + Sync,
>;
