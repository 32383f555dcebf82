//! The command line: one subcommand per file of this crate.

use crate::catalog::CatalogArgs;
use crate::check::CheckArgs;
use crate::replay::ReplayArgs;
use crate::schema::SchemaArgs;
use crate::serve_args::ServeArgs;
use clap::{Parser, Subcommand};

/// A KV-aware request router with worker-selection and hint-policy plugins.
#[derive(Debug, Parser)]
#[command(name = "kv-router", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands; each lives in the file of the same name.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the policies linked into this build, or describe one.
    Catalog(CatalogArgs),
    /// Check a configuration file: the policies each role runs, or the first mistake.
    Check(CheckArgs),
    /// Print the JSON Schema of the configuration file for the policies linked into this build.
    ///
    /// For editors: `kv-router schema > router.schema.json`, then
    /// `# yaml-language-server: $schema=./router.schema.json` as the YAML's first line.
    Schema(SchemaArgs),
    /// Replay a workload through the router on a simulated cluster and compare configurations.
    Replay(ReplayArgs),
    /// Serve the router over HTTP (upstream's selection-service routes), fed by engines' ZMQ
    /// KV events.
    Serve(Box<ServeArgs>),
}
