//! The selection API over HTTP: upstream's selection-service routes, their JSON bodies and
//! error answers.
//!
//! **Enters:** HTTP requests on upstream's paths (`/select`, `/select_and_reserve`,
//! `/reservations`, `/workers`, `/loads`, `/overlap_scores`, `/dump`, `/metrics`, …), their
//! bodies read by [`json_body`] (a prompt's `token_ids` through [`token_array`]'s fast path).
//! **Leaves:** calls into [`crate::selection`], and JSON answers with the statuses upstream's
//! service gives. [`loopback_client`] is the small client the tests and benches talk to the
//! service with; [`repolled`] keeps a served connection that wakes itself from waking another
//! worker thread.

pub mod json_body;
pub mod loopback_client;
pub mod repolled;
pub mod token_array;

use crate::error::{ServiceError, json_error, json_ok};
use crate::http::json_body::{JsonBody, PromptBody, Refused, json_response};
use crate::selection::selection_request::{
    OverlapScoresRequest, ReservationRequest, SelectRequest,
};
use crate::selection::selection_service::SelectionService;
use crate::worker_record::{WorkerPatchRequest, WorkerRequest};
use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use serde::Deserialize;
use std::sync::Arc;

/// Largest request body accepted (upstream's limit); larger bodies are answered 413.
pub const REQUEST_BODY_LIMIT_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Deserialize)]
struct FilterQuery {
    model_name: Option<String>,
    routing_group: Option<String>,
}

fn body<T>(payload: Result<JsonBody<T>, Refused>) -> Result<T, Refused> {
    payload.map(|JsonBody(value)| value)
}

fn prompt_body<T>(payload: Result<PromptBody<T>, Refused>) -> Result<T, Refused> {
    payload.map(|PromptBody(value)| value)
}

fn path<T>(value: Result<Path<T>, PathRejection>) -> Result<T, Refused> {
    value
        .map(|Path(value)| value)
        .map_err(|rejection| Refused(rejection.status(), rejection.body_text()))
}

fn answer<T: serde::Serialize>(status: StatusCode, result: Result<T, ServiceError>) -> Response {
    match result {
        Ok(value) => json_response(status, &value),
        Err(error) => error.into_response(),
    }
}

async fn create_worker(
    State(service): State<Arc<SelectionService>>,
    payload: Result<JsonBody<WorkerRequest>, Refused>,
) -> Response {
    match body(payload) {
        Ok(request) => answer(StatusCode::CREATED, service.upsert_worker(request)),
        Err(refused) => refused.into_response(),
    }
}

async fn patch_worker(
    State(service): State<Arc<SelectionService>>,
    worker_id: Result<Path<u64>, PathRejection>,
    payload: Result<JsonBody<WorkerPatchRequest>, Refused>,
) -> Response {
    let worker_id = match path(worker_id) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    match body(payload) {
        Ok(patch) => answer(StatusCode::OK, service.patch_worker(worker_id, patch)),
        Err(refused) => refused.into_response(),
    }
}

async fn delete_worker(
    State(service): State<Arc<SelectionService>>,
    worker_id: Result<Path<u64>, PathRejection>,
) -> Response {
    match path(worker_id) {
        Ok(id) => answer(StatusCode::OK, service.delete_worker(id)),
        Err(refused) => refused.into_response(),
    }
}

async fn list_workers(
    State(service): State<Arc<SelectionService>>,
    Query(filter): Query<FilterQuery>,
) -> Response {
    json_response(
        StatusCode::OK,
        &service.list_workers(
            filter.model_name.as_deref(),
            filter.routing_group.as_deref(),
        ),
    )
}

async fn select(
    State(service): State<Arc<SelectionService>>,
    payload: Result<PromptBody<SelectRequest>, Refused>,
) -> Response {
    match prompt_body(payload) {
        Ok(request) => answer(StatusCode::OK, service.select(request)),
        Err(refused) => refused.into_response(),
    }
}

async fn select_and_reserve(
    State(service): State<Arc<SelectionService>>,
    payload: Result<PromptBody<SelectRequest>, Refused>,
) -> Response {
    match prompt_body(payload) {
        Ok(request) => answer(StatusCode::OK, service.select_and_reserve(request)),
        Err(refused) => refused.into_response(),
    }
}

