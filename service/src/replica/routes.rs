//! The `/replica_sync` routes: upstream's `POST /replica_sync/register_peer` and
//! `/deregister_peer` (body `{"endpoint": "tcp://host:port"}`; 201 added, 200 already there
//! or removed, 404 unknown, 400 invalid, 409 when replica sync is off) and
//! `GET /replica_sync/peers` (the endpoints), plus `POST` / `DELETE /replica_sync/peers` (the
//! same as register / deregister) and `GET /replica_sync/info` (this replica's id, endpoint,
//! readiness and each peer's connection).

use super::hook::BookingSyncView;
use super::peers::PeerError;
use crate::error::{json_error, json_ok};
use crate::http::json_body::{JsonBody, Refused, json_response};
use crate::selection::selection_service::SelectionService;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
struct PeerRequest {
    endpoint: String,
}

fn sync_of(service: &SelectionService) -> Option<BookingSyncView<'_>> {
    service.replica.get().and_then(|hook| hook.sync())
}

fn disabled() -> Response {
    json_error(
        StatusCode::CONFLICT,
        "replica sync is disabled; start the service with --replica-sync-port",
    )
}

fn peer_error(error: PeerError) -> Response {
    json_error(StatusCode::BAD_REQUEST, error)
}

/// A peer change's endpoint and this replica's sync, or the answer refusing the change (a bad
/// body, or replica sync off).
fn peer_change(
    service: &SelectionService,
    payload: Result<JsonBody<PeerRequest>, Refused>,
) -> Result<(String, BookingSyncView<'_>), Box<Response>> {
    let JsonBody(request) = payload.map_err(|refused| Box::new(refused.into_response()))?;
    let sync = sync_of(service).ok_or_else(|| Box::new(disabled()))?;
    Ok((request.endpoint, sync))
}

async fn add_peer(
    State(service): State<Arc<SelectionService>>,
    payload: Result<JsonBody<PeerRequest>, Refused>,
) -> Response {
    let (endpoint, sync) = match peer_change(&service, payload) {
        Ok(change) => change,
        Err(refused) => return *refused,
    };
    match sync.peers.add(&endpoint) {
        Ok(true) => json_ok(StatusCode::CREATED),
        Ok(false) => json_ok(StatusCode::OK),
        Err(error) => peer_error(error),
    }
}

async fn remove_peer(
    State(service): State<Arc<SelectionService>>,
    payload: Result<JsonBody<PeerRequest>, Refused>,
) -> Response {
    let (endpoint, sync) = match peer_change(&service, payload) {
        Ok(change) => change,
        Err(refused) => return *refused,
    };
    match sync.peers.remove(&endpoint) {
        Ok(true) => json_ok(StatusCode::OK),
        Ok(false) => json_error(StatusCode::NOT_FOUND, "peer not found"),
        Err(error) => peer_error(error),
    }
}

async fn list_peers(State(service): State<Arc<SelectionService>>) -> Response {
    let peers = sync_of(&service).map_or_else(Vec::new, |sync| sync.peers.endpoints());
    json_response(StatusCode::OK, &peers)
}

async fn info(State(service): State<Arc<SelectionService>>) -> Response {
    let Some(sync) = sync_of(&service) else {
        return disabled();
    };
    json_response(
        StatusCode::OK,
        &serde_json::json!({
        "replica_id": sync.replica_id,
        "endpoint": sync.endpoint,
        "ready": service.replica.get().is_some_and(|hook| hook.ready()),
        "peers": sync.peers.statuses(),
        }),
    )
}

/// The `/replica_sync` routes over the service's state.
pub fn routes() -> Router<Arc<SelectionService>> {
    Router::new()
        .route("/replica_sync/register_peer", post(add_peer))
        .route("/replica_sync/deregister_peer", post(remove_peer))
        .route(
            "/replica_sync/peers",
            get(list_peers).post(add_peer).delete(remove_peer),
        )
        .route("/replica_sync/info", get(info))
}
