//! The router's Prometheus text, parsed by the official Python client's exposition-format
//! parser (`.ci/parse_prometheus.py`, run with the interpreter `KV_ROUTER_PYTHON` names, which
//! `.ci/run` sets up with `.ci/requirements.txt`): it parses, every sample carries the value the
//! snapshot holds, and label values with quotes, backslashes and newlines come back intact.

mod router_fixtures;

use dynamo_kv_router::metrics::{MetricsSnapshot, PolicyFailures};
use dynamo_kv_router::router::{Role, RouterMode};
use router_fixtures::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The parser's output: per sample name and labels, the value.
type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// The Python interpreter with `prometheus_client`, or `None` after reporting the skip.
fn python(test: &str) -> Option<PathBuf> {
    match std::env::var_os("KV_ROUTER_PYTHON") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            test_skip::skip_unless_ci(
                test,
                "set KV_ROUTER_PYTHON to a Python with prometheus-client (.ci/run makes one)",
            );
            None
        }
    }
}

/// Runs the official parser on `text`; panics with its message if the text does not parse.
fn parse(python: &PathBuf, text: &str) -> (Value, Samples) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.ci/parse_prometheus.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", python.display()));
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(text.as_bytes())
        .expect("the parser reads the text");
    let output = child.wait_with_output().expect("the parser finishes");
    assert!(
        output.status.success(),
        "the official parser rejected the router's text: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Value = serde_json::from_slice(&output.stdout).expect("the parser prints JSON");
    let mut samples = Samples::new();
    for family in parsed["families"].as_array().expect("families") {
        for sample in family["samples"].as_array().expect("samples") {
            let labels = sample["labels"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().expect("label value").to_owned()))
                .collect();
            let name = sample["name"].as_str().expect("name").to_owned();
            samples.insert((name, labels), sample["value"].as_f64().expect("value"));
        }
    }
    (parsed, samples)
}

fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples.get(&(name.to_owned(), labels)).copied()
}

fn family_type<'a>(parsed: &'a Value, name: &str) -> Option<&'a str> {
    parsed["families"]
        .as_array()?
        .iter()
        .find(|family| family["name"] == name)?["type"]
        .as_str()
}

#[test]
fn a_live_routers_text_parses_with_the_values_it_counted() {
    let Some(python) = python("a_live_routers_text_parses_with_the_values_it_counted") else {
        return;
    };
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Aggregated,
            role_policies(
                "longest",
                LongestPrefix,
                vec![
                    hint("refuses", BrokenHint { panic: false }),
                    hint("explodes", BrokenHint { panic: true }),
                ],
            ),
        )],
    );
    for id in [1, 2] {
        router
            .register_worker(hinting(id, Role::Aggregated))
            .unwrap();
    }
    for n in 0..5 {
        let id = format!("r{n}");
        router
            .book(&request(&id, Role::Aggregated, tokens(64, n)))
            .unwrap();
        router.release(&id);
    }
    let _ = router.book(&request("nobody", Role::Decode, tokens(16, 9)));
    router.apply_event(&stored(worker(1), 0, &tokens(64, 0), 4));
    let snapshot = router.metrics();
    let (parsed, samples) = parse(&python, &router.prometheus_text());
    assert_eq!(value(&samples, "kv_router_bookings_total", &[]), Some(5.0));
    assert_eq!(family_type(&parsed, "kv_router_bookings"), Some("counter"));
    for (kind, count) in [("error", 5.0), ("panic", 5.0)] {
        let policy = if kind == "error" {
            "refuses"
        } else {
            "explodes"
        };
        let labels = [
            ("role", "aggregated"),
            ("policy_type", policy),
            ("name", policy),
            ("kind", kind),
        ];
        assert_eq!(
            value(&samples, "kv_router_hint_policy_failures_total", &labels),
            Some(count),
            "{samples:?}"
        );
    }
    assert_eq!(
        family_type(&parsed, "kv_router_booking_latency_seconds"),
        Some("histogram")
    );
    let count = value(&samples, "kv_router_booking_latency_seconds_count", &[]);
    assert_eq!(count, Some(snapshot.booking_latency.count as f64));
    let inf = value(
        &samples,
        "kv_router_booking_latency_seconds_bucket",
        &[("le", "+Inf")],
    );
    assert_eq!(inf, count, "the +Inf bucket counts every booking");
    // Every number the parser read is one the snapshot holds: nothing is negative or NaN.
    assert!(samples.values().all(|v| v.is_finite() && *v >= 0.0));
}

#[test]
fn label_values_with_quotes_backslashes_and_newlines_round_trip() {
    let Some(python) = python("label_values_with_quotes_backslashes_and_newlines_round_trip")
    else {
        return;
    };
    let names = [
        "we\"ird\\name",
        "line\nbreak",
        "brace} comma, equals= space",
        "\\n is not a newline",
        "ünïcödé",
    ];
    let snapshot = MetricsSnapshot {
        bookings: 7,
        hint_policy_failures: names
            .iter()
            .enumerate()
            .map(|(index, name)| PolicyFailures {
                role: "decode".into(),
                policy_type: "kv_fetch".into(),
                name: (*name).into(),
                errors: index as u64 + 1,
                panics: 0,
            })
            .collect(),
        ..MetricsSnapshot::default()
    };
    let (_, samples) = parse(&python, &snapshot.to_prometheus());
    for (index, name) in names.iter().enumerate() {
        let labels = [
            ("role", "decode"),
            ("policy_type", "kv_fetch"),
            ("name", *name),
            ("kind", "error"),
        ];
        assert_eq!(
            value(&samples, "kv_router_hint_policy_failures_total", &labels),
            Some(index as f64 + 1.0),
            "label {name:?} did not round-trip: {samples:?}"
        );
    }
    assert_eq!(value(&samples, "kv_router_bookings_total", &[]), Some(7.0));
}
