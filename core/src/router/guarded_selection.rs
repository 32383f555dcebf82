//! Stage 5 of the booking: the role's worker-selection policy run on a request view, narrowed
//! to the workers the request allows and isolated from the policy's errors and panics. The
//! live booking ([`kv_booking`](super::kv_booking)) and its shadows
//! ([`shadow_case`](super::shadow_case)) both choose through it.

use super::BookError;
use super::candidate_filter::CandidateFilter;
use super::hint_assembly::panic_message;
use crate::plugins::{RequestView, Selection, WorkerSelectionContext};
use crate::setup::RolePolicies;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Stage 5: the role's worker-selection policy, isolated from its errors and panics,
/// choosing among the candidates the request's `filter` allows (all when none).
pub(super) fn select(
    policies: &RolePolicies,
    view: &RequestView<'_>,
    filter: Option<&CandidateFilter>,
) -> Result<Selection, BookError> {
    let role = view.role;
    let allowed;
    let view = match filter {
        None => *view,
        Some(filter) => {
            allowed = filter.narrow(view.candidates);
            if allowed.is_empty() {
                return Err(BookError::NoAllowedWorkers {
                    role,
                    allowed: filter.worker_ids().to_vec(),
                });
            }
            RequestView {
                candidates: &allowed,
                ..*view
            }
        }
    };
    let context = WorkerSelectionContext::new(view);
    match catch_unwind(AssertUnwindSafe(|| {
        policies.selection.instance.select(&context)
    })) {
        Ok(Ok(selection)) => match filter {
            Some(filter) if !filter.allows(selection.worker) => Err(BookError::WorkerNotAllowed {
                worker: selection.worker,
                allowed: filter.worker_ids().to_vec(),
            }),
            _ => Ok(selection),
        },
        Ok(Err(error)) => {
            tracing::warn!(%role, policy_type = %policies.selection_type, %error, "worker-selection policy failed");
            Err(BookError::SelectionFailed {
                role,
                policy: policies.selection_type.clone(),
                message: error.to_string(),
            })
        }
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            tracing::error!(%role, policy_type = %policies.selection_type, panic = %message, "worker-selection policy panicked");
            Err(BookError::SelectionPanicked {
                role,
                policy: policies.selection_type.clone(),
                message,
            })
        }
    }
}
