//! `kv-router schema` checked by an independent validator: Python's `jsonschema` (pinned in
//! `.ci/requirements.txt`, found through `KV_ROUTER_PYTHON`) through
//! `tests/support/validate_config_schema.py`.
//!
//! - Every example YAML of the repository (every `*.yaml` outside `target/` and hidden
//!   directories, and the README's `yaml` blocks) validates.
//! - Shape mistakes (unknown keys, wrong types, out-of-range parameters, unknown policy types,
//!   bad hint or shadow entries) are rejected, each flagged at its place.
//! - Mistakes a schema cannot express are accepted by it, and `kv-router check` still rejects
//!   them with its `file:line:col` message.
//!
//! The schema is emitted with the command line in process, with the example catalogs linked
//! (`harness_prefetch`, `session-affinity`) so that the examples' policies are known; the real
//! binary's own schema (the built-in catalog only) is checked without Python.

use dynamo_kv_router::plugins::prelude::*;
use harness_prefetch as _;
use kv_router::{EXIT_INVALID_INPUT, EXIT_OK, run_args};
use serde_json::{Value, json};
use session_affinity as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the cli crate is inside the workspace")
        .to_path_buf()
}

fn run_with(registry: &PolicyRegistry, args: &[&str]) -> (u8, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut all = vec!["kv-router"];
    all.extend_from_slice(args);
    let code = run_args(all, registry, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).expect("UTF-8 output"),
        String::from_utf8(err).expect("UTF-8 errors"),
    )
}

/// The built-in catalog and the example catalogs linked into this test.
fn linked() -> PolicyRegistry {
    PolicyRegistry::linked().unwrap_or_else(|error| panic!("{error}"))
}

fn run(args: &[&str]) -> (u8, String, String) {
    run_with(&linked(), args)
}

/// `kv-router schema`, parsed.
fn schema() -> Value {
    let (code, out, err) = run(&["schema"]);
    assert_eq!(code, EXIT_OK, "{err}");
    serde_json::from_str(&out).expect("the schema is JSON")
}

/// The interpreter named by `KV_ROUTER_PYTHON`, or `None` after a skip line.
fn python(test: &str) -> Option<String> {
    match std::env::var("KV_ROUTER_PYTHON") {
        Ok(python) => Some(python),
        Err(_) => {
            test_skip::skip_unless_ci(
                test,
                "set KV_ROUTER_PYTHON to a Python with jsonschema and PyYAML (.ci/requirements.txt; .ci/run does)",
            );
            None
        }
    }
}

/// One error the validator reported: where (`$.worker_selection.decode`) and what.
#[derive(Debug)]
struct SchemaError {
    path: String,
    message: String,
}

/// Validates each `(name, yaml)` against `schema` with the Python validator; the errors of
/// each document, in order.
fn validate(python: &str, schema: &Value, documents: &[(String, String)]) -> Vec<Vec<SchemaError>> {
    let script = root().join("cli/tests/support/validate_config_schema.py");
    let request = json!({
        "schema": schema,
        "documents": documents
            .iter()
            .map(|(name, text)| json!({"name": name, "text": text}))
            .collect::<Vec<_>>(),
    });
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {python}: {error}"));
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        stdin
            .write_all(request.to_string().as_bytes())
            .expect("the request is written");
    }
    let output = child.wait_with_output().expect("the script finishes");
    assert!(
        output.status.success(),
        "{} failed (are jsonschema and PyYAML installed? pip install -r .ci/requirements.txt): {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
    assert_eq!(
        answer["schema_error"],
        Value::Null,
        "the emitted schema is not a valid draft 2020-12 schema"
    );
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), documents.len());
    results
        .iter()
        .map(|result| {
            result["errors"]
                .as_array()
                .expect("errors")
                .iter()
                .map(|error| SchemaError {
                    path: error["path"].as_str().unwrap_or_default().to_owned(),
                    message: error["message"].as_str().unwrap_or_default().to_owned(),
                })
                .collect()
        })
        .collect()
}

/// Every `*.yaml`/`*.yml` under `dir`, outside `target/` and hidden directories.
fn yaml_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|entry| entry.path()).collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                yaml_files(&path, found);
            }
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            found.push(path);
        }
    }
}

/// The README's `yaml` blocks, named `README.md:LINE`.
fn readme_blocks() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, line) in readme.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```yaml" => current = Some((index + 1, String::new())),
            None => {}
            Some(_) if line.trim_start().starts_with("```") => {
                if let Some((start, text)) = current.take() {
                    blocks.push((format!("README.md:{start}"), text));
                }
            }
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    blocks
}

