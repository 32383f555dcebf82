//! The result of booking a request: the worker, the hint for it, and what the booking did.

use crate::metrics::BookErrorReason;
use crate::plugins::KvCopy;
use crate::router::worker::{Role, WorkerId};
use crate::wire::KvHint;
use std::time::Duration;

/// A request booked on a worker, with the hint to send it (if any).
#[derive(Clone, Debug, PartialEq)]
pub struct Booking {
    /// The request id.
    pub request_id: String,
    /// The role booked.
    pub role: Role,
    /// The booked worker.
    pub worker: WorkerId,
    /// The one hint for the booked worker; `None` when no policy returned an action or the
    /// worker does not advertise `router_hint`.
    pub hint: Option<KvHint>,
    /// The KV copy the selection policy committed the worker to, if any.
    pub committed_kv_copy: Option<KvCopy>,
    /// What the booking did.
    pub stats: BookingStats,
}

/// Per-booking figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BookingStats {
    /// Full blocks in the prompt.
    pub blocks: usize,
    /// Length, in blocks, of the prompt prefix the booked worker caches.
    pub cached_blocks: usize,
    /// Hint policies run (0 when the worker does not advertise `router_hint`).
    pub hint_policies_run: usize,
    /// Actions in the hint.
    pub actions: usize,
    /// Actions dropped by the cap of [`MAX_HINT_ACTIONS`](crate::router::MAX_HINT_ACTIONS).
    pub actions_dropped: usize,
    /// Hint policies that returned an error or panicked.
    pub policy_failures: usize,
    /// Time spent booking, hashing included.
    pub latency: Duration,
    /// The [`Router::policy_version`](crate::router::Router::policy_version) of the policies
    /// that booked it.
    pub policy_version: u64,
}

/// Why a request could not be booked. Nothing was reserved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BookError {
    /// The configuration has no `worker_selection.<role>` entry.
    #[error(
        "no worker_selection entry for role `{role}`; add `worker_selection.{role}` to the configuration"
    )]
    NoRoleConfig {
        /// The role asked for.
        role: Role,
    },
    /// No registered worker serves the role.
    #[error("no registered worker serves role `{role}`; register a `{role}` worker first")]
    NoWorkers {
        /// The role asked for.
        role: Role,
    },
    /// The selection policy returned an error.
    #[error("worker-selection policy `{policy}` of role `{role}` failed: {message}")]
    SelectionFailed {
        /// The role.
        role: Role,
        /// The selection policy type.
        policy: String,
        /// Its error.
        message: String,
    },
    /// The selection policy panicked.
    #[error("worker-selection policy `{policy}` of role `{role}` panicked: {message}")]
    SelectionPanicked {
        /// The role.
        role: Role,
        /// The selection policy type.
        policy: String,
        /// The panic message.
        message: String,
    },
    /// The selection policy chose a worker that is not one of the role's registered workers.
    #[error(
        "worker-selection policy `{policy}` of role `{role}` chose worker {worker}, which is not a registered `{role}` worker; a policy must choose one of its candidates"
    )]
    NotACandidate {
        /// The role.
        role: Role,
        /// The selection policy type.
        policy: String,
        /// The worker it chose.
        worker: WorkerId,
    },
    /// No registered worker of the role is in the request's allowed workers.
    #[error(
        "no registered `{role}` worker is in the request's allowed workers {allowed:?}; allow one of the role's workers"
    )]
    NoAllowedWorkers {
        /// The role asked for.
        role: Role,
        /// The allowed worker ids.
        allowed: Vec<u64>,
    },
    /// The caller (or the selection policy) named a worker outside the request's allowed
    /// workers.
    #[error("worker {worker} is not in the request's allowed workers {allowed:?}")]
    WorkerNotAllowed {
        /// The worker named.
        worker: WorkerId,
        /// The allowed worker ids.
        allowed: Vec<u64>,
    },
    /// The caller named a worker that is not a registered worker of the request's role.
    #[error(
        "worker {worker} is not a registered `{role}` worker; register it (or ask for its role) first"
    )]
    NotRegistered {
        /// The role asked for.
        role: Role,
        /// The worker named.
        worker: WorkerId,
    },
}

impl BookError {
    /// The error's label in metrics.
    pub const fn reason(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The error's reason, which has its own metrics counter.
    pub const fn kind(&self) -> BookErrorReason {
        match self {
            BookError::NoRoleConfig { .. } => BookErrorReason::NoRoleConfig,
            BookError::NoWorkers { .. } => BookErrorReason::NoWorkers,
            BookError::SelectionFailed { .. } => BookErrorReason::SelectionFailed,
            BookError::SelectionPanicked { .. } => BookErrorReason::SelectionPanicked,
            BookError::NotACandidate { .. } => BookErrorReason::NotACandidate,
            BookError::NotRegistered { .. } => BookErrorReason::NotRegistered,
            BookError::NoAllowedWorkers { .. } => BookErrorReason::NoAllowedWorkers,
            BookError::WorkerNotAllowed { .. } => BookErrorReason::WorkerNotAllowed,
        }
    }
}
