//! `SIGHUP`: read the `--config` file again, as daemons do.

use super::config_reloader::{ConfigReloader, ReloadTrigger};
use std::sync::Arc;

/// Reloads `reloader`'s file on every `SIGHUP` until the returned task is aborted. Each
/// outcome is logged (and counted on `/metrics`); a rejected reload changes nothing.
#[cfg(unix)]
pub fn reload_on_sighup(
    reloader: Arc<ConfigReloader>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let reloader = Arc::clone(&reloader);
            // The outcome is logged and counted by the reloader itself.
            let _ =
                tokio::task::spawn_blocking(move || reloader.reload_file(ReloadTrigger::Signal))
                    .await;
        }
    }))
}
