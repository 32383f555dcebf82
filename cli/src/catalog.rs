//! `kv-router catalog [--json]` and `kv-router catalog describe NAME [--json]`: the policies
//! linked into this build.

use crate::command_error::CommandError;
use crate::parameter_table::{parameter_rows, write_parameter_table};
use clap::{Args, Subcommand};
use dynamo_kv_router::plugins::name;
use dynamo_kv_router::plugins::{HintHost, PolicyEntry, PolicyKind, PolicyRegistry};
use dynamo_kv_router::schemars::Schema;
use serde::Serialize;
use std::io::Write;

/// Arguments of `kv-router catalog`.
#[derive(Debug, Args)]
pub struct CatalogArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Describe one policy instead of listing them all.
    #[command(subcommand)]
    pub action: Option<CatalogAction>,
}

/// What `kv-router catalog` can do besides listing.
#[derive(Debug, Subcommand)]
pub enum CatalogAction {
    /// Everything known about one linked policy.
    Describe {
        /// The policy type name, as written in configurations.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// One policy as `catalog --json` prints it.
#[derive(Debug, Serialize)]
pub struct PolicyDescription {
    /// The type name used in configurations.
    pub name: String,
    /// `worker-selection` or `hint`.
    pub kind: &'static str,
    /// The first paragraph of its description.
    pub summary: String,
    /// Its full description.
    pub description: String,
    /// For hints: the selection policies it runs under by default (`any` for all).
    pub defaults: Vec<String>,
    /// What it declares it commits or sends (`KV_COPY`).
    pub commitments: Vec<&'static str>,
    /// The Rust type of the policy, when known.
    pub type_name: Option<String>,
    /// The Rust type of its parameters, when known.
    pub parameters_type: Option<String>,
    /// The crate that registered it, when known.
    #[serde(rename = "crate")]
    pub crate_name: Option<String>,
    /// `file:line` of the registration.
    pub source: String,
    /// The JSON Schema of its parameters; `null` when they are not described.
    pub parameters_schema: Option<Schema>,
}

impl PolicyDescription {
    /// The description of `entry`.
    pub fn of(entry: &PolicyEntry) -> Self {
        Self {
            name: entry.name.clone(),
            kind: entry.kind.as_str(),
            summary: entry.summary.clone(),
            description: entry.description.clone(),
            defaults: entry.defaults.iter().map(HintHost::to_string).collect(),
            commitments: entry.commitments.names(),
            type_name: entry.type_name.clone(),
            parameters_type: entry.parameters_type.clone(),
            crate_name: entry.location.crate_name.clone(),
            source: format!("{}:{}", entry.location.file, entry.location.line),
            parameters_schema: None,
        }
    }

    /// The description of `entry` with the schema of its parameters from `registry`.
    pub fn with_parameters(entry: &PolicyEntry, registry: &PolicyRegistry) -> Self {
        Self {
            parameters_schema: registry.describe_parameters(entry.kind, &entry.name),
            ..Self::of(entry)
        }
    }
}

/// Runs `kv-router catalog`.
pub fn run(
    args: &CatalogArgs,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    match &args.action {
        None if args.json => {
            let all: Vec<_> = registry
                .entries()
                .map(|entry| PolicyDescription::with_parameters(entry, registry))
                .collect();
            write_json(out, &all)
        }
        None => list(registry, out),
        Some(CatalogAction::Describe { name, json }) => {
            let entry = registry.get(name).ok_or_else(|| unknown(name, registry))?;
            if *json || args.json {
                write_json(out, &PolicyDescription::with_parameters(entry, registry))
            } else {
                let schema = registry.describe_parameters(entry.kind, &entry.name);
                describe(entry, schema.as_ref(), out)
            }
        }
    }
}

fn write_json(out: &mut dyn Write, value: &impl Serialize) -> Result<(), CommandError> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    writeln!(out, "{text}")?;
    Ok(())
}

fn unknown(name: &str, registry: &PolicyRegistry) -> CommandError {
    let names: Vec<&str> = registry
        .entries()
        .map(|entry| entry.name.as_str())
        .collect();
    let mut message = format!("no linked policy is named `{name}`");
    if let Some(closest) = name::closest(name, names.iter().copied()) {
        message.push_str(&format!("; did you mean `{closest}`?"));
    }
    if names.is_empty() {
        message.push_str("; no policies are linked into this build");
    } else {
        message.push_str(&format!("; linked policies: {}", names.join(", ")));
    }
    message.push_str("; run `kv-router catalog` to list them");
    CommandError::UnknownPolicy { message }
}

fn defaults_text(entry: &PolicyEntry) -> String {
    if entry.kind != PolicyKind::Hint {
        return "-".to_owned();
    }
    if entry.defaults.is_empty() {
        return "only where listed".to_owned();
    }
    entry
        .defaults
        .iter()
        .map(|host| match host {
            HintHost::AnyWorkerSelection => "any worker-selection policy".to_owned(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(registry: &PolicyRegistry, out: &mut dyn Write) -> Result<(), CommandError> {
    if registry.is_empty() {
        writeln!(
            out,
            "No policies are linked into this build: link a catalog crate (`use dynamo_router_catalog as _;`)."
        )?;
        return Ok(());
    }
    let rows: Vec<[String; 5]> = registry
        .entries()
        .map(|entry| {
            [
                entry.name.clone(),
                entry.kind.to_string(),
                entry.commitments.to_string(),
                defaults_text(entry),
                entry.summary.clone(),
            ]
        })
        .collect();
    let header = ["NAME", "KIND", "COMMITS", "DEFAULT UNDER", "SUMMARY"].map(str::to_owned);
    let mut widths = [0usize; 4];
    for row in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

fn describe(
    entry: &PolicyEntry,
    parameters: Option<&Schema>,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let unknown = || "unknown".to_owned();
    writeln!(out, "{} ({} policy)", entry.name, entry.kind)?;
    if !entry.summary.is_empty() {
        writeln!(out, "  summary:      {}", entry.summary)?;
    }
    if entry.kind == PolicyKind::Hint {
        writeln!(out, "  defaults:     {}", defaults_text(entry))?;
    }
    writeln!(out, "  commitments:  {}", entry.commitments)?;
    writeln!(
        out,
        "  parameters:   {}",
        entry.parameters_type.clone().unwrap_or_else(unknown)
    )?;
    writeln!(
        out,
        "  type:         {}",
        entry.type_name.clone().unwrap_or_else(unknown)
    )?;
    writeln!(
        out,
        "  crate:        {}",
        entry.location.crate_name.clone().unwrap_or_else(unknown)
    )?;
    writeln!(
        out,
        "  source:       {}:{}",
        entry.location.file, entry.location.line
    )?;
    writeln!(out)?;
    match parameters.map(parameter_rows) {
        None => writeln!(out, "  parameters not described")?,
        Some(rows) if rows.is_empty() => writeln!(out, "  no parameters")?,
        Some(rows) => write_parameter_table(out, &rows, "  ")?,
    }
    if !entry.description.is_empty() && entry.description != entry.summary {
        writeln!(out)?;
        for line in entry.description.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}
