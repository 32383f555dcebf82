//! The `kv-router` binary as a user runs it: exit codes and messages, with whatever catalog is
//! linked (the cases do not depend on which policies it holds).

use std::path::PathBuf;
use std::process::{Command, Output};

fn kv_router(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kv-router"))
        .args(args)
        .output()
        .expect("the kv-router binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `yaml` to a file unique to this test, in Cargo's scratch directory for tests
/// (`target/tmp`, not the system's temporary directory, which nothing would clean), and returns
/// its path.
fn config_file(test: &str, yaml: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kv-router-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{test}.yaml"));
    std::fs::write(&path, yaml).expect("config written");
    path
}

#[test]
fn catalog_lists_and_prints_json() {
    let output = kv_router(&["catalog"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let output = kv_router(&["catalog", "--json"]);
    assert_eq!(output.status.code(), Some(0));
    let parsed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(parsed.is_array(), "{parsed}");
}

#[test]
fn describing_an_unknown_policy_fails_with_exit_2() {
    let output = kv_router(&["catalog", "describe", "no-such-policy"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("error: no linked policy is named `no-such-policy`"),
        "{stderr}"
    );
}

#[test]
fn check_accepts_a_valid_configuration() {
    let path = config_file("valid", "router_mode: round-robin\nblock_size: 32\n");
    let output = kv_router(&["check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        format!(
            "{}: valid (router_mode round-robin, block_size 32, 0 roles)\n",
            path.display()
        )
    );
}

#[test]
fn the_router_mode_option_overrides_the_file() {
    let path = config_file("override", "router_mode: kv\n");
    let output = kv_router(&["check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("no role is configured"));
    let output = kv_router(&["check", path.to_str().unwrap(), "--router-mode", "random"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("router_mode random"));
    let output = kv_router(&["check", path.to_str().unwrap(), "--router-mode", "fastest"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("unknown router mode `fastest`"));
}

#[test]
fn three_mistakes_report_the_first_with_its_line_and_column() {
    let yaml = "\
router_mode: kv
block_size: 16
worker_selection:
  prefill:
    type: no-such-selection-policy
  decode:
    type: another-missing-policy
    parameters: [1, 2]
    hints:
      - type: missing-hint
";
    let path = config_file("three-mistakes", yaml);
    let output = kv_router(&["check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(
            "error: worker_selection.prefill.type: unknown worker-selection policy type `no-such-selection-policy`"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("  --> {}:5:11\n", path.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("5 |     type: no-such-selection-policy\n  |           ^\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("another-missing-policy`"), "{stderr}");
}

#[test]
fn yaml_mistakes_are_rendered_with_a_caret() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    hint: []
";
    let path = config_file("unknown-key", yaml);
    let output = kv_router(&["check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr),
        format!(
            "\
error: unknown field `hint`, expected one of type, parameters, hints, shadow; remove the key or correct its spelling
  --> {}:4:5
  |
2 |   decode:
3 |     type: kvcr
4 |     hint: []
  |     ^
",
            path.display()
        )
    );
}

#[test]
fn duplicate_keys_alias_bombs_and_missing_files_fail_with_exit_2() {
    let path = config_file("duplicate", "block_size: 16\nblock_size: 32\n");
    let output = kv_router(&["check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("duplicate mapping key `block_size`"));

    let mut bomb = String::from(
        "worker_selection:\n  decode:\n    type: x\n    parameters:\n      a: &a [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for (name, previous) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d"), ("f", "e")] {
        let items = vec![format!("*{previous}"); 10].join(", ");
        bomb.push_str(&format!("      {name}: &{name} [{items}]\n"));
    }
    let path = config_file("bomb", &bomb);
    let output = kv_router(&["check", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("safety budget"),
        "{}",
        text(&output.stderr)
    );

    let output = kv_router(&["check", "/nonexistent/router.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).starts_with("error: cannot read the configuration"));
}

#[test]
fn usage_mistakes_exit_2() {
    let output = kv_router(&["chek"]);
    assert_eq!(output.status.code(), Some(2));
    let output = kv_router(&["check"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn serve_refuses_a_bad_configuration_or_a_taken_port() {
    let path = config_file(
        "serve_bad",
        "worker_selection:\n  aggregated:\n    type: no-such-policy\n",
    );
    let output = kv_router(&[
        "serve",
        "--config",
        path.to_str().unwrap_or_default(),
        "--port",
        "0",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("no-such-policy"),
        "{}",
        text(&output.stderr)
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port().to_string();
    let output = kv_router(&["serve", "--host", "127.0.0.1", "--port", &port]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("cannot listen on 127.0.0.1"),
        "{}",
        text(&output.stderr)
    );
}

/// Stops the child process when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_with_simulated_engines_answers_over_http() {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kv-router"))
        .args(["serve", "--port", "0", "--simulate", "2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kv-router serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let _running = Running(child);
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let address = first
        .strip_prefix("kv-router serving on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();
    let engines: Vec<String> = lines.by_ref().take(2).filter_map(Result::ok).collect();
    assert!(
        engines
            .iter()
            .all(|line| line.starts_with("simulated engine: worker")),
        "{engines:?}"
    );

    let mut stream = std::net::TcpStream::connect(&address).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET /ready HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"schedulable_workers\":2"), "{answer}");
}

#[test]
fn help_and_version_exit_0_on_standard_output() {
    let output = kv_router(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = text(&output.stdout);
    assert!(help.contains("Usage: kv-router <COMMAND>"), "{help}");
    for command in ["catalog", "check", "replay"] {
        assert!(
            help.contains(&format!("\n  {command} ")),
            "{command}: {help}"
        );
    }
    assert!(output.stderr.is_empty());
    for command in ["check", "replay", "catalog"] {
        let output = kv_router(&[command, "--help"]);
        assert_eq!(output.status.code(), Some(0), "{command}");
        assert!(text(&output.stdout).contains(&format!("Usage: kv-router {command}")));
    }
    let output = kv_router(&["replay", "--help"]);
    for option in ["--config", "--trace", "--workers", "--json", "--report"] {
        assert!(text(&output.stdout).contains(option), "{option}");
    }
    let output = kv_router(&["--version"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stdout).starts_with("kv-router "));
}

#[test]
fn no_command_and_a_bad_option_value_exit_2_with_usage() {
    let output = kv_router(&[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("Usage: kv-router <COMMAND>"));
    let output = kv_router(&["replay", "--workers", "many"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("--workers"),
        "{}",
        text(&output.stderr)
    );
}
