//! `kv-router serve --gateway`: the OpenAI-compatible routes beside the selection API.
//! `--model NAME=PATH` names a served model and its local tokenizer files (repeatable),
//! `--worker URL[,field=value…]` registers a static fleet at start, and the other gateway
//! flags set retries, timeouts and where the hint travels. Tokenizers load before the port is
//! bound, so a wrong path fails at start.

use crate::command_error::CommandError;
use crate::serve_args::ServeArgs;
use kv_router_service::SelectionService;
use kv_router_service::gateway::model_tokenizer::ModelTokenizer;
use kv_router_service::gateway::static_worker::{StaticWorkerDefaults, parse_static_worker};
use kv_router_service::gateway::{Gateway, GatewayOptions, ServedModel};
use kv_router_service::worker_record::{WorkerLifecycle, WorkerRequest};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn error(message: String) -> CommandError {
    CommandError::Serve { message }
}

/// The gateway flags, checked, with every tokenizer loaded.
pub struct GatewaySetup {
    models: Vec<ServedModel>,
    options: GatewayOptions,
}

/// A `--model NAME=PATH`, split.
fn model_flag(flag: &str) -> Result<(String, PathBuf), CommandError> {
    match flag.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(path)))
        }
        _ => Err(error(format!(
            "--model {flag}: expected NAME=PATH, the name clients send as `model` and the \
             model's directory holding tokenizer.json (e.g. --model llama=/models/Llama-3.1-8B)"
        ))),
    }
}

impl GatewaySetup {
    /// The gateway's setup, or `None` without `--gateway`. Loads every `--model`'s tokenizer.
    pub fn from_args(args: &ServeArgs) -> Result<Option<Self>, CommandError> {
        if !args.gateway {
            if !args.models.is_empty() {
                return Err(error(
                    "--model serves a model on the OpenAI routes; add --gateway to turn them on"
                        .to_owned(),
                ));
            }
            return Ok(None);
        }
        if args.models.is_empty() {
            return Err(error(
                "--gateway needs at least one --model NAME=PATH (the model's directory with its \
                 tokenizer.json and tokenizer_config.json)"
                    .to_owned(),
            ));
        }
        let mut models: Vec<ServedModel> = Vec::new();
        for flag in &args.models {
            let (name, path) = model_flag(flag)?;
            if models.iter().any(|model| model.name == name) {
                return Err(error(format!("--model {name} is given twice")));
            }
            let tokenizer = ModelTokenizer::load(&path)
                .map_err(|load| error(format!("--model {flag}: {load}")))?;
            models.push(ServedModel {
                name,
                tokenizer: Arc::new(tokenizer),
            });
        }
        if args.worker_timeout_secs == 0 {
            return Err(error("--worker-timeout-secs must be at least 1".to_owned()));
        }
        let options = GatewayOptions {
            max_retries: args.max_retries,
            first_byte_timeout: Duration::from_secs(args.worker_timeout_secs),
            hint_delivery: args.hint_delivery,
            max_model_len: args.max_model_len,
            ..GatewayOptions::default()
        };
        Ok(Some(Self { models, options }))
    }

    /// The gateway over `service`.
    pub fn start(self, service: &Arc<SelectionService>) -> Arc<Gateway> {
        Gateway::start(Arc::clone(service), self.models, self.options)
    }
}

/// The `--worker` registrations, checked before anything is registered.
pub fn static_workers(
    args: &ServeArgs,
    block_size: u32,
) -> Result<Vec<WorkerRequest>, CommandError> {
    let only_model = match args.models.as_slice() {
        [only] => model_flag(only).ok().map(|(name, _)| name),
        _ => None,
    };
    let mut workers: Vec<WorkerRequest> = Vec::new();
    for (index, spec) in args.workers.iter().enumerate() {
        let defaults = StaticWorkerDefaults {
            worker_id: index as u64 + 1,
            model_name: only_model.clone(),
            block_size,
        };
        let worker = parse_static_worker(spec, &defaults).map_err(|bad| error(bad.to_string()))?;
        if workers
            .iter()
            .any(|other| other.worker_id == worker.worker_id)
        {
            return Err(error(format!(
                "--worker {spec}: worker_id {} is given twice",
                worker.worker_id
            )));
        }
        workers.push(worker);
    }
    Ok(workers)
}

/// Registers `workers` as `POST /workers` would, printing each one's state.
pub fn register_static_workers(
    service: &SelectionService,
    workers: Vec<WorkerRequest>,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    for worker in workers {
        let id = worker.worker_id;
        let record = service
            .upsert_worker(worker)
            .map_err(|refused| error(format!("--worker {id}: {refused}")))?;
        let state = match record.lifecycle {
            WorkerLifecycle::Schedulable => "schedulable".to_owned(),
            _ => format!(
                "not schedulable: {}",
                record.not_schedulable_reasons.join("; ")
            ),
        };
        writeln!(
            out,
            "worker {id}: {} (model {}), {state}",
            record.endpoint.as_deref().unwrap_or("no endpoint"),
            record.model_name
        )?;
    }
    Ok(())
}
