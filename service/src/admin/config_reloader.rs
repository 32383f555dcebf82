//! Reloading the configuration of a running service: read it, run every startup check, and
//! swap the new policies in whole, or change nothing and say what was wrong and where.

use crate::selection::selection_service::{MetricsSource, SelectionService};
use dynamo_kv_router::config::{ConfigSource, MAX_CONFIG_BYTES};
use dynamo_kv_router::router::RouterSetup;
use parking_lot::Mutex;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Turns configuration text into the setup the router runs, with every check `kv-router
/// serve` makes at startup (the binary's linked policies, its command-line overrides, the
/// settings only a restart may change).
pub trait ConfigLoader: Send + Sync {
    /// The setup `source` describes; the error is rendered for people, with the file, line
    /// and column of the mistake.
    fn load(&self, source: &ConfigSource) -> Result<RouterSetup, String>;
}

/// What asked for a reload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadTrigger {
    /// `SIGHUP`.
    Signal = 0,
    /// `POST /admin/config`.
    Request = 1,
}

impl ReloadTrigger {
    const ALL: [ReloadTrigger; 2] = [ReloadTrigger::Signal, ReloadTrigger::Request];

    /// The trigger's label on `/metrics`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReloadTrigger::Signal => "sighup",
            ReloadTrigger::Request => "http",
        }
    }
}

/// The configuration the service runs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RunningConfig {
    /// 1 for the configuration the service started with, one more for each applied reload.
    pub version: u64,
    /// Where the text came from: the file's path, the built-in configuration's name, or
    /// `POST /admin/config`.
    pub source: String,
    /// When it was applied, in milliseconds since the Unix epoch.
    pub loaded_at_unix_ms: u64,
    /// The text's XXH3-64, in hex: two versions with the same digest run the same text.
    pub digest: String,
    /// The YAML text.
    pub text: String,
}

impl RunningConfig {
    fn new(version: u64, source: &ConfigSource) -> Self {
        let loaded_at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        Self {
            version,
            source: source.name.clone(),
            loaded_at_unix_ms,
            digest: format!(
                "{:016x}",
                xxhash_rust::xxh3::xxh3_64(source.text.as_bytes())
            ),
            text: source.text.clone(),
        }
    }
}

/// A reload that applied.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReloadOutcome {
    /// The new version.
    pub version: u64,
    /// Where the new text came from.
    pub source: String,
    /// Its digest (see [`RunningConfig::digest`]).
    pub digest: String,
}

/// Why a reload changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The service started on the built-in configuration: there is no file to read again.
    #[error(
        "kv-router serve started without --config: there is no file to reload; restart it with --config FILE, or POST the new configuration's YAML as the body of /admin/config"
    )]
    NoFile,
    /// The text was empty, over the size limit or not UTF-8, or the file could not be read.
    #[error("{0}")]
    Unreadable(String),
    /// A startup check failed; the message gives the file, line and column.
    #[error("{0}")]
    Invalid(String),
    /// The configuration is valid but cannot replace the running one (a role that registered
    /// workers serve would go).
    #[error("{0}")]
    Refused(String),
}

/// Reloads one service's configuration: serialized, counted, and all or nothing.
pub struct ConfigReloader {
    service: Arc<SelectionService>,
    loader: Box<dyn ConfigLoader>,
    /// The `--config` file, if the service was started with one.
    path: Option<PathBuf>,
    running: Mutex<RunningConfig>,
    applied: [AtomicU64; 2],
    rejected: [AtomicU64; 2],
}

impl ConfigReloader {
    /// A reloader for `service`, which runs `initial` (version 1), read from `path` when given.
    pub fn new(
        service: Arc<SelectionService>,
        loader: Box<dyn ConfigLoader>,
        path: Option<PathBuf>,
        initial: &ConfigSource,
    ) -> Self {
        Self {
            service,
            loader,
            path,
            running: Mutex::new(RunningConfig::new(1, initial)),
            applied: Default::default(),
            rejected: Default::default(),
        }
    }

