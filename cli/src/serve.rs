//! `kv-router serve [--config FILE] [--host 127.0.0.1] [--port 8092] [--simulate N]`: the router
//! as an HTTP service with upstream's selection-service routes, fed by the engines' ZMQ KV
//! events; `--simulate N` starts N simulated engines in the same process; `--gateway` adds the
//! OpenAI-compatible routes (see `serve_gateway`).

use crate::command_error::CommandError;
use clap::Args;
use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource, NatsSettings};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{RouterMode, RouterOptions, RouterSetup};
use kv_router_replay::BUILTIN_CONFIGS;
use kv_router_service::SelectionService;
use kv_router_service::event_transport::ZmqTransport;
use kv_router_service::ingress::{KvEventIngress, NoIngress};
use kv_router_service::kv_listener::ListenerOptions;
use kv_router_service::serve::{BoundService, ServeOptions};
use kv_router_service::simulated_engines::{
    SimulatedBookings, SimulatedEngines, SimulationOptions,
};
use kv_router_service::zmq_ingress::ZmqIngress;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

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

/// Runs `kv-router serve` until Ctrl-C.
pub fn run(
    args: &ServeArgs,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let (source, setup, file_nats) = load_setup(args, registry)?;
    let nats = args.nats.effective(file_nats.as_ref())?;
    let admin_token = crate::serve_admin::admin_token(args.admin_token_file.as_deref())?;
    let loader = crate::serve_admin::ServeConfigLoader {
        registry: registry.clone(),
        overrides: overrides(args),
        startup_nats: file_nats,
    };
    init_logging();
    if !args.workers.is_empty() && args.simulate.is_some() {
        return Err(serve_error(
            "--worker and --simulate both name the fleet; give one of them".to_owned(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| serve_error(format!("cannot start the async runtime: {error}")))?;
    // Engines' KV events are applied on a thread of their own, off the request threads.
    let ingest = kv_router_service::ingest_thread::IngestThread::start()
        .map_err(|error| serve_error(format!("cannot start the KV ingest thread: {error}")))?;
    let admin = AdminSetup {
        loader,
        source,
        token: admin_token,
    };
    let served = runtime.block_on(serve(args, setup, nats, admin, ingest.handle(), out));
    drop(ingest);
    served
}

/// Logs go to standard error, filtered by `RUST_LOG` (default: warnings and errors; e.g.
/// `RUST_LOG=kv_router_service=info` shows each gateway request's span with its worker).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,kv_router_service::admin=info")
    });
    // A process that set its own subscriber (a test, a program embedding the CLI) keeps it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn serve_error(message: String) -> CommandError {
    CommandError::Serve { message }
}

/// What the admin side needs from startup: how to load a reload, the text running now, and
/// the token.
struct AdminSetup {
    loader: crate::serve_admin::ServeConfigLoader,
    source: ConfigSource,
    token: Option<kv_router_service::admin::AdminToken>,
}

fn overrides(args: &ServeArgs) -> ConfigOverrides {
    ConfigOverrides {
        router_mode: args.router_mode,
    }
}

fn load_setup(
    args: &ServeArgs,
    registry: &PolicyRegistry,
) -> Result<(ConfigSource, RouterSetup, Option<NatsSettings>), CommandError> {
    let source = match &args.config {
        Some(path) => ConfigSource::read(path).map_err(|error| CommandError::Config {
            rendered: error.render(""),
        })?,
        None => {
            let (name, text) = BUILTIN_CONFIGS[0];
            ConfigSource::new(name, text)
        }
    };
    let (setup, nats) =
        config::load_with_nats(&source, registry, &overrides(args)).map_err(|error| {
            CommandError::Config {
                rendered: error.render(&source.text),
            }
        })?;
    Ok((source, setup, nats))
}

