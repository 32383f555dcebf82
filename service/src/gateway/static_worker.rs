//! A worker of a static fleet, named on the command line (`--worker`) instead of registered
//! with `POST /workers`: `URL[,field=value…]`, where `URL` is its OpenAI base URL and each
//! field is one of `POST /workers`' (`worker_id`, `model_name`, `kv_events_endpoint`,
//! `replay_endpoint`, `block_size`, `router_hint_worker_type`, …), plus `hint_source=tcp://…`
//! for the control endpoint peers fetch KV from (it also marks the worker as accepting
//! hints). Enters: the flag's text; leaves: the registration body.

use crate::worker_record::WorkerRequest;
use serde_json::{Map, Value};

/// What a spec leaves out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticWorkerDefaults {
    /// `worker_id` when absent (the flag's position, from 1).
    pub worker_id: u64,
    /// `model_name` when absent (the gateway's model, when it serves one).
    pub model_name: Option<String>,
    /// `block_size` when absent (the configuration's).
    pub block_size: u32,
}

/// Why a `--worker` spec is not a registration.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--worker `{spec}`: {reason}; expected URL[,field=value…], e.g. --worker http://127.0.0.1:8000,kv_events_endpoint=tcp://127.0.0.1:5557"
)]
pub struct StaticWorkerError {
    /// The spec as given.
    pub spec: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The registration `spec` names.
pub fn parse_static_worker(
    spec: &str,
    defaults: &StaticWorkerDefaults,
) -> Result<WorkerRequest, StaticWorkerError> {
    let error = |reason: String| StaticWorkerError {
        spec: spec.to_owned(),
        reason,
    };
    let mut fields = Map::new();
    for (position, part) in spec.split(',').map(str::trim).enumerate() {
        match part.split_once('=') {
            None if position == 0 && !part.is_empty() => {
                fields.insert("endpoint".to_owned(), Value::String(part.to_owned()));
            }
            None => return Err(error(format!("`{part}` is not field=value"))),
            Some(("hint_source", value)) => {
                fields
                    .entry("router_hint_worker_type")
                    .or_insert_with(|| Value::String("aggregated".to_owned()));
                fields.insert(
                    "router_hint_source_control_endpoints".to_owned(),
                    serde_json::json!({"0": value}),
                );
            }
            Some((key, value)) => {
                if fields.insert(key.to_owned(), scalar(value)).is_some() {
                    return Err(error(format!("`{key}` is given twice")));
                }
            }
        }
    }
    if !fields.contains_key("endpoint") {
        return Err(error(
            "no endpoint (the worker's OpenAI base URL)".to_owned(),
        ));
    }
    fields
        .entry("worker_id")
        .or_insert(Value::from(defaults.worker_id));
    fields
        .entry("block_size")
        .or_insert(Value::from(defaults.block_size));
    if let Some(model) = &defaults.model_name {
        fields
            .entry("model_name")
            .or_insert_with(|| Value::String(model.clone()));
    }
    serde_json::from_value(Value::Object(fields)).map_err(|serde| error(serde.to_string()))
}

fn scalar(text: &str) -> Value {
    if let Ok(number) = text.parse::<u64>() {
        return Value::from(number);
    }
    match text {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> StaticWorkerDefaults {
        StaticWorkerDefaults {
            worker_id: 3,
            model_name: Some("tiny".to_owned()),
            block_size: 16,
        }
    }

    #[test]
    fn a_url_alone_takes_the_defaults() {
        let worker = parse_static_worker("http://127.0.0.1:8000", &defaults()).expect("parses");
        assert_eq!(worker.worker_id, 3);
        assert_eq!(worker.model_name, "tiny");
        assert_eq!(worker.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(worker.block_size, Some(16));
    }

    #[test]
    fn fields_override_the_defaults() {
        let worker = parse_static_worker(
            "http://h:1, worker_id=9,kv_events_endpoint=tcp://h:2,hint_source=tcp://h:3,block_size=32",
            &defaults(),
        )
        .expect("parses");
        assert_eq!(worker.worker_id, 9);
        assert_eq!(worker.kv_events_endpoint.as_deref(), Some("tcp://h:2"));
        assert_eq!(worker.block_size, Some(32));
        assert_eq!(
            worker.router_hint_worker_type.as_deref(),
            Some("aggregated")
        );
        let control = worker.router_hint_source_control_endpoints;
        assert_eq!(control.get(&0).map(String::as_str), Some("tcp://h:3"));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, words) in [
            ("", "not field=value"),
            ("kv_events_endpoint=tcp://h:2", "no endpoint"),
            ("http://h:1,oops", "`oops` is not field=value"),
            ("http://h:1,worker_id=1,worker_id=2", "given twice"),
            ("http://h:1,worker_id=x", "worker_id"),
        ] {
            let error = parse_static_worker(spec, &defaults()).expect_err(spec);
            assert!(error.to_string().contains(words), "{spec}: {error}");
        }
    }
}