    /// The configuration running now.
    pub fn running(&self) -> RunningConfig {
        self.running.lock().clone()
    }

    /// The setup the running configuration built.
    pub fn running_setup(&self) -> Arc<RouterSetup> {
        Arc::clone(&self.service.setup.read())
    }

    /// Reads the `--config` file again and applies it.
    pub fn reload_file(&self, trigger: ReloadTrigger) -> Result<ReloadOutcome, ReloadError> {
        let source = match &self.path {
            None => Err(ReloadError::NoFile),
            Some(path) => {
                ConfigSource::read(path).map_err(|error| ReloadError::Unreadable(error.render("")))
            }
        };
        self.counted(trigger, source.and_then(|source| self.apply(&source)))
    }

    /// Applies `text`, the YAML of a new configuration (the body of `POST /admin/config`).
    /// The file on disk is not changed: the next `SIGHUP` reads the file again.
    pub fn reload_text(&self, text: &[u8]) -> Result<ReloadOutcome, ReloadError> {
        let source = posted_source(text);
        self.counted(
            ReloadTrigger::Request,
            source.and_then(|source| self.apply(&source)),
        )
    }

    /// Checks `source` and, when every check passes, swaps it in.
    fn apply(&self, source: &ConfigSource) -> Result<ReloadOutcome, ReloadError> {
        // One reload at a time: versions follow the order of the swaps.
        let mut running = self.running.lock();
        let setup = self.loader.load(source).map_err(ReloadError::Invalid)?;
        self.service
            .replace_policies(setup)
            .map_err(|error| ReloadError::Refused(error.to_string()))?;
        *running = RunningConfig::new(running.version + 1, source);
        Ok(ReloadOutcome {
            version: running.version,
            source: running.source.clone(),
            digest: running.digest.clone(),
        })
    }

    /// Counts and logs `result`.
    fn counted(
        &self,
        trigger: ReloadTrigger,
        result: Result<ReloadOutcome, ReloadError>,
    ) -> Result<ReloadOutcome, ReloadError> {
        match &result {
            Ok(outcome) => {
                self.applied[trigger as usize].fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    trigger = trigger.as_str(),
                    version = outcome.version,
                    source = %outcome.source,
                    "configuration reloaded"
                );
            }
            Err(error) => {
                self.rejected[trigger as usize].fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    trigger = trigger.as_str(),
                    "configuration reload rejected, nothing changed:\n{error}"
                );
            }
        }
        result
    }
}

/// A posted body as a configuration source named `POST /admin/config`.
fn posted_source(text: &[u8]) -> Result<ConfigSource, ReloadError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ReloadError::Unreadable(format!(
            "POST /admin/config: the body holds {} bytes, over the {MAX_CONFIG_BYTES}-byte limit of a configuration",
            text.len()
        )));
    }
    let text = std::str::from_utf8(text).map_err(|error| {
        ReloadError::Unreadable(format!(
            "POST /admin/config: the body is not UTF-8 text (byte {}); send the configuration's YAML",
            error.valid_up_to()
        ))
    })?;
    Ok(ConfigSource::new("POST /admin/config", text))
}

impl MetricsSource for ConfigReloader {
    fn prometheus_text(&self) -> String {
        let mut out = String::new();
        let counters = [
            (
                "kv_router_config_reloads_total",
                "Configuration reloads applied, by trigger (SIGHUP or POST /admin/config)",
                &self.applied,
            ),
            (
                "kv_router_config_reloads_rejected_total",
                "Configuration reloads rejected, by trigger: a check failed and nothing changed",
                &self.rejected,
            ),
        ];
        for (name, help, counts) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for trigger in ReloadTrigger::ALL {
                let count = counts[trigger as usize].load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}{{trigger=\"{}\"}} {count}", trigger.as_str());
            }
        }
        let name = "kv_router_config_version";
        let _ = writeln!(
            out,
            "# HELP {name} The running configuration's version (1 at start, one more per applied reload)\n# TYPE {name} gauge\n{name} {}",
            self.running.lock().version
        );
        out
    }
}
