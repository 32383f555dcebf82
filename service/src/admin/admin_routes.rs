//! `GET` and `POST /admin/config`, behind `Authorization: Bearer <token>`. Without a token
//! the routes are off: they answer 404 saying how to turn them on.

use super::admin_token::{ADMIN_TOKEN_ENV, AdminToken};
use super::config_reloader::{ConfigReloader, ReloadError, RunningConfig};
use crate::error::json_error;
use crate::http::json_body::json_response;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use dynamo_kv_router::config::MAX_CONFIG_BYTES;
use dynamo_kv_router::router::{RolePolicies, RouterSetup};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The admin routes of one service: its reloader and the token callers must present.
#[derive(Clone)]
pub struct AdminRoutes {
    reloader: Arc<ConfigReloader>,
    token: Option<AdminToken>,
}

impl AdminRoutes {
    /// Routes reloading through `reloader`, open to holders of `token`; `None` turns them off.
    pub fn new(reloader: Arc<ConfigReloader>, token: Option<AdminToken>) -> Self {
        Self { reloader, token }
    }

    /// Whether the routes answer (a token is set).
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// The axum routes.
    pub fn routes(self) -> Router {
        Router::new()
            .route("/admin/config", get(show_config).post(reload_config))
            // One byte over the limit still reaches the reloader, which names the limit.
            .layer(DefaultBodyLimit::max(MAX_CONFIG_BYTES + 1))
            .with_state(self)
    }

    /// `Err` with the answer to send unless the request carries the token.
    #[allow(clippy::result_large_err)]
    fn authorize(&self, headers: &HeaderMap) -> Result<(), Response> {
        let Some(token) = &self.token else {
            return Err(json_error(
                StatusCode::NOT_FOUND,
                format!(
                    "the admin routes are off; start kv-router serve with --admin-token-file FILE or with {ADMIN_TOKEN_ENV} set to turn them on"
                ),
            ));
        };
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(bearer_credentials);
        match presented {
            Some(presented) if token.matches(presented.trim()) => Ok(()),
            Some(_) => Err(unauthorized(
                "the bearer token does not match the admin token",
            )),
            None => Err(unauthorized(
                "send `Authorization: Bearer <token>` with the admin token",
            )),
        }
    }
}

/// The credentials of an `Authorization` value of the `Bearer` scheme (any case).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(credentials)
}

fn unauthorized(message: &str) -> Response {
    let mut response = json_error(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"kv-router admin\""),
    );
    response
}

/// The body of `GET /admin/config`.
#[derive(Serialize)]
struct ConfigView {
    #[serde(flatten)]
    running: RunningConfig,
    /// The routing mode the policies run in.
    router_mode: String,
    /// Each configured role's policies.
    roles: BTreeMap<String, RoleView>,
}

#[derive(Serialize)]
struct RoleView {
    selection: String,
    hints: Vec<String>,
    /// The role's shadows (absent when it has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    shadow: Vec<ShadowView>,
}

#[derive(Serialize)]
struct ShadowView {
    name: String,
    selection: String,
    hints: Vec<String>,
}

fn hint_labels(policies: &RolePolicies) -> Vec<String> {
    policies
        .hints
        .iter()
        .map(|hint| hint.label().to_owned())
        .collect()
}

fn config_view(running: RunningConfig, setup: &RouterSetup) -> ConfigView {
    ConfigView {
        running,
        router_mode: setup.router_mode.to_string(),
        roles: setup
            .roles
            .iter()
            .map(|(role, policies)| {
                let view = RoleView {
                    selection: policies.selection_type.clone(),
                    hints: hint_labels(policies),
                    shadow: policies
                        .shadows
                        .iter()
                        .map(|shadow| ShadowView {
                            name: shadow.name.clone(),
                            selection: shadow.policies.selection_type.clone(),
                            hints: hint_labels(&shadow.policies),
                        })
                        .collect(),
                };
                (role.to_string(), view)
            })
            .collect(),
    }
}

async fn show_config(State(admin): State<AdminRoutes>, headers: HeaderMap) -> Response {
    if let Err(refused) = admin.authorize(&headers) {
        return refused;
    }
    let setup = admin.reloader.running_setup();
    json_response(
        StatusCode::OK,
        &config_view(admin.reloader.running(), &setup),
    )
}

/// An empty body re-reads the `--config` file; any other body is the new configuration.
async fn reload_config(
    State(admin): State<AdminRoutes>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = admin.authorize(&headers) {
        return refused;
    }
    let reloader = Arc::clone(&admin.reloader);
    // Building policies may read files and take a while: off the async workers.
    let result = tokio::task::spawn_blocking(move || {
        if body.iter().all(u8::is_ascii_whitespace) {
            reloader.reload_file(super::ReloadTrigger::Request)
        } else {
            reloader.reload_text(&body)
        }
    })
    .await;
    match result {
        Ok(Ok(outcome)) => json_response(StatusCode::OK, &outcome),
        Ok(Err(error)) => reload_error(&admin, &error),
        Err(join) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the reload stopped: {join}; the running configuration was kept"),
        ),
    }
}

/// The answer to a rejected reload: its reason, and the version still running.
fn reload_error(admin: &AdminRoutes, error: &ReloadError) -> Response {
    let status = match error {
        ReloadError::NoFile => StatusCode::BAD_REQUEST,
        ReloadError::Unreadable(_) | ReloadError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
        ReloadError::Refused(_) => StatusCode::CONFLICT,
    };
    json_response(
        status,
        &serde_json::json!({
            "error": error.to_string(),
            "running_version": admin.reloader.running().version,
        }),
    )
    .into_response()
}
