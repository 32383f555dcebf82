//! Interoperability with real libzmq: a Python fake engine on pyzmq + msgspec
//! (`service/scripts/pyzmq_engine.py`) publishes vLLM-layout events and serves replays; the
//! service indexes them, replays a lost batch, and books the worker holding the prefix.
//! The interpreter comes from `KV_ROUTER_PYTHON` (`.ci/run` points it at `target/ci-venv`, with
//! pyzmq and msgspec pinned in `.ci/requirements.txt`); without it the test prints a `SKIPPED`
//! line, and under CI it fails.

mod common;

use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const TEST: &str = "pyzmq_interop";

/// The Python engine; killed when dropped.
struct PythonEngine {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for PythonEngine {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"op": "quit"}));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PythonEngine {
    fn start(python: &str) -> Result<(Self, Value), String> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pyzmq_engine.py");
        let mut child = Command::new(python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| format!("cannot run {python}: {error}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("no pipes to the Python engine".to_owned());
        };
        let mut engine = Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        let endpoints = engine.read().map_err(|error| {
            format!(
                "the Python engine did not start ({error}); does {python} have pyzmq and msgspec?"
            )
        })?;
        Ok((engine, endpoints))
    }

    fn read(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|error| error.to_string())?;
        serde_json::from_str(&line).map_err(|error| format!("{error}: {line:?}"))
    }

    fn command(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("write to the Python engine");
        self.read().expect("answer from the Python engine")
    }
}

fn store(prompt: &[u32], first: usize, count: usize, send: bool) -> Value {
    json!({
        "op": "store",
        "hashes": (first..first + count).map(|i| 5000 + i as u64).collect::<Vec<_>>(),
        "parent": (first > 0).then(|| 5000 + first as u64 - 1),
        "tokens": prompt[first * 16..(first + count) * 16].to_vec(),
        "block_size": 16,
        "send": send,
    })
}

async fn wait_for(
    client: &mut kv_router_service::http::loopback_client::LoopbackClient,
    engine: &mut PythonEngine,
    prompt: &[u32],
    blocks: u64,
) {
    for _ in 0..200 {
        if device_blocks(client, prompt, 1).await == blocks {
            return;
        }
        engine.command(json!({"op": "empty"}));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = device_blocks(client, prompt, 1).await;
    panic!("worker 1 holds {seen} blocks of the prompt, expected {blocks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pyzmq_engine_feeds_the_index_and_replays() {
    let Ok(python) = std::env::var("KV_ROUTER_PYTHON") else {
        test_skip::skip_unless_ci(
            TEST,
            "set KV_ROUTER_PYTHON to a Python with pyzmq and msgspec (.ci/run does)",
        );
        return;
    };
    let (mut engine, endpoints) = match PythonEngine::start(&python) {
        Ok(started) => started,
        Err(reason) => {
            test_skip::skip_unless_ci(TEST, &reason);
            return;
        }
    };
    let (service, stats) = start_zmq().await;
    let mut client = service.client().await;
    let events = endpoints["events"].as_str().expect("events endpoint");
    let replay = endpoints["replay"].as_str().expect("replay endpoint");
    let created = client
        .post_json("/workers", &engine_registration(1, events, replay))
        .await
        .expect("register");
    expect_status(&created, 201);
    assert_eq!(created.json()["lifecycle"], json!("schedulable"));

    let prompt = tokens(8 * 16, 21);
    engine.command(store(&prompt, 0, 4, true));
    wait_for(&mut client, &mut engine, &prompt, 4).await;
    engine.command(store(&prompt, 4, 2, false));
    engine.command(store(&prompt, 6, 2, true));
    wait_for(&mut client, &mut engine, &prompt, 8).await;
    assert!(stats.replays.load(std::sync::atomic::Ordering::Relaxed) >= 1);

    let booked = client
        .post_json(
            "/select_and_reserve",
            &json!({"model_name": "m", "selection_id": "py1", "token_ids": prompt}),
        )
        .await
        .expect("book");
    expect_status(&booked, 200);
    assert_eq!(booked.json()["worker_id"], json!(1));
    assert_eq!(booked.json()["overlap"]["gpu"], json!(128));
    expect_status(
        &client.delete("/reservations/py1").await.expect("free"),
        200,
    );
}
