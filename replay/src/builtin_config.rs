//! Router configurations for replay: YAML files through the configuration loader, and the
//! built-in pair a replay compares when none is given.

use crate::compare::ReplayConfig;
use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::plugins::PolicyRegistry;
use std::path::Path;

/// The built-in configurations, by name: the page's kvcr + kv_fetch policies, and the default
/// cost without hints.
pub const BUILTIN_CONFIGS: [(&str, &str); 2] = [
    (
        "kvcr+kv_fetch",
        include_str!("../configs/kvcr-kv-fetch.yaml"),
    ),
    (
        "default-cost no-hints",
        include_str!("../configs/default-cost-no-hints.yaml"),
    ),
];

/// A configuration that could not be loaded, rendered with its snippet for people.
#[derive(Debug, thiserror::Error)]
#[error("{rendered}")]
pub struct ConfigLoadError {
    /// The loader's error with the file's snippet and caret.
    pub rendered: String,
}

/// Loads a YAML configuration named `name` from `text`, as the router would at startup.
pub fn load_config_text(
    name: &str,
    text: &str,
    registry: &PolicyRegistry,
    overrides: &ConfigOverrides,
) -> Result<ReplayConfig, ConfigLoadError> {
    let source = ConfigSource::new(name, text);
    let setup = config::load(&source, registry, overrides).map_err(|error| ConfigLoadError {
        rendered: error.render(&source.text),
    })?;
    Ok(ReplayConfig {
        name: name.to_owned(),
        setup,
    })
}

/// Loads a YAML configuration file; the report names it by its file name.
pub fn load_config_file(
    path: &Path,
    registry: &PolicyRegistry,
    overrides: &ConfigOverrides,
) -> Result<ReplayConfig, ConfigLoadError> {
    let source = ConfigSource::read(path).map_err(|error| ConfigLoadError {
        rendered: error.render(""),
    })?;
    let setup = config::load(&source, registry, overrides).map_err(|error| ConfigLoadError {
        rendered: error.render(&source.text),
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| source.name.clone());
    Ok(ReplayConfig { name, setup })
}

/// The built-in configurations, loaded with `registry` (which must have the built-in catalog).
pub fn builtin_configs(
    registry: &PolicyRegistry,
    overrides: &ConfigOverrides,
) -> Result<Vec<ReplayConfig>, ConfigLoadError> {
    BUILTIN_CONFIGS
        .iter()
        .map(|(name, text)| load_config_text(name, text, registry, overrides))
        .collect()
}
