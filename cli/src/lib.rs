//! The command-line router build as a library, so that a router build with extra catalogs is a
//! few lines:
//!
//! ```no_run
//! // use my_catalog as _;   // linking a catalog registers its policies
//! fn main() -> std::process::ExitCode {
//!     kv_router::run()
//! }
//! ```

pub mod approximate_args;
pub mod catalog;
pub mod check;
pub mod command;
pub mod command_error;
pub mod parameter_table;
pub mod replay;
pub mod schema;
pub mod serve;
pub mod serve_admin;
pub mod serve_args;
pub mod serve_gateway;
pub mod serve_nats;
pub mod serve_replicas;

use clap::Parser;
use command::{Cli, Command};
use dynamo_kv_router::plugins::PolicyRegistry;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

// Linking the built-in catalog registers its policies in every build made from this crate.
use dynamo_router_catalog as _;

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the build or the program is at fault, not the input: the linked policies are
/// inconsistent, or a replay's invariants failed.
pub const EXIT_BUILD_PROBLEM: u8 = 1;
/// Exit status: the input is wrong (a command line, a configuration, an unknown policy name).
pub const EXIT_INVALID_INPUT: u8 = 2;

/// Runs the command line of this process with every policy linked into the binary.
pub fn run() -> ExitCode {
    match PolicyRegistry::linked() {
        Ok(registry) => run_with_registry(&registry),
        Err(error) => {
            eprintln!("error: the policies linked into this build are inconsistent: {error}");
            ExitCode::from(EXIT_BUILD_PROBLEM)
        }
    }
}

/// Runs the command line of this process with `registry` (for builds that also register
/// policies by hand).
pub fn run_with_registry(registry: &PolicyRegistry) -> ExitCode {
    // Unlocked handles: `serve` runs for the life of the process, and a lock held here would
    // block every other thread that writes to the same stream (a library's `eprintln!` or
    // `dbg!` on a tokio worker would stall that worker for good).
    let code = run_args(
        std::env::args_os(),
        registry,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    ExitCode::from(code)
}

/// Runs the command line `args` (program name first) with `registry`, writing to `out` and
/// `err`; returns the exit status.
pub fn run_args<I, T>(
    args: I,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            let rendered = error.render().to_string();
            let _ = if error.use_stderr() {
                write!(err, "{rendered}")
            } else {
                write!(out, "{rendered}")
            };
            return u8::try_from(error.exit_code()).unwrap_or(EXIT_INVALID_INPUT);
        }
    };
    let outcome = match cli.command {
        Command::Catalog(args) => catalog::run(&args, registry, out),
        Command::Check(args) => check::run(&args, registry, out),
        Command::Replay(args) => replay::run(&args, registry, out),
        Command::Schema(args) => schema::run(&args, registry, out),
        Command::Serve(args) => serve::run(&args, registry, out),
    };
    match outcome {
        Ok(()) => EXIT_OK,
        Err(failure) => {
            let _ = write!(err, "{failure}");
            failure.exit_code()
        }
    }
}
