//! The custom router build as a user runs it: the policy it registers by hand before
//! `kv_router::run_with_registry` is listed, described and usable in a configuration, next to
//! the built-ins it links, and the command line's exit codes are those of `kv-router`.

use std::path::PathBuf;
use std::process::{Command, Output};

fn build(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custom-router-build"))
        .args(args)
        .output()
        .expect("the custom-router-build binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn config_file(name: &str, yaml: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("custom-router-build-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, yaml).expect("config written");
    path
}

#[test]
fn the_hand_registered_policy_is_listed_next_to_the_built_ins() {
    let output = build(&["catalog"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let listing = text(&output.stdout);
    for policy in [
        "session_warmup",
        "kv_fetch",
        "kvcr",
        "dynamo-default-cost-fn",
    ] {
        assert!(listing.contains(policy), "{policy}: {listing}");
    }
    let output = build(&["catalog", "describe", "session_warmup"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("warm the first blocks of the session's context"));
}

#[test]
fn a_configuration_using_it_checks_and_its_mistakes_exit_2() {
    let valid = config_file(
        "warmup.yaml",
        "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: session_warmup\n        parameters: {blocks: 4}\n",
    );
    let output = build(&["check", valid.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("1. session_warmup: listed"));

    let wrong = config_file(
        "warmup-wrong.yaml",
        "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: session_warmup\n        parameters: {blokcs: 4}\n",
    );
    let output = build(&["check", wrong.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let message = text(&output.stderr);
    assert!(
        message.contains("worker_selection.decode.hints[0].parameters.blokcs: unknown field"),
        "{message}"
    );
}

#[test]
fn help_exits_0_and_usage_mistakes_exit_2() {
    let output = build(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stdout).contains("Commands:"));
    let output = build(&["catalog", "describe", "no_such_policy"]);
    assert_eq!(output.status.code(), Some(2));
    let output = build(&["frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
}
