//! The service's errors and their HTTP answers: a status and `{"error": "..."}`.

use crate::worker_record::PartitionKey;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dynamo_kv_router::router::BookError;

/// Why a request failed. Each kind maps to the status upstream's selection service answers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The request is well-formed JSON but asks for something invalid (400).
    #[error("{0}")]
    BadRequest(String),
    /// Nothing can serve the request yet, e.g. no schedulable worker (503).
    #[error("{0}")]
    NotReady(String),
    /// The worker, reservation or pending selection does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// The request collides with existing state, e.g. a duplicate selection id (409).
    #[error("{0}")]
    Conflict(String),
    /// The workers that may serve the request are all over capacity (429).
    #[error("{0}")]
    Overloaded(String),
    /// A failure inside the router (500).
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    /// The HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            ServiceError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServiceError::NotReady(_) => StatusCode::SERVICE_UNAVAILABLE,
            ServiceError::NotFound(_) => StatusCode::NOT_FOUND,
            ServiceError::Conflict(_) => StatusCode::CONFLICT,
            ServiceError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error answer: `status` with `{"error": message}`.
pub fn json_error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    crate::http::json_body::json_response(
        status,
        &serde_json::json!({ "error": message.to_string() }),
    )
}

/// The success answer of lifecycle calls: `status` with `{"status": "ok"}`.
pub fn json_ok(status: StatusCode) -> Response {
    crate::http::json_body::json_response(status, &serde_json::json!({ "status": "ok" }))
}

impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        json_error(self.status(), self)
    }
}

/// The HTTP meaning of a booking failure, as upstream's scheduler errors map: no worker (or
/// none of the allowed ones) is 503, a worker the request may not use is 400.
pub(crate) fn book_error(error: BookError, key: &PartitionKey) -> ServiceError {
    match error {
        BookError::NoRoleConfig { .. } | BookError::WorkerNotAllowed { .. } => {
            ServiceError::BadRequest(error.to_string())
        }
        BookError::NoWorkers { role } => {
            ServiceError::NotReady(format!("no schedulable `{role}` workers for {key}"))
        }
        BookError::NoAllowedWorkers { role, allowed } => ServiceError::NotReady(format!(
            "no endpoints available to route work: no schedulable `{role}` worker of {key} is \
             in allowed_worker_ids {allowed:?}"
        )),
        BookError::NotRegistered { .. } => ServiceError::NotFound(error.to_string()),
        BookError::SelectionFailed { .. }
        | BookError::SelectionPanicked { .. }
        | BookError::NotACandidate { .. } => ServiceError::Internal(error.to_string()),
    }
}
