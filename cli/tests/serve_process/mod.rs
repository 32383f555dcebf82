//! A `kv-router serve` process for the CLI's tests: spawned on 127.0.0.1 port 0, its printed
//! lines collected, killed when dropped. Included with `#[path]` where it is needed.
#![allow(dead_code)]

use kv_router_service::http::loopback_client::LoopbackClient;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// A `kv-router serve` process and the lines it printed.
pub struct ServeProcess {
    pub child: Child,
    pub http: SocketAddr,
    pub sync: Option<String>,
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeProcess {
    pub fn spawn(args: &[&str]) -> ServeProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kv-router"))
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the kv-router binary starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let seen = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                seen.lock().unwrap().push(line);
            }
        });
        let (mut http, mut sync) = (None, None);
        let wants_sync = args.contains(&"--replica-sync-port");
        while http.is_none() || (wants_sync && sync.is_none()) {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the replica prints its addresses within 30 s");
            if let Some(address) = line.strip_prefix("kv-router serving on http://") {
                http = Some(address.parse().expect("a socket address"));
            }
            if let Some((_, endpoint)) = line.split_once(" publishing bookings on ") {
                sync = Some(endpoint.to_owned());
            }
        }
        ServeProcess {
            child,
            http: http.unwrap(),
            sync,
            lines,
        }
    }

    pub fn printed(&self, needle: &str) -> Option<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .find(|line| line.contains(needle))
            .cloned()
    }

    pub async fn client(&self) -> LoopbackClient {
        LoopbackClient::connect(self.http).await.expect("connect")
    }
}
