//! The JSON Schema (draft 2020-12) of the whole router YAML for the policies of one registry:
//! what `kv-router schema` prints and editors (through yaml-language-server) use for
//! completion and inline errors.
//!
//! It follows the parser in [`schema`](super::schema) key for key (closed mappings wherever the
//! parser denies unknown fields) and adds what the registry knows: the linked policy types, as
//! enums, and, per type, the schema of its `parameters` when the parameters type describes
//! itself ([`PolicyRegistry::describe_parameters`]). A type whose parameters are not described
//! accepts any `parameters` mapping.
//!
//! Some rules are beyond a schema and only `kv-router check` (and startup) enforce them: a hint
//! type listed twice without names, hints under a non-KV `--router-mode`, the one KV-copy
//! sender a committing selection policy needs, the syntax of NATS addresses and names,
//! non-finite numbers, and a policy's own checks of parameter combinations.

use crate::plugins::{PolicyKind, PolicyRegistry};
use crate::setup::RouterMode;
use schemars::Schema;
use serde_json::{Map, Value, json};

use super::DEFAULT_BLOCK_SIZE;

/// The `$schema` of the emitted document.
pub const JSON_SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The JSON Schema of a router configuration file whose policies are those of `registry`.
pub fn router_config_schema(registry: &PolicyRegistry) -> Schema {
    let mut defs = Map::new();
    let selection_types: Vec<&str> = registry.names(PolicyKind::WorkerSelection).collect();
    let hint_types: Vec<&str> = registry.names(PolicyKind::Hint).collect();

    let selection_rules = parameter_rules(registry, PolicyKind::WorkerSelection, &mut defs);
    let hint_rules = parameter_rules(registry, PolicyKind::Hint, &mut defs);

    defs.insert(
        "selection_type".to_owned(),
        json!({
            "description": "A worker-selection policy type linked into this build.",
            "type": "string",
            "enum": selection_types,
        }),
    );
    defs.insert(
        "hint_type".to_owned(),
        json!({
            "description": "A hint policy type linked into this build.",
            "type": "string",
            "enum": hint_types,
        }),
    );
    defs.insert("parameters".to_owned(), any_parameters());
    defs.insert(
        "hints".to_owned(),
        json!({
            "description": "The hint policies the role runs, in order (`[]`: none; absent: the ones registered to run by default under its worker-selection policy).",
            "type": "array",
            "items": {"$ref": "#/$defs/hint_entry"},
        }),
    );
    defs.insert(
        "hint_entry".to_owned(),
        json!({
            "description": "One hint policy: its `type`, optional `parameters`, and a `name` when the role lists the type more than once.",
            "type": "object",
            "additionalProperties": false,
            "required": ["type"],
            "properties": {
                "type": {"$ref": "#/$defs/hint_type"},
                "parameters": {"$ref": "#/$defs/parameters"},
                "name": {
                    "description": "The entry's name, needed when the role lists the same type twice.",
                    "type": "string",
                },
            },
            "allOf": hint_rules,
        }),
    );
    defs.insert(
        "role_entry".to_owned(),
        json!({
            "description": "A worker-selection entry: a policy type (`prefill: dynamo-default-cost-fn`) or a mapping with `type` and optional `parameters`, `hints` and `shadow`.",
            "anyOf": [
                {"$ref": "#/$defs/selection_type"},
                {"$ref": "#/$defs/role_mapping"},
            ],
        }),
    );
    defs.insert(
        "role_mapping".to_owned(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["type"],
            "properties": {
                "type": {"$ref": "#/$defs/selection_type"},
                "parameters": {"$ref": "#/$defs/parameters"},
                "hints": {"$ref": "#/$defs/hints"},
                "shadow": {"$ref": "#/$defs/shadow"},
            },
            "allOf": selection_rules,
        }),
    );
    defs.insert(
        "shadow".to_owned(),
        json!({
            "description": "Worker-selection policies evaluated beside the role's own on every booking, without changing it: a policy type or a mapping with `type` and optional `parameters`, `hints` and `name`.",
            "type": "array",
            "items": {
                "anyOf": [
                    {"$ref": "#/$defs/selection_type"},
                    {"$ref": "#/$defs/shadow_mapping"},
                ],
            },
        }),
    );
    defs.insert(
        "shadow_mapping".to_owned(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["type"],
            "properties": {
                "type": {"$ref": "#/$defs/selection_type"},
                "parameters": {"$ref": "#/$defs/parameters"},
                "hints": {"$ref": "#/$defs/hints"},
                "name": {
                    "description": "The shadow's name, needed when the role shadows the same type twice.",
                    "type": "string",
                },
            },
            "allOf": selection_rules,
        }),
    );
    defs.insert("nats".to_owned(), nats());

    let roles: Map<String, Value> = ["aggregated", "prefill", "decode"]
        .into_iter()
        .map(|role| {
            (
                role.to_owned(),
                json!({
                    "description": format!("The `{role}` role's worker-selection policy."),
                    "$ref": "#/$defs/role_entry",
                }),
            )
        })
        .collect();
    let modes: Vec<&str> = RouterMode::ALL.iter().map(|mode| mode.as_str()).collect();

    let mut root = Map::new();
    root.insert("$schema".to_owned(), json!(JSON_SCHEMA_DIALECT));
    root.insert("title".to_owned(), json!("dynamo-kv-router configuration"));
    root.insert(
        "description".to_owned(),
        json!("A router configuration for the policies linked into this build (`kv-router schema`). `kv-router check` enforces the rules a schema cannot express."),
    );
    root.insert("type".to_owned(), json!("object"));
    root.insert("additionalProperties".to_owned(), json!(false));
    root.insert(
        "properties".to_owned(),
        json!({
            "router_mode": {
                "description": "How requests are routed: `kv` (KV-aware, the default), `round-robin`, `random` or `least-loaded`; `--router-mode` overrides it.",
                "type": "string",
                "enum": modes,
                "default": RouterMode::default().as_str(),
            },
            "block_size": {
                "description": "Tokens per KV block.",
                "type": "integer",
                "minimum": 1,
                "maximum": u32::MAX,
                "default": DEFAULT_BLOCK_SIZE,
            },
            "worker_selection": {
                "description": "The per-role policies: one optional entry per role.",
                "type": "object",
                "additionalProperties": false,
                "properties": roles,
            },
            "nats": {"$ref": "#/$defs/nats"},
        }),
    );
    root.insert("$defs".to_owned(), Value::Object(defs));
    Schema::from(root)
}

