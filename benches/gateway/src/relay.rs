//! `gateway-bench relay`: the floor of a hop through our gateway's HTTP stack.
//!
//! The same serving loop as `kv-router serve` (hyper's HTTP/1 server under an axum router, each
//! connection a [`Repolled`] task with `TCP_NODELAY`), the same worker connections
//! ([`WorkerConnections`], [`worker_headers`]) and the same body limit, but none of the
//! gateway's per-request work: no JSON parse, no tokenizing, no booking, no hint, no metrics,
//! no span. Each request's body is read whole (as the gateway must, to tokenize it) and sent to
//! the next engine in round robin; the answer is relayed as it arrives.
//!
//! Enters: any `POST` on 127.0.0.1:`port`. Leaves: the same request to an engine, and its
//! answer. So `relay` minus `nginx` is what hyper and axum cost over nginx's hop, and
//! `ours-predicted` minus `relay` is what the gateway's own work costs a request.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kv_router_service::gateway::worker_connections::{WorkerConnections, WorkerRequest};
use kv_router_service::gateway::worker_try::{
    answer_header_relayed, worker_client, worker_headers,
};
use kv_router_service::http::REQUEST_BODY_LIMIT_BYTES;
use kv_router_service::http::repolled::Repolled;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The engines and the connections to them.
struct Relay {
    engines: Vec<String>,
    next: AtomicUsize,
    client: WorkerConnections,
}

/// Serves the relay on 127.0.0.1:`port` in front of `engines` (their base URLs) until the
/// process is killed.
pub async fn serve(port: u16, engines: Vec<String>) -> Result<(), String> {
    if engines.is_empty() {
        return Err("the relay needs at least one --engine".to_owned());
    }
    let relay = Arc::new(Relay {
        engines: engines
            .iter()
            .map(|url| url.trim_end_matches('/').to_owned())
            .collect(),
        next: AtomicUsize::new(0),
        client: worker_client(Duration::from_secs(5)),
    });
    let routes = Router::new()
        .route("/v1/completions", post(forward))
        .route("/v1/chat/completions", post(forward))
        .layer(DefaultBodyLimit::max(REQUEST_BODY_LIMIT_BYTES))
        .with_state(relay);
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("binding 127.0.0.1:{port}: {e}"))?;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(Repolled::new(serve_connection(stream, routes.clone())));
            }
            // Out of descriptors, or a connection gone before it was accepted: try again
            // after a pause.
            Err(error) => {
                eprintln!("relay: accepting on 127.0.0.1:{port}: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves one client connection until it closes, as `kv-router serve` does.
async fn serve_connection(stream: TcpStream, routes: Router) {
    let _ = stream.set_nodelay(true);
    let service = TowerToHyperService::new(routes);
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Sends the request to the next engine and relays its answer.
async fn forward(
    State(relay): State<Arc<Relay>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = relay.next.fetch_add(1, Ordering::Relaxed) % relay.engines.len();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(url) = format!("{}{path}", relay.engines[at]).parse::<Uri>() else {
        return (StatusCode::BAD_GATEWAY, "bad engine URL").into_response();
    };
    let request = WorkerRequest {
        method,
        url,
        headers: worker_headers(&headers, None),
        body,
    };
    match relay.client.send(request).await {
        Ok((head, answer)) => {
            let mut response = Response::new(Body::new(answer));
            *response.status_mut() = head.status;
            for (name, value) in &head.headers {
                if answer_header_relayed(name) {
                    response.headers_mut().append(name.clone(), value.clone());
                }
            }
            response
        }
        Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    }
}