async fn serve(
    args: &ServeArgs,
    setup: RouterSetup,
    nats: Option<crate::serve_nats::EffectiveNats>,
    admin: AdminSetup,
    ingest: tokio::runtime::Handle,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let block_size = setup.block_size;
    let gateway = crate::serve_gateway::GatewaySetup::from_args(args)?;
    let static_workers = crate::serve_gateway::static_workers(args, block_size)?;
    let nats_ingress = match (&nats, args.no_kv_events) {
        (Some(nats), false) => {
            let checkpoint_every = args
                .snapshot
                .as_ref()
                .map(|_| std::time::Duration::from_secs(args.snapshot_interval));
            Some(nats.connect(checkpoint_every, ingest.clone(), out).await?)
        }
        _ => None,
    };
    let ingress: Arc<dyn KvEventIngress> = if args.no_kv_events {
        Arc::new(NoIngress)
    } else if let Some(nats) = &nats_ingress {
        Arc::clone(nats) as _
    } else {
        Arc::new(
            ZmqIngress::new(Arc::new(ZmqTransport), ListenerOptions::default()).on_runtime(ingest),
        )
    };
    let bookings = Arc::new(SimulatedBookings::default());
    let approximate = if args.no_kv_events {
        let config = args
            .approximate
            .config()
            .map_err(|error| serve_error(error.to_string()))?;
        writeln!(
            out,
            "routing without KV events: a booked prompt counts as cached on its worker for {} s (prune above {} blocks to {})",
            config.ttl.as_secs_f64(),
            config.max_tree_size,
            config.target_size()
        )?;
        Some(config)
    } else {
        None
    };
    let predicted_ttl = crate::approximate_args::predicted_ttl(args.router_predicted_ttl_secs)
        .map_err(|error| serve_error(error.to_string()))?;
    if let Some(ttl) = predicted_ttl {
        writeln!(
            out,
            "predicting alongside KV events: a booked prompt counts as cached on its worker for {} s, until its events arrive",
            ttl.as_secs_f64()
        )?;
    }
    let options = RouterOptions {
        approximate,
        predicted_ttl,
        ..RouterOptions::default()
    };
    let mut service = SelectionService::new(setup, options, ingress);
    if args.simulate.is_some() {
        service = service.with_observer(Arc::clone(&bookings) as _);
    }
    let service = Arc::new(service);
    let serve_options = ServeOptions {
        host: args.host.clone(),
        port: args.port,
    };
    let mut bound = BoundService::bind(Arc::clone(&service), &serve_options)
        .await
        .map_err(|error| {
            serve_error(format!(
                "cannot listen on {}:{}: {error}; pick another --port or --host",
                args.host, args.port
            ))
        })?;
    let address = bound
        .local_addr()
        .map_err(|error| serve_error(error.to_string()))?;
    writeln!(out, "kv-router serving on http://{address}")?;
    let admin = crate::serve_admin::start(
        &service,
        admin.loader,
        args.config.clone(),
        &admin.source,
        admin.token,
        address,
        out,
    )?;
    bound = bound.with_admin(admin);
    if let Some(gateway) = gateway {
        let gateway = gateway.start(&service);
        writeln!(
            out,
            "OpenAI gateway on http://{address}/v1 serving: {}",
            gateway.model_names().join(", ")
        )?;
        bound = bound.with_gateway(gateway);
    }
    crate::serve_gateway::register_static_workers(&service, static_workers, out)?;
    let _engines = match args.simulate {
        Some(engines) => {
            let simulation = SimulationOptions {
                engines,
                block_size,
                ..SimulationOptions::default()
            };
            let started = SimulatedEngines::start(&service, &bookings, &simulation)
                .await
                .map_err(|error| serve_error(format!("cannot start simulated engines: {error}")))?;
            for registration in &started.registrations {
                writeln!(
                    out,
                    "simulated engine: worker {} publishing KV events on {}",
                    registration.worker_id,
                    registration
                        .kv_events_endpoint
                        .as_deref()
                        .unwrap_or_default()
                )?;
            }
            Some(started)
        }
        None => None,
    };
    let replicas = crate::serve_replicas::ReplicaSetup::from_args(args)?;
    let started = replicas
        .start(&service, &args.host, nats_ingress.as_ref(), out)
        .await?;
    // Over NATS (`--nats` without `--replica-sync-port`): join, then report ready.
    let nats_sync = match &nats {
        Some(nats) => {
            nats.start_replica_sync(&service, args.replica_sync_port.is_some(), out)
                .await?
        }
        None => None,
    };
    if let Some(sync) = &nats_sync {
        writeln!(out, "{}", sync.warm_start(nats_ingress.as_deref()).await)?;
    }
    out.flush()?;
    let served = bound
        .run(crate::serve_replicas::shutdown_signal())
        .await
        .map_err(|error| serve_error(format!("the service stopped: {error}")));
    started.shut_down(&service, out).await;
    served
}
