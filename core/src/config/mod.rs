//! Router configuration: the `worker_selection` YAML, parsed with the position of every entry,
//! checked against every startup rule, and turned into the policies each role runs.
//!
//! ```no_run
//! use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
//! use dynamo_kv_router::plugins::PolicyRegistry;
//!
//! let registry = PolicyRegistry::linked().expect("linked policies are consistent");
//! let source = ConfigSource::read("router.yaml".as_ref()).expect("readable");
//! match config::load(&source, &registry, &ConfigOverrides::default()) {
//!     Ok(setup) => println!("{} roles", setup.roles.len()),
//!     Err(error) => eprintln!("{}", error.render(&source.text)),
//! }
//! ```

pub mod error;
pub mod json_schema;
pub mod located;
pub mod nats_section;
pub mod parameter_tree;
pub mod position;
pub mod schema;
pub mod setup_builder;
mod snippet;
pub mod source;

pub use error::{ConfigError, ConfigProblem};
pub use nats_section::{NatsSection, NatsSettings};
pub use position::Position;
pub use schema::{HintEntry, Located, RoleEntry, RouterConfig, ShadowEntry, WorkerSelectionConfig};
pub use setup_builder::{ConfigOverrides, DEFAULT_BLOCK_SIZE, build_setup};
pub use source::{ConfigSource, MAX_CONFIG_BYTES};

use crate::plugins::PolicyRegistry;
use crate::setup::RouterSetup;

/// Parses `source` and builds the router's per-role policies from `registry`; the first rule
/// the configuration violates is the error.
pub fn load(
    source: &ConfigSource,
    registry: &PolicyRegistry,
    overrides: &ConfigOverrides,
) -> Result<RouterSetup, ConfigError> {
    load_with_nats(source, registry, overrides).map(|(setup, _)| setup)
}

/// [`load`], and the file's `nats` mapping, checked, if it has one.
pub fn load_with_nats(
    source: &ConfigSource,
    registry: &PolicyRegistry,
    overrides: &ConfigOverrides,
) -> Result<(RouterSetup, Option<NatsSettings>), ConfigError> {
    let config = source.parse()?;
    let setup = build_setup(&source.name, &config, registry, overrides)?;
    let nats = config
        .nats
        .as_ref()
        .map(|section| section.value.check(&source.name))
        .transpose()?;
    Ok((setup, nats))
}
