//! The router build as a user runs it: it holds the built-ins and both example catalogs, and
//! the configurations shipped beside it pass `check`.

use std::process::{Command, Output};

/// Runs the router build in this crate's directory, where the shipped configurations are.
fn router_build(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_router-build"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the router-build binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn catalog_lists_the_built_ins_and_both_example_catalogs() {
    let output = router_build(&["catalog"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let names: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        [
            "dynamo-default-cost-fn",
            "harness_prefetch",
            "kv_fetch",
            "kvcr",
            "session-affinity",
        ],
        "{stdout}"
    );

    let output = router_build(&["catalog", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let origins: Vec<(&str, &str, &str)> = listed
        .as_array()
        .expect("a list of policies")
        .iter()
        .map(|policy| {
            (
                policy["name"].as_str().unwrap_or_default(),
                policy["kind"].as_str().unwrap_or_default(),
                policy["crate"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        origins,
        [
            (
                "dynamo-default-cost-fn",
                "worker-selection",
                "dynamo-router-catalog"
            ),
            ("harness_prefetch", "hint", "harness-prefetch"),
            ("kv_fetch", "hint", "dynamo-router-catalog"),
            ("kvcr", "worker-selection", "dynamo-router-catalog"),
            ("session-affinity", "worker-selection", "session-affinity"),
        ]
    );
}

#[test]
fn the_pages_configuration_passes_check() {
    let output = router_build(&["check", "page.yaml"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "\
page.yaml: valid (router_mode kv, block_size 16, 2 roles)
prefill:
  worker selection: dynamo-default-cost-fn
  hints: none (`hints: []`, or no hint policy runs by default under `dynamo-default-cost-fn`)
decode:
  worker selection: dynamo-default-cost-fn
  hints, in order:
    1. harness_prefetch: listed
"
    );
}

#[test]
fn kvcr_with_prefetch_and_session_affinity_passes_check() {
    let output = router_build(&["check", "kvcr-session.yaml"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "\
kvcr-session.yaml: valid (router_mode kv, block_size 16, 2 roles)
prefill:
  worker selection: session-affinity
  hints: none (`hints: []`, or no hint policy runs by default under `session-affinity`)
decode:
  worker selection: kvcr (commits KV copies)
  hints, in order:
    1. kv_fetch: listed; sends the committed KV copies
    2. harness_prefetch: listed
"
    );
}

#[test]
fn a_hint_the_build_does_not_link_fails_check() {
    let dir = std::env::temp_dir().join(format!("router-build-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("misspelt.yaml");
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/page.yaml"))
        .expect("page.yaml is shipped");
    std::fs::write(&path, page.replace("harness_prefetch", "harness_prefech")).expect("written");
    let output = router_build(&["check", path.to_str().expect("UTF-8 path")]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("did you mean `harness_prefetch`?"),
        "{stderr}"
    );
}
