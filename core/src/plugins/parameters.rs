//! A policy's `parameters` from the configuration, and the errors of turning them into a typed
//! config.

use serde::de::DeserializeOwned;
use std::fmt;

/// The untyped `parameters` mapping of one policy entry, as written in the configuration.
///
/// A provider turns it into its own typed config with [`deserialize`](Self::deserialize); a
/// missing `parameters` key is an empty mapping, so a config whose fields all have defaults
/// needs no parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyParameters {
    value: serde_json::Value,
}

/// The parameters of a hint policy.
pub type HintPolicyParameters = PolicyParameters;

/// The parameters of a worker-selection policy.
pub type WorkerSelectionParameters = PolicyParameters;

impl PolicyParameters {
    /// Parameters holding `value` (a mapping, or `null` for none).
    pub fn new(value: serde_json::Value) -> Self {
        Self { value }
    }

    /// No parameters: an empty mapping.
    pub fn empty() -> Self {
        Self::new(serde_json::Value::Object(serde_json::Map::new()))
    }

    /// The raw value.
    pub fn value(&self) -> &serde_json::Value {
        &self.value
    }

    /// Parses the parameters into `T`. Every field the type does not read is an error, and
    /// errors name the field path (`max_blocks: invalid type: string "x", expected usize`).
    pub fn deserialize<T: DeserializeOwned>(&self) -> Result<T, ParameterError> {
        let empty = serde_json::Value::Object(serde_json::Map::new());
        let value = if self.value.is_null() {
            &empty
        } else {
            &self.value
        };
        let mut unknown = Vec::new();
        let mut record = |path: serde_ignored::Path<'_>| unknown.push(path.to_string());
        let ignoring = serde_ignored::Deserializer::new(value, &mut record);
        let parsed: T = serde_path_to_error::deserialize(ignoring).map_err(|error| {
            let field = error.path().to_string();
            let message = error.into_inner().to_string();
            // `#[serde(deny_unknown_fields)]` reports an unknown field as a custom error.
            if message.starts_with("unknown field `") {
                ParameterError::unknown_field_with(field, message)
            } else {
                ParameterError::invalid(field, message)
            }
        })?;
        match unknown.into_iter().next() {
            Some(field) => Err(ParameterError::unknown_field(field)),
            None => Ok(parsed),
        }
    }
}

impl Default for PolicyParameters {
    fn default() -> Self {
        Self::empty()
    }
}

/// Why a provider rejected its parameters: an invalid value, an unknown field, or a check of
/// its own. The path names the offending field; the configuration loader prefixes it with the
/// entry's location (`worker_selection.decode.hints[1].parameters.max_blocks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParameterError {
    path: String,
    message: String,
    kind: ParameterErrorKind,
}

/// The kind of a [`ParameterError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParameterErrorKind {
    /// A field has a value the policy does not accept.
    Invalid,
    /// A field the policy does not read.
    UnknownField,
}

impl ParameterError {
    /// The value at `field` is not accepted, because of `message`. Use `""` for the whole mapping.
    pub fn invalid(field: impl Into<String>, message: impl fmt::Display) -> Self {
        Self {
            path: normalise_path(field.into()),
            message: message.to_string(),
            kind: ParameterErrorKind::Invalid,
        }
    }

    /// The parameters as a whole are rejected (for example by a `TryFrom` conversion).
    pub fn rejected(message: impl fmt::Display) -> Self {
        Self::invalid("", message)
    }

    /// `field` is not read by the policy.
    pub fn unknown_field(field: impl Into<String>) -> Self {
        let path = normalise_path(field.into());
        let name = path.rsplit(['.', '[']).next().unwrap_or(&path).to_owned();
        Self {
            path,
            message: format!("unknown field `{name}`; remove it or correct its spelling"),
            kind: ParameterErrorKind::UnknownField,
        }
    }

    /// `field` is not read by the policy, as `message` (serde's, which lists the expected
    /// fields) explains.
    pub fn unknown_field_with(field: impl Into<String>, message: impl fmt::Display) -> Self {
        Self {
            path: normalise_path(field.into()),
            message: message.to_string(),
            kind: ParameterErrorKind::UnknownField,
        }
    }

    /// The same error with its path placed under `prefix` (for example
    /// `worker_selection.decode.parameters`).
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = match (prefix.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => prefix.to_owned(),
            (false, false) if self.path.starts_with('[') => format!("{prefix}{}", self.path),
            (false, false) => format!("{prefix}.{}", self.path),
        };
        self
    }

    /// The path of the offending field (empty for the whole mapping).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What was wrong, without the path.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The kind of error.
    pub fn kind(&self) -> ParameterErrorKind {
        self.kind
    }
}

fn normalise_path(path: String) -> String {
    if path == "." || path == "?" {
        String::new()
    } else {
        path
    }
}

impl fmt::Display for ParameterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ParameterError {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Prefetch {
        max_blocks: usize,
        #[serde(default)]
        inner: Inner,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Inner {
        #[serde(default)]
        depth: u32,
    }

    #[test]
    fn parses_a_typed_config() {
        let parameters = PolicyParameters::new(json!({"max_blocks": 64}));
        let parsed: Prefetch = parameters.deserialize().unwrap();
        assert_eq!(parsed.max_blocks, 64);
    }

    #[test]
    fn wrong_type_names_the_field_path() {
        let parameters = PolicyParameters::new(json!({"max_blocks": "x"}));
        let error = parameters.deserialize::<Prefetch>().unwrap_err();
        assert_eq!(error.path(), "max_blocks");
        let error = error.under("worker_selection.decode.hints[1].parameters");
        assert_eq!(
            error.to_string(),
            "worker_selection.decode.hints[1].parameters.max_blocks: invalid type: string \"x\", expected usize"
        );
    }

    #[test]
    fn unknown_fields_are_rejected_even_without_deny_unknown_fields() {
        let parameters = PolicyParameters::new(json!({"max_blocks": 1, "inner": {"dpeth": 2}}));
        let error = parameters.deserialize::<Prefetch>().unwrap_err();
        assert_eq!(error.kind(), ParameterErrorKind::UnknownField);
        assert_eq!(error.path(), "inner.dpeth");
        assert!(error.message().contains("`dpeth`"), "{error}");
    }

    #[test]
    fn null_means_an_empty_mapping() {
        let parameters = PolicyParameters::new(serde_json::Value::Null);
        let parsed: Inner = parameters.deserialize().unwrap();
        assert_eq!(parsed, Inner::default());
    }

    #[test]
    fn missing_field_is_reported_at_the_mapping() {
        let error = PolicyParameters::empty()
            .deserialize::<Prefetch>()
            .unwrap_err();
        assert_eq!(
            error.under("p").to_string(),
            "p: missing field `max_blocks`"
        );
    }
}
