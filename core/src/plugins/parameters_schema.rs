//! The JSON Schema of a policy's parameters: what editors and `kv-router schema` show about
//! the `parameters` mapping of one policy type.
//!
//! A parameters type describes itself by deriving [`JsonSchema`] (through
//! `dynamo_kv_router::schemars`): field doc comments become descriptions, `#[serde(default)]`
//! values become `default`, and `#[schemars(range(min = .., max = ..))]` becomes `minimum` and
//! `maximum`. A type that does not derive it is "not described", and any parameters are
//! accepted for it by the schema (the policy's own checks still run at startup).

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde_json::Value;

/// The function a registration records to produce its parameters' schema: `None` when the
/// parameters type does not implement [`JsonSchema`].
pub type ParametersSchemaFn = fn() -> Option<Schema>;

/// The schema of the parameters type `T`, as the router reads it: JSON Schema draft 2020-12,
/// every subschema inlined where possible, and every object closed (`additionalProperties:
/// false`), because the router rejects a field the type does not read even without
/// `#[serde(deny_unknown_fields)]`.
pub fn parameters_schema_of<T: JsonSchema>() -> Schema {
    let mut schema = SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<T>();
    if let Some(object) = schema.as_object_mut() {
        // The schema is embedded in the router's; its own `$schema` would be noise there.
        object.remove("$schema");
        close_object(object);
    }
    schema
}

/// Adds `additionalProperties: false` to `map`, and to every object schema under it, when it
/// lists its `properties` and says nothing about other keys.
fn close_object(map: &mut serde_json::Map<String, Value>) {
    if map.contains_key("properties") && !map.contains_key("additionalProperties") {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    map.values_mut().for_each(close_objects);
}

/// [`close_object`] for every object schema in `value`.
fn close_objects(value: &mut Value) {
    match value {
        Value::Object(map) => close_object(map),
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// Test parameters.
    #[derive(Deserialize, JsonSchema)]
    #[serde(default)]
    #[allow(dead_code)]
    struct Sample {
        /// How many.
        #[schemars(range(min = 1))]
        count: usize,
        /// Nested settings.
        inner: Inner,
    }

    impl Default for Sample {
        fn default() -> Self {
            Self {
                count: 3,
                inner: Inner { flag: true },
            }
        }
    }

    #[derive(Deserialize, JsonSchema, serde::Serialize)]
    #[allow(dead_code)]
    struct Inner {
        flag: bool,
    }

    #[test]
    fn objects_are_closed_and_defaults_ranges_and_docs_kept() {
        let schema = parameters_schema_of::<Sample>().to_value();
        assert_eq!(schema["additionalProperties"], Value::Bool(false));
        assert_eq!(
            schema["properties"]["inner"]["additionalProperties"],
            Value::Bool(false)
        );
        assert_eq!(schema["properties"]["count"]["minimum"], 1);
        assert_eq!(schema["properties"]["count"]["default"], 3);
        assert_eq!(schema["properties"]["count"]["description"], "How many.");
        assert!(schema.get("$schema").is_none(), "{schema}");
        assert!(schema.get("$defs").is_none(), "{schema}");
    }
}
