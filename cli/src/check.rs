//! `kv-router check CONFIG [--router-mode MODE]`: loads a configuration as the router would at
//! startup and prints what each role runs, or the first mistake with its snippet.

use crate::command_error::CommandError;
use clap::Args;
use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::plugins::{Commitments, HintHost, PolicyRegistry};
use dynamo_kv_router::router::{HintOrigin, RolePolicies, RouterMode, RouterSetup};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `kv-router check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The YAML configuration file.
    pub config: PathBuf,
    /// Overrides the file's `router_mode` (kv, round-robin, random, least-loaded).
    #[arg(long, value_name = "MODE")]
    pub router_mode: Option<RouterMode>,
}

/// Runs `kv-router check`.
pub fn run(
    args: &CheckArgs,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let overrides = ConfigOverrides {
        router_mode: args.router_mode,
    };
    let source = ConfigSource::read(&args.config).map_err(|error| CommandError::Config {
        rendered: error.render(""),
    })?;
    let setup =
        config::load(&source, registry, &overrides).map_err(|error| CommandError::Config {
            rendered: error.render(&source.text),
        })?;
    summarize(&source.name, &setup, registry, out)?;
    Ok(())
}

/// Prints the per-role summary of a valid configuration.
pub fn summarize(
    file: &str,
    setup: &RouterSetup,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{file}: valid (router_mode {}, block_size {}, {} {})",
        setup.router_mode,
        setup.block_size,
        setup.roles.len(),
        if setup.roles.len() == 1 {
            "role"
        } else {
            "roles"
        }
    )?;
    for (role, policies) in &setup.roles {
        writeln!(out, "{role}:")?;
        let commits = if policies
            .selection
            .commitments
            .contains(Commitments::KV_COPY)
        {
            " (commits KV copies)"
        } else {
            ""
        };
        writeln!(
            out,
            "  worker selection: {}{commits}",
            policies.selection_type
        )?;
        write_hints(setup.router_mode, policies, registry, out)?;
        write_shadows(setup.router_mode, policies, registry, out)?;
    }
    Ok(())
}

/// The role's shadows, each with its selection and hints (evaluated off the hot path; they
/// book nothing).
fn write_shadows(
    mode: RouterMode,
    policies: &RolePolicies,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if policies.shadows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  shadows (evaluated beside the live policies; they book nothing):"
    )?;
    for shadow in &policies.shadows {
        writeln!(
            out,
            "    {}: worker selection {}",
            shadow.name, shadow.policies.selection_type
        )?;
        let mut hints = Vec::new();
        write_hints(mode, &shadow.policies, registry, &mut hints)?;
        for line in String::from_utf8_lossy(&hints).lines() {
            writeln!(out, "    {line}")?;
        }
    }
    Ok(())
}

fn write_hints(
    mode: RouterMode,
    policies: &RolePolicies,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if policies.hints.is_empty() {
        let why = if mode != RouterMode::Kv {
            format!("router_mode {mode}: hints run only on the KV path")
        } else if registry
            .default_hint_policies(&policies.selection_type)
            .next()
            .is_some()
        {
            "`hints: []`".to_owned()
        } else {
            format!(
                "`hints: []`, or no hint policy runs by default under `{}`",
                policies.selection_type
            )
        };
        return writeln!(out, "  hints: none ({why})");
    }
    writeln!(out, "  hints, in order:")?;
    for (index, hint) in policies.hints.iter().enumerate() {
        let label = match &hint.name {
            Some(name) => format!("{name} ({})", hint.policy_type),
            None => hint.policy_type.clone(),
        };
        let why = match hint.origin {
            HintOrigin::Listed => "listed".to_owned(),
            HintOrigin::Default => {
                let any = registry
                    .get(&hint.policy_type)
                    .is_some_and(|entry| entry.defaults.contains(&HintHost::AnyWorkerSelection));
                if any {
                    "default under any worker-selection policy".to_owned()
                } else {
                    format!("default under `{}`", policies.selection_type)
                }
            }
        };
        let sends = if hint.constructed.commitments.contains(Commitments::KV_COPY) {
            "; sends the committed KV copies"
        } else {
            ""
        };
        writeln!(out, "    {}. {label}: {why}{sends}", index + 1)?;
    }
    Ok(())
}
