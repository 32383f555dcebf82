//! Running the service: bind, serve until shut down.

use crate::admin::AdminRoutes;
use crate::gateway::Gateway;
use crate::http::repolled::Repolled;
use crate::http::router;
use crate::selection::selection_service::SelectionService;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How long to wait before accepting again after the listener failed for a reason other than
/// one connection going wrong (out of file descriptors, say).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Where and how to serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// The address to listen on (default `127.0.0.1`).
    pub host: String,
    /// The port (default 8092; 0 picks a free one).
    pub port: u16,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_owned(),
            port: 8092,
        }
    }
}

/// A bound, not yet serving, HTTP listener for `service`.
pub struct BoundService {
    listener: TcpListener,
    service: Arc<SelectionService>,
    gateway: Option<Arc<Gateway>>,
    admin: Option<AdminRoutes>,
}

impl BoundService {
    /// Binds `options.host:options.port`.
    pub async fn bind(
        service: Arc<SelectionService>,
        options: &ServeOptions,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind((options.host.as_str(), options.port)).await?;
        Ok(Self {
            listener,
            service,
            gateway: None,
            admin: None,
        })
    }

    /// Serves `gateway`'s OpenAI routes beside the selection API.
    pub fn with_gateway(mut self, gateway: Arc<Gateway>) -> Self {
        self.gateway = Some(gateway);
        self
    }

    /// Serves the admin routes (`/admin/config`) beside the selection API.
    pub fn with_admin(mut self, admin: AdminRoutes) -> Self {
        self.admin = Some(admin);
        self
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets the requests in flight finish. A failed
    /// accept is logged and retried (after a pause unless only that connection went wrong), so
    /// serving ends only at the shutdown, with `Ok`.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let mut routes = router(self.service);
        if let Some(gateway) = self.gateway {
            routes = routes.merge(crate::gateway::routes(gateway));
        }
        if let Some(admin) = self.admin {
            routes = routes.merge(admin.routes());
        }
        serve_connections(self.listener, routes, shutdown).await;
        Ok(())
    }
}

/// Accepts connections and serves `routes` on each (HTTP/1.1, as `axum::serve` would), each
/// connection a task of its own that is polled again in place when it wakes itself
/// ([`Repolled`]). When `shutdown` completes it stops accepting, lets every connection finish
/// the request it is serving, and returns once they all have.
async fn serve_connections(
    listener: TcpListener,
    routes: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // `stop` tells connections to finish; `open` counts them (one receiver each).
    let (stop, stopping) = watch::channel(false);
    let (open, opened) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = serve_connection(stream, routes.clone(), stopping.clone());
        let counted = opened.clone();
        tokio::spawn(Repolled::new(async move {
            connection.await;
            drop(counted);
        }));
    }
    drop(listener);
    drop(opened);
    let _ = stop.send(true);
    open.closed().await;
}

/// Serves one connection until it closes, or until `stopping` turns true and the request in
/// flight (if any) is answered.
async fn serve_connection(
    stream: TcpStream,
    routes: axum::Router,
    mut stopping: watch::Receiver<bool>,
) {
    // Small writes (an SSE chunk per token) go out at once, not after Nagle's wait.
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "could not set TCP_NODELAY on a client connection");
    }
    let service = TowerToHyperService::new(routes);
    let mut connection =
        pin!(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop_requested(&mut stopping) => {
            // Serve out the request in flight, then stop.
            connection.as_mut().graceful_shutdown();
            connection.as_mut().await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "a client connection ended with an error");
    }
}

/// Completes once the server asks its connections to stop (or is gone).
async fn stop_requested(stopping: &mut watch::Receiver<bool>) {
    // `Err`: the server dropped its sender, which means stopping too.
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// An accept that failed: a connection that went away before it was accepted is skipped; any
/// other error (out of file descriptors, say) is logged and accepting resumes after a pause.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, ?ACCEPT_BACKOFF, "accepting a connection failed; retrying after a pause");
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

/// Serves `service` on `options` until Ctrl-C.
pub async fn serve(service: Arc<SelectionService>, options: &ServeOptions) -> std::io::Result<()> {
    let bound = BoundService::bind(service, options).await?;
    tracing::info!(address = %bound.local_addr()?, "kv-router service listening");
    bound
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::oneshot;

    /// Sends a `GET path` on `stream` and reads the answer until the connection closes or its
    /// body (given with a content length) is complete.
    async fn get_on(stream: &mut TcpStream, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("writes");
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            let read = stream.read(&mut buffer).await.expect("reads");
            answer.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&answer);
            if read == 0 || text.ends_with("done") || text.ends_with("fast") {
                return text.into_owned();
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_stops_accepting_finishes_requests_in_flight_and_closes_idle_connections() {
        let routes = axum::Router::new()
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    "done"
                }),
            )
            .route("/fast", get(|| async { "fast" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve_connections(listener, routes, async move {
            let _ = stopped.await;
        }));

        let mut idle = TcpStream::connect(address).await.expect("connects");
        assert!(get_on(&mut idle, "/fast").await.ends_with("fast"));
        let mut busy = TcpStream::connect(address).await.expect("connects");
        let slow = tokio::spawn(async move { get_on(&mut busy, "/slow").await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).expect("the server listens for its shutdown");

        let answer = tokio::time::timeout(Duration::from_secs(5), slow)
            .await
            .expect("the request in flight is answered")
            .expect("the client task ends");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("done"), "{answer}");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server returns once its connections are done")
            .expect("the server task ends");
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest))
            .await
            .expect("the idle connection is closed");
        assert_eq!(
            read.expect("reads"),
            0,
            "nothing more on the idle connection"
        );
        assert!(
            TcpStream::connect(address).await.is_err(),
            "no connection is accepted after the shutdown"
        );
    }
}