/// `parameters` of a type whose parameters are not described: any mapping, or empty.
fn any_parameters() -> Value {
    json!({
        "description": "The policy's parameters (a mapping; empty or absent: its defaults).",
        "type": ["object", "null"],
    })
}

/// One `if type is X then parameters follow X's schema` rule per described policy of `kind`;
/// each policy's schema goes in `defs` as `parameters:X`.
fn parameter_rules(
    registry: &PolicyRegistry,
    kind: PolicyKind,
    defs: &mut Map<String, Value>,
) -> Vec<Value> {
    let mut rules = Vec::new();
    for entry in registry.entries().filter(|entry| entry.kind == kind) {
        let Some(schema) = registry.describe_parameters(kind, &entry.name) else {
            continue;
        };
        let key = format!("parameters:{}", entry.name);
        let schema = hoist_definitions(schema.to_value(), &key, defs);
        defs.insert(key.clone(), schema);
        let mut then = json!({
            "properties": {
                "parameters": {
                    "anyOf": [
                        {"type": "null"},
                        {"$ref": format!("#/$defs/{}", pointer_token(&key))},
                    ],
                },
            },
        });
        if !entry.summary.is_empty()
            && let Value::Object(then) = &mut then
        {
            then.insert("description".to_owned(), json!(entry.summary));
        }
        rules.push(json!({
            "if": {
                "properties": {"type": {"const": entry.name}},
                "required": ["type"],
            },
            "then": then,
        }));
    }
    rules
}

/// Moves the `$defs` of an embedded parameters schema into the document's, as `KEY/NAME`, and
/// points its references there (a reference to its own root, `#`, to `KEY`).
fn hoist_definitions(mut schema: Value, key: &str, defs: &mut Map<String, Value>) -> Value {
    let own = match &mut schema {
        Value::Object(map) => match map.remove("$defs") {
            Some(Value::Object(own)) => own,
            _ => Map::new(),
        },
        _ => Map::new(),
    };
    let location = |name: &str| format!("#/$defs/{}", pointer_token(name));
    let target = |reference: &str| {
        if reference == "#" {
            return Some(location(key));
        }
        let name = unescape_pointer_token(reference.strip_prefix("#/$defs/")?);
        own.contains_key(&name)
            .then(|| location(&format!("{key}/{name}")))
    };
    let mut hoisted: Vec<(String, Value)> = own
        .iter()
        .map(|(name, definition)| (format!("{key}/{name}"), definition.clone()))
        .collect();
    for (_, definition) in &mut hoisted {
        rewrite_references(definition, &target);
    }
    rewrite_references(&mut schema, &target);
    defs.extend(hoisted);
    schema
}

