//! The command line of `kv-router serve`: every flag, its default and its help text, as clap
//! reads them. `serve` runs the service from them; `serve_gateway`, `serve_nats`,
//! `serve_replicas` and `serve_admin` each read their own part.

use clap::Args;
use dynamo_kv_router::router::RouterMode;
use std::path::PathBuf;

/// Arguments of `kv-router serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The YAML configuration; without it, the built-in kvcr + kv_fetch configuration.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8092)]
    pub port: u16,
    /// Start N simulated engines (workers 1..=N) that register, publish real ZMQ KV events
    /// and act on their hints.
    #[arg(long, value_name = "N")]
    pub simulate: Option<usize>,
    /// Route without KV events, as upstream's `--no-kv-events`: workers need no
    /// `kv_events_endpoint`, and the router predicts each worker's cache from its own bookings
    /// (a booked prompt's blocks count as cached on that worker for --router-ttl-secs).
    #[arg(long)]
    pub no_kv_events: bool,
    /// The prediction settings of --no-kv-events.
    #[command(flatten)]
    pub approximate: crate::approximate_args::ApproximateArgs,
    /// With KV events: a booked prompt's blocks also count as cached on the booked worker for
    /// SECS, until the engine's own events arrive (upstream `router_predicted_ttl_secs`; off
    /// by default).
    #[arg(long, value_name = "SECS", conflicts_with = "no_kv_events")]
    pub router_predicted_ttl_secs: Option<f64>,
    /// Overrides the file's `router_mode` (kv, round-robin, random, least-loaded).
    #[arg(long, value_name = "MODE")]
    pub router_mode: Option<RouterMode>,
    /// KV events over NATS JetStream (`--nats nats://host:port`) instead of ZMQ.
    #[command(flatten)]
    pub nats: crate::serve_nats::NatsArgs,
    /// Run as one of several replicas: publish this replica's bookings on
    /// tcp://HOST:PORT (0 picks a free port, printed at start).
    #[arg(long, value_name = "PORT")]
    pub replica_sync_port: Option<u16>,
    /// A peer replica (repeatable): `tcp://host:port` is its booking-sync endpoint (subscribed
    /// to), `http://host:port` its HTTP address (asked for its state at start).
    #[arg(long = "peer", value_name = "URL")]
    pub peers: Vec<String>,
    /// Largest answer, in MiB, taken from a `--peer http://…` at warm start (its `GET /dump`
    /// of every cached block); a larger one is refused and the replica starts cold (or from
    /// its snapshot). The dump of 64 workers × 16,384 blocks is about 76 MB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub peer_dump_max_mib: u64,
    /// Seconds a `--peer http://…` may take to answer at warm start (`GET /workers` and its
    /// `GET /dump`, bodies included) before the next peer is tried; a 64 × 16,384-block dump
    /// takes a few seconds on a loaded machine.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub peer_timeout_secs: u64,
    /// Write the router's state here periodically and on shutdown, and start from it.
    #[arg(long, value_name = "PATH")]
    pub snapshot: Option<PathBuf>,
    /// Seconds between snapshot writes.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub snapshot_interval: u64,
    /// Serve the OpenAI-compatible routes (`/v1/completions`, `/v1/chat/completions`,
    /// `/v1/models`): tokenize, book the best worker, forward with its hint, stream back.
    #[arg(long)]
    pub gateway: bool,
    /// A model the gateway serves (repeatable): NAME is what clients send as `model` and the
    /// `model_name` its workers register with; PATH is its local directory holding
    /// tokenizer.json (and tokenizer_config.json with its chat_template).
    #[arg(long = "model", value_name = "NAME=PATH")]
    pub models: Vec<String>,
    /// A worker of a static fleet (repeatable): its OpenAI base URL, then `POST /workers`
    /// fields, e.g. `http://10.0.0.5:8000,kv_events_endpoint=tcp://10.0.0.5:5557`.
    #[arg(long = "worker", value_name = "URL[,FIELD=VALUE...]")]
    pub workers: Vec<String>,
    /// Where a booked worker reads its hint envelope: `body` (vLLM's
    /// `kv_transfer_params.kv_hint`) or `header` (`x-dynamo-kv-hint`, for SGLang).
    #[arg(long, value_name = "WHERE", default_value = "body")]
    pub hint_delivery: kv_router_service::gateway::hint_delivery::HintDelivery,
    /// Re-bookings on another worker after a worker fails before its first byte.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub max_retries: usize,
    /// Seconds a worker may take to send the first byte of its answer before the request is
    /// re-booked elsewhere (the first streamed token; for a request that is not streamed, the
    /// whole answer).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub worker_timeout_secs: u64,
    /// The context limit in tokens for every served model, instead of its tokenizer's
    /// `model_max_length`.
    #[arg(long, value_name = "TOKENS")]
    pub max_model_len: Option<usize>,
    /// Turn on the admin routes (`GET`/`POST /admin/config`: show or reload the running
    /// configuration) for callers presenting this file's token as `Authorization: Bearer`;
    /// without it, the token in KV_ROUTER_ADMIN_TOKEN, and without either the routes are off.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
}
