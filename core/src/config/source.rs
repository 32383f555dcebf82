//! The configuration text and its parsing into the schema, under size and alias budgets.

use super::error::{ConfigError, ConfigProblem};
use super::position::Position;
use super::schema::{self, RouterConfig};
use serde_saphyr::options::DuplicateKeyPolicy;
use serde_saphyr::{MessageFormatter, UserMessageFormatter};
use std::io::Read;
use std::path::Path;

/// The largest configuration file accepted, in bytes.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// At most this many alias expansions' worth of events are replayed (alias bombs stop here).
const MAX_REPLAYED_EVENTS: usize = 10_000;

/// A configuration's text and the name errors use for it (usually its path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigSource {
    /// The name used in error messages.
    pub name: String,
    /// The YAML text.
    pub text: String,
}

impl ConfigSource {
    /// A configuration held in memory, named `name` in errors.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
        }
    }

    /// Reads the file at `path`, refusing files over [`MAX_CONFIG_BYTES`] and non-UTF-8 text.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let fail = |problem| ConfigError::new(&name, Position::UNKNOWN, None, problem);
        let read_error = |error: std::io::Error| {
            fail(ConfigProblem::Read {
                message: error.to_string(),
            })
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() > MAX_CONFIG_BYTES {
            let size = std::fs::metadata(path)
                .map(|metadata| metadata.len())
                .unwrap_or(bytes.len() as u64);
            return Err(fail(ConfigProblem::TooLarge {
                size,
                limit: MAX_CONFIG_BYTES as u64,
            }));
        }
        let text = String::from_utf8(bytes).map_err(|error| {
            fail(ConfigProblem::Read {
                message: format!("the file is not UTF-8 text ({error})"),
            })
        })?;
        Ok(Self::new(name, text))
    }

    /// Parses the text into the schema: duplicate and unknown keys, malformed YAML and documents
    /// over the size or alias budget are errors at their position.
    pub fn parse(&self) -> Result<RouterConfig, ConfigError> {
        if self.text.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::new(
                &self.name,
                Position::UNKNOWN,
                None,
                ConfigProblem::TooLarge {
                    size: self.text.len() as u64,
                    limit: MAX_CONFIG_BYTES as u64,
                },
            ));
        }
        let mut config: RouterConfig =
            serde_saphyr::from_str_with_options(&self.text, parser_options())
                .map_err(|error| self.yaml_error(&error))?;
        schema::locate_bare_types(&mut config);
        Ok(config)
    }

    fn yaml_error(&self, error: &serde_saphyr::Error) -> ConfigError {
        let error = error.without_snippet();
        let position = error
            .location()
            .map(|location| Position::of(&location))
            .unwrap_or(Position::UNKNOWN);
        let message = UserMessageFormatter.format_message(error).into_owned();
        ConfigError::new(&self.name, position, None, classify(message))
    }
}

fn classify(message: String) -> ConfigProblem {
    let lower = message.to_ascii_lowercase();
    if lower.contains("documents") {
        let help = "a configuration is a single YAML document: remove the extra `---` documents";
        return ConfigProblem::Yaml { message, help };
    }
    if ["budget", "alias", "limit", "too complex", "too large"]
        .iter()
        .any(|word| lower.contains(word))
    {
        return ConfigProblem::Budget { message };
    }
    let help = if lower.contains("duplicate") {
        "each key may appear once in a mapping: remove or merge the repeated key"
    } else if lower.contains("unknown field") || lower.contains("unknown variant") {
        "remove the key or correct its spelling"
    } else if lower.contains("missing field") {
        "add the missing key"
    } else if lower.contains("expected mapping") {
        "a mapping of `key: value` lines is expected here"
    } else if lower.contains("end of file") || lower.contains("empty") {
        "write at least `worker_selection:` with one role entry"
    } else {
        "fix the YAML at this position (schema: `router_mode`, `block_size`, `worker_selection`)"
    };
    ConfigProblem::Yaml { message, help }
}

fn parser_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(MAX_CONFIG_BYTES),
            max_events: 100_000,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_depth: 32,
            max_documents: 1,
            max_nodes: 50_000,
            max_total_scalar_bytes: MAX_CONFIG_BYTES,
            max_merge_keys: 100,
        },
        duplicate_keys: DuplicateKeyPolicy::Error,
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED_EVENTS,
            max_replay_stack_depth: 16,
        },
        with_snippet: false,
    }
}