/// Replaces every `$ref` under `value` with `target(reference)` when it has one.
fn rewrite_references(value: &mut Value, target: &dyn Fn(&str) -> Option<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref")
                && let Some(new) = target(reference)
            {
                *reference = new;
            }
            for child in map.values_mut() {
                rewrite_references(child, target);
            }
        }
        Value::Array(items) => {
            for item in items {
                rewrite_references(item, target);
            }
        }
        _ => {}
    }
}

/// `key` as one JSON Pointer token (RFC 6901: `~` is `~0`, `/` is `~1`).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The key one JSON Pointer token names.
fn unescape_pointer_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The `nats` mapping ([`NatsSection`](super::nats_section::NatsSection)).
fn nats() -> Value {
    let name = |what: &str| {
        json!({
            "description": what,
            "type": "string",
        })
    };
    json!({
        "description": "The event plane over NATS JetStream, for `kv-router serve` (flags of the same name take precedence).",
        "type": "object",
        "additionalProperties": false,
        "required": ["url"],
        "properties": {
            "url": {
                "description": "The server, `nats://host:port`.",
                "type": "string",
            },
            "namespace": name("The Dynamo namespace whose workers' events are read."),
            "stream": name("The JetStream stream holding them."),
            "consumer": name("This replica's durable consumer (distinct per replica)."),
            "sync_component": name("The component scoping the replicas' booking sync."),
            "sync_endpoint": name("The endpoint scoping the replicas' booking sync."),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::{
        HintAction, HintContext, HintPolicy, HintPolicyConstructor, PolicyError,
        parameters_schema_of,
    };
    use serde::Deserialize;
    use std::sync::Arc;

    struct Noop;

    impl HintPolicy for Noop {
        fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
            Ok(Vec::new())
        }
    }

    /// A recursive type: its schema refers to itself (`#` when it is the root).
    #[derive(Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        /// The children.
        #[serde(default)]
        children: Vec<Tree>,
    }

    /// Parameters holding a recursive type, so their schema keeps a definition of its own.
    #[derive(Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Forest {
        /// The trees.
        trees: Vec<Tree>,
    }

    fn registry() -> PolicyRegistry {
        let mut registry = PolicyRegistry::new();
        let provider = || Arc::new(|_| Ok(HintPolicyConstructor::shared(Noop)));
        registry
            .register_hint_policy("described", provider(), [])
            .unwrap();
        registry
            .set_parameters_schema("described", parameters_schema_of::<Forest>())
            .unwrap();
        registry
            .register_hint_policy("undescribed", provider(), [])
            .unwrap();
        registry
            .register_hint_policy("z_tree", provider(), [])
            .unwrap();
        registry
            .set_parameters_schema("z_tree", parameters_schema_of::<Tree>())
            .unwrap();
        registry
    }

    #[test]
    fn lists_types_and_embeds_described_parameters_only() {
        let schema = router_config_schema(&registry()).to_value();
        assert_eq!(schema["$schema"], JSON_SCHEMA_DIALECT);
        assert_eq!(
            schema["$defs"]["hint_type"]["enum"],
            json!(["described", "undescribed", "z_tree"])
        );
        let rules = schema["$defs"]["hint_entry"]["allOf"].as_array().unwrap();
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert_eq!(
            rules[0]["if"]["properties"]["type"]["const"],
            json!("described")
        );
        assert!(schema["$defs"]["parameters:described"].is_object());
    }

    #[test]
    fn embedded_definitions_are_hoisted_and_references_follow() {
        let schema = router_config_schema(&registry()).to_value();
        let defs = schema["$defs"].as_object().unwrap();
        let hoisted = defs.get("parameters:described/Tree").expect("hoisted");
        let text = serde_json::to_string(&schema).unwrap();
        assert!(
            text.contains("\"#/$defs/parameters:described~1Tree\""),
            "{text}"
        );
        assert!(!text.contains("\"#/$defs/Tree\""), "{text}");
        assert!(!text.contains("\"#\""), "{text}");
        assert!(hoisted.is_object());
    }

    #[test]
    fn top_level_follows_the_parser() {
        let schema = router_config_schema(&PolicyRegistry::new()).to_value();
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(
            schema["properties"]["router_mode"]["enum"],
            json!(["kv", "round-robin", "random", "least-loaded"])
        );
        assert_eq!(schema["properties"]["block_size"]["minimum"], json!(1));
        assert_eq!(schema["$defs"]["nats"]["required"], json!(["url"]));
        assert_eq!(
            schema["$defs"]["role_mapping"]["properties"]["shadow"]["$ref"],
            json!("#/$defs/shadow")
        );
    }
}
