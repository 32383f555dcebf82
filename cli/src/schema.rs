//! `kv-router schema`: the JSON Schema of the router YAML for the policies linked into this
//! build, for editors (`# yaml-language-server: $schema=./router.schema.json`).

use crate::command_error::CommandError;
use clap::Args;
use dynamo_kv_router::config::json_schema::router_config_schema;
use dynamo_kv_router::plugins::PolicyRegistry;
use std::io::Write;

/// Arguments of `kv-router schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {}

/// Runs `kv-router schema`: prints the schema as pretty JSON.
pub fn run(
    _args: &SchemaArgs,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let schema = router_config_schema(registry);
    let text = serde_json::to_string_pretty(&schema).map_err(std::io::Error::other)?;
    writeln!(out, "{text}")?;
    Ok(())
}
