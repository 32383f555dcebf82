//! `run_args` with the linked catalogs (the built-ins and `harness_prefetch`): summaries,
//! describe, and error rendering.

use dynamo_kv_router::plugins::PolicyRegistry;
use harness_prefetch as _;
use kv_router::{EXIT_INVALID_INPUT, EXIT_OK, run_args};

/// The linked registry: the built-in catalog (which `kv_router` links) and `harness_prefetch`.
fn registry() -> PolicyRegistry {
    PolicyRegistry::linked().unwrap_or_else(|error| panic!("{error}"))
}

fn run(args: &[&str]) -> (u8, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut all = vec!["kv-router"];
    all.extend_from_slice(args);
    let code = run_args(all, &registry(), &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Writes `yaml` to a file unique to this test, in Cargo's scratch directory for tests
/// (`target/tmp`, not the system's temporary directory, which nothing would clean), and returns
/// its path.
fn config_file(test: &str, yaml: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kv-router-in-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{test}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

#[test]
fn the_page_yaml_passes_check_with_a_summary() {
    let path = config_file(
        "page",
        "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
        parameters:
          max_blocks: 64
  prefill:
    type: dynamo-default-cost-fn
    hints: []
",
    );
    let (code, out, err) = run(&["check", &path]);
    assert_eq!(code, EXIT_OK, "{err}");
    assert_eq!(
        out,
        format!(
            "\
{path}: valid (router_mode kv, block_size 16, 2 roles)
prefill:
  worker selection: dynamo-default-cost-fn
  hints: none (`hints: []`, or no hint policy runs by default under `dynamo-default-cost-fn`)
decode:
  worker selection: dynamo-default-cost-fn
  hints, in order:
    1. harness_prefetch: listed
"
        )
    );
}

#[test]
fn the_summary_says_why_each_hint_runs() {
    let path = config_file(
        "reference",
        "\
router_mode: kv
block_size: 16
worker_selection:
  decode:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv_fetch
        parameters: {min_additional_blocks: 4}
      - type: harness_prefetch
        name: prefetch-a
        parameters: {max_blocks: 64}
  aggregated: kvcr
",
    );
    let (code, out, err) = run(&["check", &path]);
    assert_eq!(code, EXIT_OK, "{err}");
    assert!(
        out.contains(
            "\
aggregated:
  worker selection: kvcr
  hints, in order:
    1. kv_fetch: default under `kvcr`; sends the committed KV copies
decode:
  worker selection: kvcr (commits KV copies)
  hints, in order:
    1. kv_fetch: listed; sends the committed KV copies
    2. prefetch-a (harness_prefetch): listed
"
        ),
        "{out}"
    );
    let (code, out, _) = run(&["check", &path, "--router-mode", "least-loaded"]);
    assert_eq!(code, EXIT_INVALID_INPUT);
    assert!(out.is_empty());
}

#[test]
fn three_mistakes_report_the_first_in_file_order() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    hints:
      - type: kv_fecth
      - type: harness_prefetch
        parameters: {max_blocks: x}
  prefill: dynamo-default-cost
";
    let path = config_file("three", yaml);
    let (code, out, err) = run(&["check", &path]);
    assert_eq!(code, EXIT_INVALID_INPUT);
    assert!(out.is_empty());
    assert_eq!(
        err,
        format!(
            "\
error: worker_selection.decode.hints[0].type: unknown hint policy type `kv_fecth`; did you mean `kv_fetch`?; linked hint policy types: harness_prefetch, kv_fetch; run `kv-router catalog` to list the linked policies, or link the crate that provides it
  --> {path}:5:15
  |
3 |     type: kvcr
4 |     hints:
5 |       - type: kv_fecth
  |               ^
  = in role `decode`
"
        )
    );
}

#[test]
fn describe_shows_everything_known_about_a_policy() {
    let (code, out, err) = run(&["catalog", "describe", "kv_fetch"]);
    assert_eq!(code, EXIT_OK, "{err}");
    assert!(
        out.starts_with(
            "kv_fetch (hint policy)\n  summary:      Sends the booked worker a `kv.fetch` hint naming a peer"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "\n  defaults:     kvcr\n  commitments:  KV_COPY\n  parameters:   KvFetchConfig\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "  crate:        dynamo-router-catalog\n  source:       catalog/src/kv_fetch.rs:"
        ),
        "{out}"
    );
    assert!(
        out.ends_with("\"block_hashes\": [11, 22, 33]}`.\n"),
        "{out}"
    );

    let (code, out, _) = run(&["catalog", "describe", "kvcr", "--json"]);
    assert_eq!(code, EXIT_OK);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["kind"], "worker-selection");

    let (code, _, err) = run(&["catalog", "describe", "kv_fech"]);
    assert_eq!(code, EXIT_INVALID_INPUT);
    assert_eq!(
        err,
        "error: no linked policy is named `kv_fech`; did you mean `kv_fetch`?; linked policies: dynamo-default-cost-fn, harness_prefetch, kv_fetch, kvcr; run `kv-router catalog` to list them\n"
    );
}

#[test]
fn catalog_lists_every_policy() {
    let (code, out, _) = run(&["catalog"]);
    assert_eq!(code, EXIT_OK);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].starts_with("NAME"), "{out}");
    assert!(
        lines[3].starts_with("kv_fetch                hint              KV_COPY  kvcr"),
        "{out}"
    );
    let (code, out, _) = run(&["catalog", "--json"]);
    assert_eq!(code, EXIT_OK);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json.as_array().map(Vec::len), Some(4));
    assert_eq!(json[2]["defaults"], serde_json::json!(["kvcr"]));
}