/// Every example configuration of the repository, by name.
fn repository_examples() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    let mut documents: Vec<(String, String)> = files
        .iter()
        .map(|path| {
            let name = path
                .strip_prefix(&root)
                .unwrap_or(path)
                .display()
                .to_string();
            let text = std::fs::read_to_string(path).expect("readable YAML");
            (name, text)
        })
        .collect();
    documents.extend(readme_blocks());
    documents
}

fn names_of(errors: &[SchemaError]) -> String {
    errors
        .iter()
        .map(|error| format!("{}: {}", error.path, error.message))
        .collect::<Vec<_>>()
        .join("\n  ")
}

#[test]
fn the_binary_prints_a_draft_2020_12_schema_of_its_linked_policies() {
    let output = Command::new(env!("CARGO_BIN_EXE_kv-router"))
        .arg("schema")
        .output()
        .expect("the kv-router binary runs");
    assert_eq!(output.status.code(), Some(0));
    let schema: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(
        schema["$defs"]["selection_type"]["enum"],
        json!(["dynamo-default-cost-fn", "kvcr"])
    );
    assert_eq!(schema["$defs"]["hint_type"]["enum"], json!(["kv_fetch"]));
    let multiplier = &schema["$defs"]["parameters:kvcr"]["properties"]["shared_cache_multiplier"];
    assert_eq!(multiplier["minimum"], json!(0.0));
    assert_eq!(multiplier["maximum"], json!(1.0));
    assert_eq!(multiplier["default"], json!(0.0));
}

#[test]
fn describe_shows_each_parameter_or_says_they_are_not_described() {
    let (code, out, err) = run(&["catalog", "describe", "kvcr"]);
    assert_eq!(code, EXIT_OK, "{err}");
    let row = out
        .lines()
        .find(|line| line.trim_start().starts_with("shared_cache_multiplier "))
        .unwrap_or_else(|| panic!("no shared_cache_multiplier row: {out}"));
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .collect();
    assert_eq!(
        cells[..3],
        ["shared_cache_multiplier", "number 0.0..=1.0", "0.0"],
        "{row}"
    );
    assert!(
        cells[3].contains("fraction of a locally cached block"),
        "{row}"
    );

    let (code, out, _) = run(&["catalog", "describe", "kvcr", "--json"]);
    assert_eq!(code, EXIT_OK);
    let json: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        json["parameters_schema"]["properties"]["seed"]["type"],
        json!(["integer", "null"])
    );

    struct Silent;
    impl HintPolicy for Silent {
        fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
            Ok(Vec::new())
        }
    }
    let mut registry = PolicyRegistry::new();
    registry
        .register_hint_policy(
            "silent",
            Arc::new(|_| Ok(HintPolicyConstructor::shared(Silent))),
            [],
        )
        .expect("registers");
    let (code, out, _) = run_with(&registry, &["catalog", "describe", "silent"]);
    assert_eq!(code, EXIT_OK);
    assert!(out.contains("\n  parameters not described\n"), "{out}");
}

#[test]
fn every_example_yaml_in_the_repository_validates() {
    let Some(python) = python("config_schema_examples") else {
        return;
    };
    let documents = repository_examples();
    let names: Vec<&str> = documents.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "examples/router-build/page.yaml",
        "examples/router-build/kvcr-session.yaml",
        "replay/configs/kvcr-kv-fetch.yaml",
        "replay/configs/default-cost-no-hints.yaml",
        "replay/configs/round-robin.yaml",
        "benches/gateway/configs/cache-affine.yaml",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} not found in {names:?}"
        );
    }
    assert!(
        names
            .iter()
            .filter(|name| name.starts_with("README.md:"))
            .count()
            >= 5,
        "{names:?}"
    );
    let mut documents = documents;
    // No file uses `shadow` yet: its forms, so that the schema is known to accept them.
    documents.push((
        "shadow entries (written here)".to_owned(),
        "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    shadow:\n      - kvcr\n      - type: kvcr\n        name: kvcr-half\n        parameters: {shared_cache_multiplier: 0.5}\n        hints:\n          - type: kv_fetch\n            parameters: {min_additional_blocks: 2}\n".to_owned(),
    ));
    let results = validate(&python, &schema(), &documents);
    let failures: Vec<String> = documents
        .iter()
        .zip(&results)
        .filter(|(_, errors)| !errors.is_empty())
        .map(|((name, _), errors)| format!("{name}:\n  {}", names_of(errors)))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A valid role mapping to start the broken cases from.
const DECODE: &str = "worker_selection:\n  decode:\n";

