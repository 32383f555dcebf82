//! Child processes of the bench: started with their output in a log file, killed when the
//! bench drops them or dies (PR_SET_PDEATHSIG), and measured through /proc.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(program: &Path, args: &[String], log: PathBuf) -> std::io::Result<Self> {
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill the child when
        // the bench dies, so nothing outlives a crashed or interrupted run.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn()?;
        Ok(Proc { child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `None` while running, else how it ended.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(error) => Some(error.to_string()),
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        let pid = self.child.id() as i32;
        // SAFETY: signalling our own child by its pid.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// `pid` and its descendants (from /proc/*/stat parent ids).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(parent) = stat_fields(child).and_then(|fields| fields.get(1)?.parse().ok())
            {
                parents.push((child, parent));
            }
        }
    }
    let mut tree = vec![pid];
    let mut index = 0;
    while index < tree.len() {
        let current = tree[index];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == current)
                .map(|(c, _)| *c),
        );
        index += 1;
    }
    tree
}

/// Fields of /proc/PID/stat after the command name (state is field 0).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// CPU seconds (user + system) of `pid` and its descendants.
pub fn cpu_seconds(pid: u32) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    process_tree(pid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|fields| {
            let user: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            let system: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            (user + system) / ticks
        })
        .sum()
}

/// (VmRSS, VmHWM) in KiB, summed over `pid` and its descendants.
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let mut rss = 0;
    let mut hwm = 0;
    for process in process_tree(pid) {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{process}/status")) else {
            continue;
        };
        for line in status.lines() {
            let value = |line: &str| {
                line.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("VmRSS:") {
                rss += value(line);
            } else if line.starts_with("VmHWM:") {
                hwm += value(line);
            }
        }
    }
    (rss, hwm)
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or(0)
}
