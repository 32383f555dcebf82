//! Running the service: bind, serve until shut down.

use crate::admin::AdminRoutes;
use crate::gateway::Gateway;
use crate::http::router;
use crate::selection::selection_service::SelectionService;
use axum::serve::ListenerExt as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

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

    /// Serves until `shutdown` completes.
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
        // Small writes (an SSE chunk per token) go out at once, not after Nagle's wait.
        let listener = self.listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, routes)
            .with_graceful_shutdown(shutdown)
            .await
    }
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