#[test]
fn the_schema_rejects_shape_mistakes_where_they_are() {
    let Some(python) = python("config_schema_mistakes") else {
        return;
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "unknown top-level key",
            "worker_selektion:\n  decode: kvcr\n".into(),
            "$",
        ),
        (
            "bad router_mode",
            "router_mode: fastest\n".into(),
            "$.router_mode",
        ),
        ("zero block_size", "block_size: 0\n".into(), "$.block_size"),
        (
            "block_size of the wrong type",
            "block_size: sixteen\n".into(),
            "$.block_size",
        ),
        (
            "unknown role",
            "worker_selection:\n  aggregate: kvcr\n".into(),
            "$.worker_selection",
        ),
        (
            "unknown bare selection type",
            "worker_selection:\n  prefill: kvcrr\n".into(),
            "$.worker_selection.prefill",
        ),
        (
            "unknown selection type in a mapping",
            format!("{DECODE}    type: dynamo-default-cost\n"),
            "$.worker_selection.decode.type",
        ),
        (
            "unknown key in a role entry",
            format!("{DECODE}    type: kvcr\n    hint: []\n"),
            "$.worker_selection.decode",
        ),
        (
            "out-of-range selection parameter",
            format!("{DECODE}    type: kvcr\n    parameters: {{shared_cache_multiplier: 1.5}}\n"),
            "$.worker_selection.decode.parameters.shared_cache_multiplier",
        ),
        (
            "negative selection parameter",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    parameters: {{router_temperature: -1}}\n"
            ),
            "$.worker_selection.decode.parameters.router_temperature",
        ),
        (
            "selection parameter of the wrong type",
            format!("{DECODE}    type: kvcr\n    parameters: {{seed: seven}}\n"),
            "$.worker_selection.decode.parameters.seed",
        ),
        (
            "misspelt selection parameter",
            format!("{DECODE}    type: kvcr\n    parameters: {{shared_cache_multipler: 0.5}}\n"),
            "$.worker_selection.decode.parameters",
        ),
        (
            "another type's parameter",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    parameters: {{shared_cache_multiplier: 0.5}}\n"
            ),
            "$.worker_selection.decode.parameters",
        ),
        (
            "parameters not a mapping",
            format!("{DECODE}    type: kvcr\n    parameters: 5\n"),
            "$.worker_selection.decode.parameters",
        ),
        (
            "example policy's parameter out of range",
            format!("{DECODE}    type: session-affinity\n    parameters: {{max_sessions: 0}}\n"),
            "$.worker_selection.decode.parameters.max_sessions",
        ),
        (
            "hints not a list",
            format!("{DECODE}    type: kvcr\n    hints: kv_fetch\n"),
            "$.worker_selection.decode.hints",
        ),
        (
            "hint entry as a bare type",
            format!("{DECODE}    type: kvcr\n    hints:\n      - kv_fetch\n"),
            "$.worker_selection.decode.hints[0]",
        ),
        (
            "unknown hint type",
            format!("{DECODE}    type: kvcr\n    hints:\n      - type: kv_fecth\n"),
            "$.worker_selection.decode.hints[0].type",
        ),
        (
            "unknown key in a hint entry",
            format!(
                "{DECODE}    type: kvcr\n    hints:\n      - type: kv_fetch\n        params: {{}}\n"
            ),
            "$.worker_selection.decode.hints[0]",
        ),
        (
            "out-of-range hint parameter",
            format!(
                "{DECODE}    type: kvcr\n    hints:\n      - type: kv_fetch\n        parameters: {{min_additional_blocks: 0}}\n"
            ),
            "$.worker_selection.decode.hints[0].parameters.min_additional_blocks",
        ),
        (
            "example hint's parameter of the wrong type",
            format!(
                "{DECODE}    type: kvcr\n    hints:\n      - type: harness_prefetch\n        parameters: {{max_blocks: -3}}\n"
            ),
            "$.worker_selection.decode.hints[0].parameters.max_blocks",
        ),
        (
            "hint name not a string",
            format!(
                "{DECODE}    type: kvcr\n    hints:\n      - type: kv_fetch\n        name: [a]\n"
            ),
            "$.worker_selection.decode.hints[0].name",
        ),
        (
            "unknown bare shadow type",
            format!("{DECODE}    type: kvcr\n    shadow: [kvcrr]\n"),
            "$.worker_selection.decode.shadow[0]",
        ),
        (
            "shadow not a list",
            format!("{DECODE}    type: kvcr\n    shadow: kvcr\n"),
            "$.worker_selection.decode.shadow",
        ),
        (
            "out-of-range shadow parameter",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    shadow:\n      - type: kvcr\n        parameters: {{shared_cache_multiplier: 2}}\n"
            ),
            "$.worker_selection.decode.shadow[0].parameters.shared_cache_multiplier",
        ),
        (
            "nested shadow",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    shadow:\n      - type: kvcr\n        shadow: [kvcr]\n"
            ),
            "$.worker_selection.decode.shadow[0]",
        ),
        (
            "unknown hint type in a shadow",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    shadow:\n      - type: kvcr\n        hints:\n          - type: kv_fecth\n"
            ),
            "$.worker_selection.decode.shadow[0].hints[0].type",
        ),
        (
            "nats without url",
            "nats:\n  stream: DYNAMO_KV_EVENTS\n".into(),
            "$.nats",
        ),
        (
            "unknown nats key",
            "nats:\n  url: nats://127.0.0.1:4222\n  stream_name: x\n".into(),
            "$.nats",
        ),
    ];
    let documents: Vec<(String, String)> = cases
        .iter()
        .map(|(name, yaml, _)| ((*name).to_owned(), yaml.clone()))
        .collect();
    let results = validate(&python, &schema(), &documents);
    let mut failures = Vec::new();
    for ((name, yaml, path), errors) in cases.iter().zip(&results) {
        if !errors.iter().any(|error| error.path == *path) {
            failures.push(format!(
                "{name}: expected an error at {path}\n{yaml}  got:\n  {}",
                names_of(errors)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Writes `yaml` to a file unique to this test, in Cargo's scratch directory for tests
/// (`target/tmp`, not the system's temporary directory, which nothing would clean), and returns
/// its path.
fn config_file(name: &str, yaml: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kv-router-config-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).expect("config written");
    path.display().to_string()
}

#[test]
fn mistakes_beyond_the_schema_pass_it_and_kv_router_check_still_catches_them() {
    let Some(python) = python("config_schema_check_only") else {
        return;
    };
    // (file name, YAML, part of the message, line:col of the mistake)
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "repeated-hint-type",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    hints:\n      - type: kv_fetch\n      - type: kv_fetch\n"
            ),
            "kv_fetch",
            "5:9",
        ),
        (
            "duplicate-hint-name",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    hints:\n      - type: kv_fetch\n        name: a\n      - type: kv_fetch\n        name: a\n"
            ),
            "`a`",
            "8:15",
        ),
        (
            "malformed-hint-name",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    hints:\n      - type: kv_fetch\n        name: has space\n"
            ),
            "has space",
            "6:15",
        ),
        (
            "hints-outside-kv-mode",
            "router_mode: round-robin\nworker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: kv_fetch\n".into(),
            "round-robin",
            "6:7",
        ),
        (
            "missing-kv-copy-sender",
            format!(
                "{DECODE}    type: kvcr\n    parameters: {{shared_cache_multiplier: 0.5}}\n    hints: []\n"
            ),
            "kv_fetch",
            "5:12",
        ),
        (
            "several-kv-copy-senders",
            format!(
                "{DECODE}    type: kvcr\n    parameters: {{shared_cache_multiplier: 0.5}}\n    hints:\n      - type: kv_fetch\n        name: one\n      - type: kv_fetch\n        name: two\n"
            ),
            "`one`",
            "6:7",
        ),
        (
            "no-roles",
            "worker_selection: {}\n".into(),
            "no role is configured",
            "1:19",
        ),
        (
            "bad-nats-url",
            "worker_selection:\n  decode: kvcr\nnats:\n  url: localhost:4222\n".into(),
            "nats://host:port",
            "4:8",
        ),
        (
            "infinite-parameter",
            format!(
                "{DECODE}    type: dynamo-default-cost-fn\n    parameters: {{overlap_score_credit: .inf}}\n"
            ),
            "not a finite number",
            "4:40",
        ),
    ];
    let documents: Vec<(String, String)> = cases
        .iter()
        .map(|(name, yaml, _, _)| ((*name).to_owned(), yaml.clone()))
        .collect();
    let results = validate(&python, &schema(), &documents);
    let registry = linked();
    let mut failures = Vec::new();
    for ((name, yaml, message, at), errors) in cases.iter().zip(&results) {
        if !errors.is_empty() {
            failures.push(format!(
                "{name}: the schema rejects it, so it does not belong here\n{yaml}  {}",
                names_of(errors)
            ));
        }
        let path = config_file(name, yaml);
        let (code, _, err) = run_with(&registry, &["check", &path]);
        let location = format!("--> {path}:{at}\n");
        if code != EXIT_INVALID_INPUT || !err.contains(&location) || !err.contains(message) {
            failures.push(format!(
                "{name}: expected `kv-router check` to exit {EXIT_INVALID_INPUT} with `{message}` at {location}got {code}:\n{err}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