async fn create_reservation(
    State(service): State<Arc<SelectionService>>,
    payload: Result<PromptBody<ReservationRequest>, Refused>,
) -> Response {
    match prompt_body(payload) {
        Ok(request) => answer(StatusCode::CREATED, service.create_reservation(request)),
        Err(refused) => refused.into_response(),
    }
}

async fn prefill_complete(
    State(service): State<Arc<SelectionService>>,
    Path(selection_id): Path<String>,
) -> Response {
    match service.prefill_complete(&selection_id) {
        Ok(()) => json_ok(StatusCode::OK),
        Err(error) => error.into_response(),
    }
}

/// The body of `POST /reservations/{id}/output_block` (upstream's `OutputBlockRequest`).
#[derive(Debug, Deserialize)]
struct OutputBlockRequest {
    decay_fraction: Option<f64>,
}

async fn add_output_block(
    State(service): State<Arc<SelectionService>>,
    Path(selection_id): Path<String>,
    payload: Result<JsonBody<OutputBlockRequest>, Refused>,
) -> Response {
    match body(payload) {
        Ok(request) => match service.add_output_block(&selection_id, request.decay_fraction) {
            Ok(()) => json_ok(StatusCode::OK),
            Err(error) => error.into_response(),
        },
        Err(refused) => refused.into_response(),
    }
}

async fn delete_reservation(
    State(service): State<Arc<SelectionService>>,
    Path(selection_id): Path<String>,
) -> Response {
    match service.free_reservation(&selection_id) {
        Ok(()) => json_ok(StatusCode::OK),
        Err(error) => error.into_response(),
    }
}

async fn health() -> Response {
    json_ok(StatusCode::OK)
}

async fn ready(State(service): State<Arc<SelectionService>>) -> Response {
    let response = service.ready();
    let status = if response.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &response)
}

async fn loads(
    State(service): State<Arc<SelectionService>>,
    Query(filter): Query<FilterQuery>,
) -> Response {
    json_response(
        StatusCode::OK,
        &service.loads(
            filter.model_name.as_deref(),
            filter.routing_group.as_deref(),
        ),
    )
}

async fn overlap_scores(
    State(service): State<Arc<SelectionService>>,
    payload: Result<PromptBody<OverlapScoresRequest>, Refused>,
) -> Response {
    match prompt_body(payload) {
        Ok(request) => answer(StatusCode::OK, service.overlap_scores(request)),
        Err(refused) => refused.into_response(),
    }
}

async fn potential_loads(
    State(service): State<Arc<SelectionService>>,
    payload: Result<PromptBody<OverlapScoresRequest>, Refused>,
) -> Response {
    match prompt_body(payload) {
        Ok(request) => answer(StatusCode::OK, service.potential_loads(request)),
        Err(refused) => refused.into_response(),
    }
}

async fn dump(State(service): State<Arc<SelectionService>>) -> Response {
    answer(StatusCode::OK, service.dump())
}

async fn shadow(State(service): State<Arc<SelectionService>>) -> Response {
    json_response(StatusCode::OK, &service.shadow_reports())
}

async fn metrics(State(service): State<Arc<SelectionService>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        service.prometheus_text(),
    )
        .into_response()
}

async fn not_found() -> Response {
    json_error(StatusCode::NOT_FOUND, "route not found")
}

async fn method_not_allowed() -> Response {
    json_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
}

/// The service's routes over `service`.
pub fn router(service: Arc<SelectionService>) -> Router {
    Router::new()
        .route("/select", post(select))
        .route("/select_and_reserve", post(select_and_reserve))
        .route("/reservations", post(create_reservation))
        .route(
            "/reservations/{selection_id}/prefill_complete",
            post(prefill_complete),
        )
        .route(
            "/reservations/{selection_id}/output_block",
            post(add_output_block),
        )
        .route("/reservations/{selection_id}", delete(delete_reservation))
        .route("/workers", post(create_worker).get(list_workers))
        .route(
            "/workers/{worker_id}",
            patch(patch_worker).delete(delete_worker),
        )
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/loads", get(loads))
        .route("/potential_loads", post(potential_loads))
        .route("/overlap_scores", post(overlap_scores))
        .route("/dump", get(dump))
        .route("/metrics", get(metrics))
        .route("/shadow", get(shadow))
        .merge(crate::replica::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(REQUEST_BODY_LIMIT_BYTES))
        .with_state(service)
}
