//! `kv-router serve [--config FILE] [--host 127.0.0.1] [--port 8092] [--simulate N]`: the router
//! as an HTTP service with upstream's selection-service routes, fed by the engines' ZMQ KV
//! events; `--simulate N` starts N simulated engines in the same process; `--gateway` adds the
//! OpenAI-compatible routes (see `serve_gateway`).

use crate::command_error::CommandError;
use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource, NatsSettings};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{RouterOptions, RouterSetup};
use kv_router_replay::BUILTIN_CONFIGS;
use kv_router_service::SelectionService;
use kv_router_service::engine_events::event_transport::ZmqTransport;
use kv_router_service::engine_events::ingress::{KvEventIngress, NoIngress};
use kv_router_service::engine_events::kv_listener::ListenerOptions;
use kv_router_service::engine_events::simulated_engines::{
    SimulatedBookings, SimulatedEngines, SimulationOptions,
};
use kv_router_service::engine_events::zmq_ingress::ZmqIngress;
use kv_router_service::serve::{BoundService, ServeOptions};
use std::io::Write;
use std::sync::Arc;

pub use crate::serve_args::ServeArgs;

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
    let ingest = kv_router_service::engine_events::ingest_thread::IngestThread::start()
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
