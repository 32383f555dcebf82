//! A real `nats-server` for the tests and benches: JetStream on a temp dir, on 127.0.0.1 only,
//! killed (and its store removed) when dropped. Included with `#[path]` where it is needed.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `nats-server` binary, if there is one.
pub fn nats_server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KV_ROUTER_NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

/// A `nats-server` with JetStream on 127.0.0.1, stopped (and its store removed) when dropped.
pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts one, or says why the test is skipped (`None`).
    pub fn start(test: &str) -> Option<NatsServer> {
        let Some(binary) = nats_server_binary() else {
            test_skip::skip_unless_ci(
                test,
                "no nats-server on PATH or in KV_ROUTER_NATS_SERVER (apt-get install nats-server)",
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port on 127.0.0.1")
            .port();
        let dir =
            std::env::temp_dir().join(format!("kv-router-nats-{}-{port}", std::process::id()));
        let mut server = NatsServer {
            binary,
            port,
            dir,
            child: None,
        };
        server.spawn();
        Some(server)
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the process and waits until it listens.
    pub fn spawn(&mut self) {
        let child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("nats-server did not listen on 127.0.0.1:{}", self.port);
    }

    /// Kills it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
