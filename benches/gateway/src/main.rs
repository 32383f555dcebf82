//! `gateway-bench`: the side-by-side bench of OpenAI gateways in front of fake engines.
//!
//! - `gateway-bench run`: the whole bench (see README.md).
//! - `gateway-bench engines --count 4`: only the fake engines (prints their addresses).
//! - `gateway-bench fixture DIR`: writes the word-level tokenizer our gateway loads.
//! - `gateway-bench relay --port P --engine URL…`: the floor of a hop through our HTTP stack
//!   (the `relay` gateway; see `relay.rs`).

mod bench;
mod client;
mod engine;
mod procs;
mod relay;
mod rounds;
mod table;
mod words;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    about = "Side-by-side bench of kv-router's gateway, sglang-router, vllm-router and direct engine calls"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every scenario against every gateway and print the table.
    Run(Box<bench::RunArgs>),
    /// Start fake engines on 127.0.0.1 and serve until killed.
    Engines {
        #[arg(long, default_value_t = 4)]
        count: usize,
        #[arg(long, default_value_t = 1024)]
        lru_blocks: usize,
        /// Microseconds before each streamed token.
        #[arg(long, default_value_t = 0)]
        token_delay_us: u64,
        #[arg(long, default_value = "bench")]
        model: String,
        /// Write the engines' addresses here (JSON) once they listen.
        #[arg(long)]
        ports_file: Option<PathBuf>,
    },
    /// Write the word-level tokenizer fixture (tokenizer.json, tokenizer_config.json).
    Fixture { dir: PathBuf },
    /// Relay completions round robin to the engines through our gateway's HTTP stack, with
    /// none of its per-request work (the `relay` gateway), until killed.
    Relay {
        #[arg(long)]
        port: u16,
        /// An engine's base URL (`http://127.0.0.1:8000`); repeat for each engine.
        #[arg(long = "engine", required = true)]
        engines: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => {
                tokio::select! {
                    outcome = bench::run(*args) => outcome,
                    _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
                }
            }
            Command::Engines {
                count,
                lru_blocks,
                token_delay_us,
                model,
                ports_file,
            } => {
                let options = engine::EngineOptions {
                    lru_blocks,
                    token_delay: Duration::from_micros(token_delay_us),
                    model,
                };
                let addresses = engine::start(count, options)
                    .await
                    .map_err(|e| e.to_string())?;
                let text = serde_json::to_string_pretty(&addresses).unwrap_or_default();
                println!("{text}");
                if let Some(path) = ports_file {
                    let partial = path.with_extension("tmp");
                    std::fs::write(&partial, &text).map_err(|e| e.to_string())?;
                    std::fs::rename(&partial, &path).map_err(|e| e.to_string())?;
                }
                let mut terminate =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .map_err(|e| e.to_string())?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
                Ok(())
            }
            Command::Fixture { dir } => words::write_fixture(&dir).map_err(|e| e.to_string()),
            Command::Relay { port, engines } => relay::serve(port, engines).await,
        }
    });
    // Children are killed by their Drop (and PR_SET_PDEATHSIG) before the process exits.
    if let Err(error) = outcome {
        eprintln!("gateway-bench: {error}");
        std::process::exit(1);
    }
}
