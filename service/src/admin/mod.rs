//! The admin plane: configuration reloads on a running router.
//!
//! **Enters:** `SIGHUP` (re-read the `--config` file), `POST /admin/config` (re-read the file, or
//! the YAML in the body) and `GET /admin/config`, both behind a bearer token (without one the
//! routes are off). **Leaves:** a new configuration checked by every startup rule and swapped into
//! every partition's router at once, or nothing changed and the error with its file:line:col; the
//! running configuration and its version as JSON; reload counters on `/metrics`.

pub mod admin_routes;
pub mod admin_token;
pub mod config_reloader;
mod policy_swap;
pub mod reload_signal;

pub use admin_routes::AdminRoutes;
pub use admin_token::{ADMIN_TOKEN_ENV, AdminToken, AdminTokenError};
pub use config_reloader::{
    ConfigLoader, ConfigReloader, ReloadError, ReloadOutcome, ReloadTrigger, RunningConfig,
};
