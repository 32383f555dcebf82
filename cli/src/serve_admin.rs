//! The admin side of `kv-router serve`: configuration reloads on `SIGHUP` and on
//! `POST /admin/config`, checked exactly as the configuration was at startup (the same linked
//! policies and `--router-mode` override), and the bearer token that turns the admin routes on
//! (`--admin-token-file FILE`, else `KV_ROUTER_ADMIN_TOKEN`).

use crate::command_error::CommandError;
use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource, NatsSettings};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::RouterSetup;
use kv_router_service::SelectionService;
use kv_router_service::admin::{AdminRoutes, AdminToken, ConfigLoader, ConfigReloader};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Loads a reloaded configuration as `kv-router serve` loaded the first one.
pub struct ServeConfigLoader {
    /// The policies linked into this binary.
    pub registry: PolicyRegistry,
    /// The command line's overrides (`--router-mode`), applied to every reload too.
    pub overrides: ConfigOverrides,
    /// The file's `nats` mapping at startup: the event plane is connected once, so a reload
    /// that changes the mapping is refused rather than silently ignored.
    pub startup_nats: Option<NatsSettings>,
}

impl ConfigLoader for ServeConfigLoader {
    fn load(&self, source: &ConfigSource) -> Result<RouterSetup, String> {
        let (setup, nats) = config::load_with_nats(source, &self.registry, &self.overrides)
            .map_err(|error| error.render(&source.text))?;
        if nats != self.startup_nats {
            return Err(format!(
                "error: {}: the `nats` mapping differs from the one kv-router serve started with; the event plane is connected once, so restart the router to change it (nothing was reloaded)\n",
                source.name
            ));
        }
        Ok(setup)
    }
}

/// The admin token: `--admin-token-file` first, else the environment; `None` keeps the admin
/// routes off.
pub fn admin_token(file: Option<&Path>) -> Result<Option<AdminToken>, CommandError> {
    let token = match file {
        Some(path) => Some(AdminToken::from_file(path)),
        None => AdminToken::from_env(),
    };
    token.transpose().map_err(|error| CommandError::Serve {
        message: error.to_string(),
    })
}

/// Starts reloading `service`'s configuration on `SIGHUP` and serves the admin routes when a
/// token is set; tells `out` where they are.
pub fn start(
    service: &Arc<SelectionService>,
    loader: ServeConfigLoader,
    config_path: Option<PathBuf>,
    initial: &ConfigSource,
    token: Option<AdminToken>,
    address: SocketAddr,
    out: &mut dyn Write,
) -> Result<AdminRoutes, CommandError> {
    let watches_file = config_path.is_some();
    let reloader = Arc::new(ConfigReloader::new(
        Arc::clone(service),
        Box::new(loader),
        config_path,
        initial,
    ));
    service.add_metrics_source(Arc::clone(&reloader) as _);
    #[cfg(unix)]
    kv_router_service::admin::reload_signal::reload_on_sighup(Arc::clone(&reloader)).map_err(
        |error| CommandError::Serve {
            message: format!("cannot listen for SIGHUP: {error}"),
        },
    )?;
    if watches_file {
        writeln!(
            out,
            "SIGHUP reloads {} (every startup check runs first; a failing reload changes nothing)",
            initial.name
        )?;
    }
    let admin = AdminRoutes::new(reloader, token);
    if admin.enabled() {
        writeln!(
            out,
            "admin routes on http://{address}/admin/config (GET shows the running configuration, POST reloads it; bearer token required)"
        )?;
    }
    Ok(admin)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_HINTS: &str = "worker_selection:\n  aggregated:\n    type: kvcr\n    hints: []\n";

    fn loader(startup_nats: Option<NatsSettings>) -> ServeConfigLoader {
        ServeConfigLoader {
            registry: PolicyRegistry::linked().expect("linked policies are consistent"),
            overrides: ConfigOverrides {
                router_mode: Some(dynamo_kv_router::router::RouterMode::LeastLoaded),
            },
            startup_nats,
        }
    }

    #[test]
    fn a_reload_keeps_the_command_line_overrides() {
        let setup = loader(None)
            .load(&ConfigSource::new("router.yaml", NO_HINTS))
            .expect("the configuration loads");
        assert_eq!(
            setup.router_mode,
            dynamo_kv_router::router::RouterMode::LeastLoaded
        );
    }

    #[test]
    fn a_reload_that_changes_the_nats_mapping_is_refused() {
        let with_nats = format!("{NO_HINTS}nats:\n  url: nats://127.0.0.1:4222\n");
        let Err(error) = loader(None).load(&ConfigSource::new("router.yaml", with_nats)) else {
            panic!("a changed nats mapping was accepted");
        };
        assert!(
            error.contains("`nats` mapping differs") && error.contains("restart"),
            "{error}"
        );
    }
}
