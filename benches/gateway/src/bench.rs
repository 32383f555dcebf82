//! The orchestrated run: start the fake engines, then for each gateway in turn start it, run
//! the prefix-hit, added-latency and throughput scenarios (sampling its RSS and CPU), stop it,
//! and print one side-by-side table plus a JSON file.

use crate::client::Client;
use crate::engine::{BLOCK_SIZE, EngineAddress};
use crate::procs::{self, Proc};
use crate::rounds::{self, RoundFigures};
use crate::table::{fmt, layout};
use crate::words::{self, Rng};
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Gateways to run, in order (`direct` first: the ceiling of the setup, and with
    /// `--latency-baseline separate` what the others' added latency is against).
    /// Besides the default list: `ours-predicted`, `ours-approx` (no KV events: upstream's
    /// approximate mode, `--no-kv-events`), `ours-nohints`, `nginx` (a plain reverse proxy,
    /// the floor of one HTTP hop) and `relay` (our HTTP stack and worker connections with
    /// none of the gateway's per-request work: the floor of a hop through hyper and axum).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "direct,ours,ours-affine,sglang,vllm,vllm-kv"
    )]
    pub gateways: Vec<String>,
    /// Our router binary (`cargo build --release -p kv-router` in the repo root).
    #[arg(long, default_value = "../../target/release/kv-router")]
    pub kv_router: PathBuf,
    /// A router configuration for `ours` (`kv-router serve --config`); without it, the
    /// built-in kvcr + kv_fetch configuration.
    #[arg(long)]
    pub ours_config: Option<PathBuf>,
    /// The bench venv holding sglang-router and vllm-router.
    #[arg(long, default_value = "target/bench-venv")]
    pub venv: PathBuf,
    /// The word-level tokenizer directory given to our gateway (`--model bench=DIR`).
    #[arg(long, default_value = "target/bench-model")]
    pub model_dir: PathBuf,
    /// Where logs go.
    #[arg(long, default_value = "target/logs")]
    pub log_dir: PathBuf,
    /// The JSON report.
    #[arg(long, default_value = "target/gateway-bench.json")]
    pub out: PathBuf,
    /// Fake engines.
    #[arg(long, default_value_t = 4)]
    pub engines: usize,
    /// KV blocks each fake engine caches (16 words each) before evicting.
    #[arg(long, default_value_t = 1024)]
    pub lru_blocks: usize,
    /// Measured sequential requests per prompt size (after the warm-up).
    #[arg(long, default_value_t = 300)]
    pub latency_requests: usize,
    #[arg(long, default_value_t = 30)]
    pub latency_warmup: usize,
    /// Prompt sizes (words = tokens) of the latency scenario.
    #[arg(long, value_delimiter = ',', default_value = "512,8192")]
    pub latency_words: Vec<usize>,
    /// What a gateway's added latency is taken against: `paired`, direct calls to the engines
    /// interleaved with the gateway's requests in blocks (so that both see the machine in the
    /// same state), or `separate`, the direct run of the round (measured minutes apart).
    #[arg(long, value_enum, default_value_t = Baseline::Paired)]
    pub latency_baseline: Baseline,
    /// Requests in a row to one side before switching, with `--latency-baseline paired`.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub latency_block: u32,
    /// Concurrent streams of the throughput scenario.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Streamed tokens per answer in the throughput scenario.
    #[arg(long, default_value_t = 256)]
    pub answer_tokens: usize,
    /// Prompt words of the throughput scenario.
    #[arg(long, default_value_t = 128)]
    pub throughput_prompt_words: usize,
    /// Measured seconds of the throughput scenario (after the warm-up).
    #[arg(long, default_value_t = 15)]
    pub throughput_secs: u64,
    #[arg(long, default_value_t = 3)]
    pub throughput_warmup_secs: u64,
    /// Shared-prefix scenario: requests, prefixes, words per prefix and per unique suffix,
    /// concurrency.
    #[arg(long, default_value_t = 1000)]
    pub prefix_requests: usize,
    #[arg(long, default_value_t = 16)]
    pub prefixes: usize,
    #[arg(long, default_value_t = 2000)]
    pub prefix_words: usize,
    #[arg(long, default_value_t = 64)]
    pub suffix_words: usize,
    #[arg(long, default_value_t = 16)]
    pub prefix_concurrency: usize,
    /// Seconds a gateway may take to answer its first completion.
    #[arg(long, default_value_t = 90)]
    pub ready_timeout_secs: u64,
    /// Runs of the whole list of gateways, in turns; with more than one, each round's table
    /// is printed and then every figure's median and range over the rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
}

/// What added latency is measured against (see [`RunArgs::latency_baseline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Baseline {
    /// Direct calls interleaved with the gateway's requests, in blocks.
    Paired,
    /// The round's own direct run.
    Separate,
}

#[derive(Debug, Default, Serialize, Clone)]
pub struct Latency {
    pub requests: usize,
    pub errors: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

/// One of our gateway's own steps over a latency scenario, from its `/metrics` histogram.
#[derive(Debug, Default, Serialize, Clone)]
pub struct StepTime {
    pub count: f64,
    pub mean_us: f64,
    /// Upper bound of the histogram bucket holding the 99th percentile.
    pub p99_bucket_us: Option<f64>,
}

/// Our gateway's steps over a latency scenario (`None` for the peers, which have no such
/// metrics).
#[derive(Debug, Default)]
struct Steps {
    tokenize: Option<StepTime>,
    booking: Option<StepTime>,
}

impl Steps {
    /// `, tokenize mean … µs, booking mean … µs` for the steps measured (empty for none).
    fn summary(&self) -> String {
        [("tokenize", &self.tokenize), ("booking", &self.booking)]
            .into_iter()
            .filter_map(|(name, step)| {
                step.as_ref()
                    .map(|s| format!(", {name} mean {:.0} µs", s.mean_us))
            })
            .collect()
    }
}

/// The histogram of our gateway's tokenizing, on its `/metrics`.
const TOKENIZE_METRIC: &str = "kv_router_gateway_tokenize_seconds";
/// The histogram of our gateway's bookings, on its `/metrics`.
const BOOKING_METRIC: &str = "kv_router_gateway_booking_seconds";

#[derive(Debug, Default, Serialize, Clone)]
pub struct Throughput {
    pub completed: u64,
    pub errors: u64,
    pub incomplete_streams: u64,
    pub seconds: f64,
    pub requests_per_s: f64,
    pub tokens_per_s: f64,
    pub gateway_cpu_seconds: f64,
    pub gateway_cpu_ms_per_request: f64,
}

#[derive(Debug, Default, Serialize, Clone)]
pub struct Memory {
    pub idle_rss_kib: u64,
    pub peak_rss_kib: u64,
    pub hwm_kib: u64,
}

#[derive(Debug, Default, Serialize, Clone)]
pub struct PrefixHits {
    pub requests: usize,
    pub errors: usize,
    pub seconds: f64,
    pub prompt_blocks: u64,
    pub hit_blocks: u64,
    pub hit_rate: f64,
    /// Requests each engine got.
    pub per_engine_requests: Vec<u64>,
    /// The hit rate of perfect prefix affinity without eviction (first use of a prefix misses).
    pub ideal_hit_rate: f64,
    /// The prompt blocks that perfect affinity would find cached.
    pub ideal_hit_blocks: u64,
}

#[derive(Debug, Default, Serialize, Clone)]
pub struct GatewayResult {
    pub name: String,
    pub command: String,
    pub error: Option<String>,
    pub prefix: Option<PrefixHits>,
    pub latency: BTreeMap<String, Latency>,
    /// Direct calls to the engines interleaved with this gateway's latency requests
    /// (`--latency-baseline paired`), per prompt size.
    pub paired_direct: BTreeMap<String, Latency>,
    /// p50/p99 of this gateway minus its baseline's (the paired direct calls, else the round's
    /// direct run), per prompt size.
    pub added_p50_us: BTreeMap<String, f64>,
    pub added_p99_us: BTreeMap<String, f64>,
    /// Our gateway's tokenizing and booking times, per prompt size.
    pub tokenize: BTreeMap<String, StepTime>,
    pub booking: BTreeMap<String, StepTime>,
    pub throughput: Option<Throughput>,
    pub memory: Option<Memory>,
}

/// What the load generator sends to: one gateway URL, or the engines round-robin.
#[derive(Clone)]
struct Target {
    bases: Arc<Vec<String>>,
    next: Arc<AtomicUsize>,
}

impl Target {
    fn url(&self, path: &str) -> String {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len();
        format!("{}{}", self.bases[index], path)
    }
}

fn bar(length: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(length);
    bar.set_style(
        ProgressStyle::with_template("  {prefix:<28} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_owned());
    bar
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn completion_body(prompt: &str, max_tokens: usize, stream: bool) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({
            "model": "bench", "prompt": prompt, "max_tokens": max_tokens, "stream": stream,
            "temperature": 0
        }))
        .unwrap_or_default(),
    )
}

async fn engine_stats(client: &Client, engines: &[EngineAddress]) -> Vec<Value> {
    let mut out = Vec::new();
    for engine in engines {
        let stats = match client.get(&format!("{}/_bench/stats", engine.http)).await {
            Ok((200, body)) => serde_json::from_slice(&body).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        out.push(stats);
    }
    out
}

async fn reset_engines(client: &Client, engines: &[EngineAddress]) {
    reset_engines_with(client, engines, "").await;
}

async fn reset_engines_with(client: &Client, engines: &[EngineAddress], query: &str) {
    for engine in engines {
        let _ = client
            .post(
                &format!("{}/_bench/reset{query}", engine.http),
                Bytes::from_static(b"{}"),
            )
            .await;
    }
}

/// Scenario 3: shared prefixes, each request prefix + unique suffix.
async fn prefix_scenario(
    args: &RunArgs,
    client: &Client,
    target: &Target,
    engines: &[EngineAddress],
) -> PrefixHits {
    let mut rng = Rng::new(3);
    let prefixes: Vec<String> = (0..args.prefixes)
        .map(|_| words::random_words(&mut rng, args.prefix_words))
        .collect();
    let mut seen = vec![false; args.prefixes];
    let mut ideal_hits = 0u64;
    let mut total_blocks = 0u64;
    let bodies: Vec<Bytes> = (0..args.prefix_requests)
        .map(|_| {
            let which = rng.below(args.prefixes as u64) as usize;
            let suffix = words::random_words(&mut rng, args.suffix_words);
            total_blocks += ((args.prefix_words + args.suffix_words) / BLOCK_SIZE) as u64;
            if seen[which] {
                ideal_hits += (args.prefix_words / BLOCK_SIZE) as u64;
            }
            seen[which] = true;
            completion_body(&format!("{} {suffix}", prefixes[which]), 8, false)
        })
        .collect();
    reset_engines(client, engines).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let progress = bar(bodies.len() as u64, "prefix-hit (shared prefixes)");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.prefix_concurrency {
        let (bodies, next, errors) = (bodies.clone(), next.clone(), errors.clone());
        let (client, target, progress) = (client.clone(), target.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(index) else { break };
                let answer = client
                    .post(&target.url("/v1/completions"), body.clone())
                    .await;
                if !answer.is_ok_and(|a| a.ok()) {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                progress.inc(1);
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let seconds = started.elapsed().as_secs_f64();
    progress.finish_and_clear();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = engine_stats(client, engines).await;
    let field = |value: &Value, name: &str| value.get(name).and_then(Value::as_u64).unwrap_or(0);
    let prompt_blocks: u64 = stats.iter().map(|s| field(s, "prompt_blocks")).sum();
    let hit_blocks: u64 = stats.iter().map(|s| field(s, "hit_blocks")).sum();
    PrefixHits {
        requests: bodies.len(),
        errors: errors.load(Ordering::Relaxed),
        seconds,
        prompt_blocks,
        hit_blocks,
        hit_rate: if prompt_blocks == 0 {
            0.0
        } else {
            hit_blocks as f64 / prompt_blocks as f64
        },
        per_engine_requests: stats.iter().map(|s| field(s, "requests")).collect(),
        ideal_hit_rate: if total_blocks == 0 {
            0.0
        } else {
            ideal_hits as f64 / total_blocks as f64
        },
        ideal_hit_blocks: ideal_hits,
    }
}

/// A histogram as `/metrics` shows it: sum, count, and buckets (le, cumulative count).
struct HistogramSnapshot {
    sum: f64,
    count: f64,
    buckets: Vec<(f64, f64)>,
}

/// Our gateway's `/metrics` text (`None` when it cannot be read).
async fn metrics_text(client: &Client, metrics_url: &str) -> Option<String> {
    let (status, body) = client.get(metrics_url).await.ok()?;
    (status == 200).then(|| String::from_utf8_lossy(&body).into_owned())
}

/// Histogram `name` (unlabelled) in `text`.
fn histogram(text: &str, name: &str) -> Option<HistogramSnapshot> {
    let (mut sum, mut count, mut buckets) = (None, None, Vec::new());
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let value = |s: &str| s.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if rest.starts_with("_sum") {
            sum = value(rest);
        } else if rest.starts_with("_count") {
            count = value(rest);
        } else if let Some(labels) = rest.strip_prefix("_bucket{") {
            let le = labels
                .split("le=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .map(|s| {
                    if s == "+Inf" {
                        f64::INFINITY
                    } else {
                        s.parse().unwrap_or(f64::NAN)
                    }
                });
            if let (Some(le), Some(n)) = (le, value(rest)) {
                buckets.push((le, n));
            }
        }
    }
    Some(HistogramSnapshot {
        sum: sum?,
        count: count?,
        buckets,
    })
}

/// What histogram `name` recorded between the `/metrics` texts `before` and `after`.
fn step_between(before: &str, after: &str, name: &str) -> Option<StepTime> {
    let (before, after) = (histogram(before, name)?, histogram(after, name)?);
    let count = after.count - before.count;
    let p99_bucket_us = after
        .buckets
        .iter()
        .zip(&before.buckets)
        .find(|((_, n1), (_, n0))| count > 0.0 && (n1 - n0) >= 0.99 * count)
        .map(|((le, _), _)| le * 1e6);
    Some(StepTime {
        count,
        mean_us: if count > 0.0 {
            (after.sum - before.sum) / count * 1e6
        } else {
            f64::NAN
        },
        p99_bucket_us,
    })
}

/// Scenario 1: sequential non-stream completions, max_tokens 1. With a `baseline` (the
/// engines called directly), its requests are interleaved with the gateway's in blocks of
/// `--latency-block`, each side with prompts of its own, and its latency is returned too.
async fn latency_scenario(
    args: &RunArgs,
    client: &Client,
    target: &Target,
    baseline: Option<&Target>,
    words_count: usize,
    metrics_url: Option<&str>,
) -> (Latency, Option<Latency>, Steps) {
    let mut rng = Rng::new(1000 + words_count as u64);
    let total = args.latency_warmup + args.latency_requests;
    // Side 0 is the gateway, side 1 (when given) the baseline.
    let targets: Vec<&Target> = std::iter::once(target).chain(baseline).collect();
    let sides = targets.len();
    let bodies: Vec<Vec<Bytes>> = targets
        .iter()
        .map(|_| {
            (0..total)
                .map(|_| completion_body(&words::random_words(&mut rng, words_count), 1, false))
                .collect()
        })
        .collect();
    let progress = bar(
        (sides * total) as u64,
        &format!("latency {words_count} words"),
    );
    let mut samples: [Vec<f64>; 2] = Default::default();
    let mut errors = [0; 2];
    let mut sent = [0; 2];
    let mut before = None;
    let block = args.latency_block as usize;
    for turn in 0.. {
        // The gateway's block first, then the baseline's, while either has requests left.
        let side = if sides == 2 { turn / block % 2 } else { 0 };
        if sent[..sides].iter().all(|&n| n == total) {
            break;
        }
        let index = sent[side];
        if index == total {
            continue;
        }
        if side == 0
            && index == args.latency_warmup
            && let Some(url) = metrics_url
        {
            before = metrics_text(client, url).await;
        }
        let url = targets[side].url("/v1/completions");
        let body = bodies[side][index].clone();
        let started = Instant::now();
        let answer = client.post(&url, body).await;
        let elapsed = started.elapsed().as_secs_f64() * 1e6;
        if index >= args.latency_warmup {
            if answer.is_ok_and(|a| a.ok()) {
                samples[side].push(elapsed);
            } else {
                errors[side] += 1;
            }
        }
        sent[side] += 1;
        progress.inc(1);
    }
    progress.finish_and_clear();
    let after = match metrics_url {
        Some(url) => metrics_text(client, url).await,
        None => None,
    };
    let steps = match (before, after) {
        (Some(before), Some(after)) => Steps {
            tokenize: step_between(&before, &after, TOKENIZE_METRIC),
            booking: step_between(&before, &after, BOOKING_METRIC),
        },
        _ => Steps::default(),
    };
    let [gateway, direct] = samples;
    let direct = (sides == 2).then(|| latency_of(direct, errors[1]));
    (latency_of(gateway, errors[0]), direct, steps)
}

/// The percentiles and mean of `samples` (µs).
fn latency_of(mut samples: Vec<f64>, errors: usize) -> Latency {
    samples.sort_by(f64::total_cmp);
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    Latency {
        requests: samples.len(),
        errors,
        p50_us: percentile(&samples, 0.50),
        p99_us: percentile(&samples, 0.99),
        mean_us: mean,
    }
}

/// Scenario 2 (+4): concurrency C, streamed completions, for a fixed time; samples the
/// gateway's RSS and CPU.
async fn throughput_scenario(
    args: &RunArgs,
    client: &Client,
    target: &Target,
    pid: Option<u32>,
) -> (Throughput, Option<Memory>) {
    let mut rng = Rng::new(77);
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..1024)
            .map(|_| {
                completion_body(
                    &words::random_words(&mut rng, args.throughput_prompt_words),
                    args.answer_tokens,
                    true,
                )
            })
            .collect(),
    );
    let idle = pid.map(procs::memory_kib);
    let started = Instant::now();
    let warm = Duration::from_secs(args.throughput_warmup_secs);
    let end = warm + Duration::from_secs(args.throughput_secs);
    let completed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let incomplete = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for worker in 0..args.concurrency {
        let (bodies, completed, errors, incomplete) = (
            bodies.clone(),
            completed.clone(),
            errors.clone(),
            incomplete.clone(),
        );
        let (client, target) = (client.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut k = worker * 16;
            while started.elapsed() < end {
                let body = bodies[k % bodies.len()].clone();
                k += 1;
                let answer = client.post(&target.url("/v1/completions"), body).await;
                let at = started.elapsed();
                let in_window = at >= warm && at < end;
                match answer {
                    Ok(answer) if answer.ok() && answer.stream_done() => {
                        if in_window {
                            completed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(answer) if answer.ok() => {
                        if in_window {
                            incomplete.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    _ => {
                        if in_window {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    let progress = bar(end.as_secs(), &format!("throughput c={}", args.concurrency));
    let mut peak_rss = 0;
    let mut cpu_start = None;
    let mut window_started = None;
    while started.elapsed() < end {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let at = started.elapsed();
        if at >= warm && cpu_start.is_none() {
            cpu_start = Some(pid.map_or(0.0, procs::cpu_seconds));
            window_started = Some(Instant::now());
        }
        if let Some(pid) = pid {
            peak_rss = peak_rss.max(procs::memory_kib(pid).0);
        }
        let done = completed.load(Ordering::Relaxed);
        let window = at.saturating_sub(warm).as_secs_f64();
        if window > 0.0 {
            progress.set_message(format!("{:.0} req/s", done as f64 / window));
        } else {
            progress.set_message("warming up");
        }
        progress.set_position(at.as_secs().min(end.as_secs()));
    }
    let cpu_end = pid.map_or(0.0, procs::cpu_seconds);
    let seconds = window_started.map_or(args.throughput_secs as f64, |w| w.elapsed().as_secs_f64());
    let memory = pid.map(procs::memory_kib);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    }
    progress.finish_and_clear();
    let completed = completed.load(Ordering::Relaxed);
    let cpu = cpu_end - cpu_start.unwrap_or(cpu_end);
    let throughput = Throughput {
        completed,
        errors: errors.load(Ordering::Relaxed),
        incomplete_streams: incomplete.load(Ordering::Relaxed),
        seconds,
        requests_per_s: completed as f64 / seconds,
        tokens_per_s: (completed * args.answer_tokens as u64) as f64 / seconds,
        gateway_cpu_seconds: cpu,
        gateway_cpu_ms_per_request: if completed > 0 {
            cpu * 1e3 / completed as f64
        } else {
            f64::NAN
        },
    };
    let memory = match (idle, memory) {
        (Some((idle, _)), Some((rss, hwm))) => Some(Memory {
            idle_rss_kib: idle,
            peak_rss_kib: peak_rss.max(rss),
            hwm_kib: hwm,
        }),
        _ => None,
    };
    (throughput, memory)
}

/// The command line starting gateway `name` on `port`.
fn gateway_command(
    args: &RunArgs,
    name: &str,
    port: u16,
    engines: &[EngineAddress],
) -> Result<(PathBuf, Vec<String>), String> {
    let mut argv: Vec<String> = Vec::new();
    let urls: Vec<String> = engines.iter().map(|e| e.http.clone()).collect();
    let metrics_port = procs::free_port().to_string();
    let program = match name {
        "ours" | "ours-nohints" | "ours-affine" | "ours-predicted" | "ours-approx" => {
            if name == "ours-nohints" {
                // Engines that cannot fetch KV from a peer: the cost config without hints.
                argv.push("serve".into());
                argv.push("--config".into());
                let kv_router = absolute(&args.kv_router);
                let root = kv_router.ancestors().nth(3).unwrap_or(Path::new("../.."));
                argv.push(
                    root.join("replay/configs/default-cost-no-hints.yaml")
                        .display()
                        .to_string(),
                );
                argv.extend(["--gateway", "--host", "127.0.0.1", "--port"].map(String::from));
            } else {
                argv.push("serve".into());
                let affine =
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/cache-affine.yaml");
                let config = match name {
                    "ours-affine" | "ours-predicted" | "ours-approx" => Some(affine),
                    _ => args.ours_config.clone(),
                };
                if let Some(config) = config {
                    argv.push("--config".into());
                    argv.push(absolute(&config).display().to_string());
                }
                argv.extend(["--gateway", "--host", "127.0.0.1", "--port"].map(String::from));
            }
            argv.push(port.to_string());
            if name == "ours-predicted" {
                // The router's own bookings count as cached for a few seconds, until the
                // engines' events arrive (upstream's router_predicted_ttl_secs).
                argv.extend(["--router-predicted-ttl-secs", "5"].map(String::from));
            }
            argv.push("--model".into());
            argv.push(format!("bench={}", absolute(&args.model_dir).display()));
            if name == "ours-approx" {
                argv.push("--no-kv-events".into());
            }
            for engine in engines {
                argv.push("--worker".into());
                argv.push(match name {
                    // Approximate mode: no event endpoints to subscribe to.
                    "ours-approx" => engine.http.clone(),
                    _ => format!(
                        "{},kv_events_endpoint={},replay_endpoint={}",
                        engine.http, engine.events, engine.replay
                    ),
                });
            }
            args.kv_router.clone()
        }
        "sglang" => {
            argv.extend(["launch", "--host", "127.0.0.1", "--port"].map(String::from));
            argv.push(port.to_string());
            argv.push("--worker-urls".into());
            argv.extend(urls);
            argv.extend(
                [
                    "--policy",
                    "cache_aware",
                    "--prometheus-host",
                    "127.0.0.1",
                    "--prometheus-port",
                ]
                .map(String::from),
            );
            argv.push(metrics_port);
            argv.extend(["--log-level", "warn"].map(String::from));
            args.venv.join("bin/sglang-router")
        }
        "vllm" | "vllm-kv" => {
            argv.extend(["--host", "127.0.0.1", "--port"].map(String::from));
            argv.push(port.to_string());
            argv.push("--worker-urls".into());
            argv.extend(urls);
            argv.push("--policy".into());
            if name == "vllm" {
                argv.push("cache_aware".into());
            } else {
                argv.push("kv_aware".into());
                for engine in engines {
                    argv.push("--kv-event-source".into());
                    argv.push(format!("{}={}", engine.http, engine.events));
                    argv.push("--kv-event-replay-source".into());
                    argv.push(format!("{}={}", engine.http, engine.replay));
                }
                argv.extend(
                    ["--kv-event-block-size", "16", "--kv-event-model", "bench"].map(String::from),
                );
            }
            argv.extend(["--prometheus-host", "127.0.0.1", "--prometheus-port"].map(String::from));
            argv.push(metrics_port);
            argv.extend(["--log-level", "warning"].map(String::from));
            args.venv.join("bin/vllm-router")
        }
        "relay" => {
            // The floor of a hop through our HTTP stack: no parse, tokenizing or booking.
            argv.extend(["relay".to_owned(), "--port".to_owned(), port.to_string()]);
            for url in urls {
                argv.extend(["--engine".to_owned(), url]);
            }
            std::env::current_exe().map_err(|e| format!("the bench's own path: {e}"))?
        }
        "nginx" => {
            // The floor of one plain proxy hop: no tokenizing, no routing but round robin.
            let config = nginx_config(&args.log_dir, port, &urls)?;
            argv.extend(["-p".to_owned(), args.log_dir.display().to_string()]);
            argv.extend(["-c".to_owned(), config.display().to_string()]);
            which("nginx").ok_or("nginx is not on PATH (Debian: apt-get install nginx-light)")?
        }
        other => {
            return Err(format!(
                "unknown gateway `{other}` (direct, ours, ours-affine, ours-predicted, ours-approx, ours-nohints, sglang, vllm, vllm-kv, nginx, relay)"
            ));
        }
    };
    if !program.exists() {
        return Err(format!("{} does not exist", program.display()));
    }
    Ok((program, argv))
}

/// Writes an nginx configuration that proxies `port` to `engines` round robin, one worker
/// process in the foreground, upstream connections kept alive and answers not buffered (as
/// a streaming gateway must), logs off; returns its path.
fn nginx_config(log_dir: &Path, port: u16, engines: &[String]) -> Result<PathBuf, String> {
    let log_dir = absolute(log_dir);
    let servers: String = engines
        .iter()
        .map(|url| format!("    server {};\n", url.trim_start_matches("http://")))
        .collect();
    let temp = log_dir.join("nginx-temp");
    std::fs::create_dir_all(&temp).map_err(|e| format!("{}: {e}", temp.display()))?;
    let t = temp.display();
    let text = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {pid};\n\
         error_log {log} warn;\nevents {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {t}/body;\n\
         proxy_temp_path {t}/proxy;\n  fastcgi_temp_path {t}/fastcgi;\n\
         uwsgi_temp_path {t}/uwsgi;\n  scgi_temp_path {t}/scgi;\n\
         client_max_body_size 16m;\n  client_body_buffer_size 1m;\n\
         keepalive_requests 1000000;\n\
         upstream engines {{\n{servers}    keepalive 128;\n  }}\n\
         server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
         proxy_pass http://engines;\n      proxy_http_version 1.1;\n\
         proxy_set_header Connection \"\";\n      proxy_buffering off;\n\
         proxy_request_buffering on;\n    }}\n  }}\n}}\n",
        pid = log_dir.join("nginx.pid").display(),
        log = log_dir.join("nginx-error.log").display(),
    );
    let path = log_dir.join("nginx.conf");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The first `name` on PATH.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain([PathBuf::from("/usr/sbin")])
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Waits until the gateway answers a completion, or fails with its log's tail.
async fn wait_ready(
    client: &Client,
    base: &str,
    process: &mut Proc,
    timeout: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    let body = completion_body("w1 w2 w3", 1, false);
    let mut last = String::new();
    let mut successes = 0;
    while started.elapsed() < timeout {
        if let Some(status) = process.exited() {
            return Err(format!(
                "exited ({status}) before answering:\n{}",
                process.log_tail(25)
            ));
        }
        match client
            .post(&format!("{base}/v1/completions"), body.clone())
            .await
        {
            Ok(answer) if answer.ok() => {
                successes += 1;
                if successes >= 8 {
                    return Ok(());
                }
                continue;
            }
            Ok(answer) => last = format!("status {}", answer.status),
            Err(error) => last = error,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!(
        "no completion answered within {}s (last: {last}):\n{}",
        timeout.as_secs(),
        process.log_tail(25)
    ))
}

async fn run_one(
    args: &RunArgs,
    name: &str,
    client: &Client,
    engines: &[EngineAddress],
) -> GatewayResult {
    let mut result = GatewayResult {
        name: name.to_owned(),
        ..GatewayResult::default()
    };
    let mut process = None;
    let direct = Target {
        bases: Arc::new(engines.iter().map(|e| e.http.clone()).collect()),
        next: Arc::default(),
    };
    let target = if name == "direct" {
        reset_engines_with(client, engines, "?layout=array").await;
        result.command = "(load generator → engines, round-robin)".into();
        direct.clone()
    } else {
        let port = procs::free_port();
        let (program, argv) = match gateway_command(args, name, port, engines) {
            Ok(command) => command,
            Err(error) => {
                result.error = Some(error);
                return result;
            }
        };
        result.command = format!("{} {}", program.display(), argv.join(" "));
        eprintln!("  $ {}", result.command);
        let layout = if name == "vllm-kv" {
            "?layout=map"
        } else {
            "?layout=array"
        };
        reset_engines_with(client, engines, layout).await;
        let log = args.log_dir.join(format!("{name}.log"));
        let mut started = match Proc::spawn(&program, &argv, log) {
            Ok(process) => process,
            Err(error) => {
                result.error = Some(format!("cannot start: {error}"));
                return result;
            }
        };
        let base = format!("http://127.0.0.1:{port}");
        if let Err(error) = wait_ready(
            client,
            &base,
            &mut started,
            Duration::from_secs(args.ready_timeout_secs),
        )
        .await
        {
            result.error = Some(error);
            return result;
        }
        process = Some(started);
        Target {
            bases: Arc::new(vec![base]),
            next: Arc::default(),
        }
    };
    let pid = process.as_ref().map(Proc::pid);
    let metrics_url = name
        .starts_with("ours")
        .then(|| format!("{}/metrics", target.bases[0]));

    let hits = prefix_scenario(args, client, &target, engines).await;
    eprintln!(
        "  prefix-hit: {} of {} prompt blocks, {:.2}% (ideal {}, {:.2}%), engines got {:?}, {} errors, {:.1}s",
        hits.hit_blocks,
        hits.prompt_blocks,
        hits.hit_rate * 100.0,
        hits.ideal_hit_blocks,
        hits.ideal_hit_rate * 100.0,
        hits.per_engine_requests,
        hits.errors,
        hits.seconds
    );
    result.prefix = Some(hits);

    let baseline =
        (name != "direct" && args.latency_baseline == Baseline::Paired).then_some(&direct);
    for &size in &args.latency_words {
        let (latency, paired, steps) = latency_scenario(
            args,
            client,
            &target,
            baseline,
            size,
            metrics_url.as_deref(),
        )
        .await;
        eprintln!(
            "  latency {size} words: p50 {:.0} µs, p99 {:.0} µs ({} errors){}{}",
            latency.p50_us,
            latency.p99_us,
            latency.errors,
            paired
                .as_ref()
                .map(|d| format!(
                    "; direct in the same turns: p50 {:.0} µs, p99 {:.0} µs ({} errors)",
                    d.p50_us, d.p99_us, d.errors
                ))
                .unwrap_or_default(),
            steps.summary()
        );
        result.latency.insert(size.to_string(), latency);
        if let Some(paired) = paired {
            result.paired_direct.insert(size.to_string(), paired);
        }
        if let Some(tokenize) = steps.tokenize {
            result.tokenize.insert(size.to_string(), tokenize);
        }
        if let Some(booking) = steps.booking {
            result.booking.insert(size.to_string(), booking);
        }
    }

    let (throughput, memory) = throughput_scenario(args, client, &target, pid).await;
    eprintln!(
        "  throughput: {:.0} req/s ({} errors, {} incomplete){}",
        throughput.requests_per_s,
        throughput.errors,
        throughput.incomplete_streams,
        memory
            .as_ref()
            .map(|m| format!(", peak RSS {:.1} MiB", m.peak_rss_kib as f64 / 1024.0))
            .unwrap_or_default()
    );
    result.throughput = Some(throughput);
    result.memory = memory;

    if let Some(mut process) = process {
        if let Some(status) = process.exited() {
            result.error = Some(format!("exited during the run ({status})"));
        }
        process.stop(Duration::from_secs(5));
    }
    result
}

fn render_table(args: &RunArgs, results: &[GatewayResult]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let cell = |f: &dyn Fn(&GatewayResult) -> Option<String>| -> Vec<String> {
        results
            .iter()
            .map(|r| {
                if r.error.is_some() && r.throughput.is_none() {
                    "failed".into()
                } else {
                    f(r).unwrap_or_else(|| "-".into())
                }
            })
            .collect()
    };
    for size in &args.latency_words {
        let key = size.to_string();
        rows.push((
            format!("added latency p50, {size} w (µs)"),
            cell(&|r| r.added_p50_us.get(&key).map(|v| fmt(*v, 0))),
        ));
        rows.push((
            format!("added latency p99, {size} w (µs)"),
            cell(&|r| r.added_p99_us.get(&key).map(|v| fmt(*v, 0))),
        ));
        rows.push((
            format!("latency p50 / p99, {size} w (µs)"),
            cell(&|r| {
                r.latency
                    .get(&key)
                    .map(|l| format!("{} / {}", fmt(l.p50_us, 0), fmt(l.p99_us, 0)))
            }),
        ));
        rows.push((
            "  direct p50 / p99 in the same turns (µs)".to_string(),
            cell(&|r| {
                r.paired_direct
                    .get(&key)
                    .map(|l| format!("{} / {}", fmt(l.p50_us, 0), fmt(l.p99_us, 0)))
            }),
        ));
        rows.push((
            format!("tokenize mean, {size} w (µs)"),
            cell(&|r| r.tokenize.get(&key).map(|t| fmt(t.mean_us, 0))),
        ));
        rows.push((
            format!("booking mean, {size} w (µs)"),
            cell(&|r| r.booking.get(&key).map(|b| fmt(b.mean_us, 0))),
        ));
    }
    rows.push((
        format!(
            "throughput c={} stream {} tok (req/s)",
            args.concurrency, args.answer_tokens
        ),
        cell(&|r| r.throughput.as_ref().map(|t| fmt(t.requests_per_s, 0))),
    ));
    rows.push((
        "  errors / incomplete streams".into(),
        cell(&|r| {
            r.throughput
                .as_ref()
                .map(|t| format!("{} / {}", t.errors, t.incomplete_streams))
        }),
    ));
    rows.push((
        "gateway CPU per request (ms)".into(),
        cell(&|r| {
            r.throughput
                .as_ref()
                .filter(|_| r.memory.is_some())
                .map(|t| fmt(t.gateway_cpu_ms_per_request, 3))
        }),
    ));
    rows.push((
        "RSS idle → peak under load (MiB)".into(),
        cell(&|r| {
            r.memory.as_ref().map(|m| {
                format!(
                    "{} → {}",
                    fmt(m.idle_rss_kib as f64 / 1024.0, 1),
                    fmt(m.peak_rss_kib as f64 / 1024.0, 1)
                )
            })
        }),
    ));
    rows.push((
        "VmHWM after the run (MiB)".into(),
        cell(&|r| r.memory.as_ref().map(|m| fmt(m.hwm_kib as f64 / 1024.0, 1))),
    ));
    rows.push((
        format!(
            "prefix-hit rate ({} req, {} prefixes) %",
            args.prefix_requests, args.prefixes
        ),
        cell(&|r| r.prefix.as_ref().map(|p| fmt(p.hit_rate * 100.0, 2))),
    ));
    rows.push((
        "  prefix-hit blocks".into(),
        cell(&|r| r.prefix.as_ref().map(|p| p.hit_blocks.to_string())),
    ));
    rows.push((
        "  requests per engine".into(),
        cell(&|r| {
            r.prefix.as_ref().map(|p| {
                p.per_engine_requests
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join("/")
            })
        }),
    ));
    let ideal = results
        .iter()
        .find_map(|r| r.prefix.as_ref())
        .map_or((f64::NAN, 0), |p| (p.ideal_hit_rate, p.ideal_hit_blocks));
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    let mut out = layout(&names, &rows);
    out.push_str(&format!(
        "ideal prefix-hit rate (perfect affinity, no eviction): {}%, {} blocks\n",
        fmt(ideal.0 * 100.0, 2),
        ideal.1
    ));
    for r in results {
        if let Some(error) = &r.error {
            out.push_str(&format!(
                "{}: {}\n",
                r.name,
                error.lines().next().unwrap_or("")
            ));
        }
    }
    out
}

/// Every gateway of the list in turn, with the added latency against its paired direct calls
/// (or, with `--latency-baseline separate`, this round's direct run).
async fn run_round(
    args: &RunArgs,
    client: &Client,
    engines: &[EngineAddress],
    run_started: Instant,
) -> Vec<GatewayResult> {
    let mut results: Vec<GatewayResult> = Vec::new();
    for (index, name) in args.gateways.iter().enumerate() {
        eprintln!(
            "[{}/{}] {name} (t+{:.0}s)",
            index + 1,
            args.gateways.len(),
            run_started.elapsed().as_secs_f64()
        );
        let result = run_one(args, name, client, engines).await;
        if let Some(error) = &result.error {
            eprintln!("  {name} FAILED: {error}");
        }
        results.push(result);
    }
    let direct = results.iter().find(|r| r.name == "direct").cloned();
    for result in &mut results {
        for (size, latency) in &result.latency.clone() {
            let base = result
                .paired_direct
                .get(size)
                .or_else(|| direct.as_ref().and_then(|d| d.latency.get(size)));
            let Some(base) = base.cloned() else {
                continue;
            };
            result
                .added_p50_us
                .insert(size.clone(), latency.p50_us - base.p50_us);
            result
                .added_p99_us
                .insert(size.clone(), latency.p99_us - base.p99_us);
        }
    }
    results
}

/// The figures of `result` that the rounds' summary takes medians of.
fn round_figures(args: &RunArgs, result: &GatewayResult) -> RoundFigures {
    let mut figures = Vec::new();
    for size in &args.latency_words {
        let key = size.to_string();
        if let Some(added) = result.added_p50_us.get(&key) {
            figures.push((format!("added latency p50, {size} w (µs)"), *added));
        }
        if let Some(added) = result.added_p99_us.get(&key) {
            figures.push((format!("added latency p99, {size} w (µs)"), *added));
        }
        if let Some(tokenize) = result.tokenize.get(&key) {
            figures.push((format!("tokenize mean, {size} w (µs)"), tokenize.mean_us));
        }
        if let Some(booking) = result.booking.get(&key) {
            figures.push((format!("booking mean, {size} w (µs)"), booking.mean_us));
        }
    }
    if let Some(throughput) = &result.throughput {
        figures.push(("throughput (req/s)".into(), throughput.requests_per_s));
    }
    if let Some(prefix) = &result.prefix {
        figures.push(("prefix-hit blocks".into(), prefix.hit_blocks as f64));
    }
    RoundFigures {
        name: result.name.clone(),
        figures,
    }
}

pub async fn run(args: RunArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.log_dir).map_err(|e| e.to_string())?;
    if args.gateways.iter().any(|g| g.starts_with("ours"))
        && !args.model_dir.join("tokenizer.json").is_file()
    {
        words::write_fixture(&args.model_dir).map_err(|e| e.to_string())?;
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let ports_file = args.log_dir.join("engines.json");
    let _ = std::fs::remove_file(&ports_file);
    let engine_args: Vec<String> = vec![
        "engines".into(),
        "--count".into(),
        args.engines.to_string(),
        "--lru-blocks".into(),
        args.lru_blocks.to_string(),
        "--ports-file".into(),
        ports_file.display().to_string(),
    ];
    let mut engine_process = Proc::spawn(&exe, &engine_args, args.log_dir.join("engines.log"))
        .map_err(|e| format!("cannot start the fake engines: {e}"))?;
    let started = Instant::now();
    let engines: Vec<EngineAddress> = loop {
        if let Ok(text) = std::fs::read_to_string(&ports_file)
            && let Ok(engines) = serde_json::from_str(&text)
        {
            break engines;
        }
        if engine_process.exited().is_some() || started.elapsed() > Duration::from_secs(20) {
            return Err(format!(
                "the fake engines did not start:\n{}",
                engine_process.log_tail(20)
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "{} fake engines: {}",
        engines.len(),
        engines
            .iter()
            .map(|e| e.http.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let client = Client::new(args.concurrency.max(args.prefix_concurrency) * 2);
    let run_started = Instant::now();
    let mut rounds: Vec<Vec<GatewayResult>> = Vec::new();
    let mut first_table = None;
    for round in 1..=args.rounds {
        if args.rounds > 1 {
            eprintln!("round {round} of {}", args.rounds);
        }
        let results = run_round(&args, &client, &engines, run_started).await;
        let table = render_table(&args, &results);
        match args.rounds {
            1 => println!("\n{table}"),
            _ => println!("\nround {round} of {}:\n{table}", args.rounds),
        }
        first_table.get_or_insert(table);
        rounds.push(results);
    }
    let (summary, medians) = if args.rounds > 1 {
        let figures: Vec<Vec<RoundFigures>> = rounds
            .iter()
            .map(|results| results.iter().map(|r| round_figures(&args, r)).collect())
            .collect();
        let (summary, medians) = rounds::summary(&args.gateways, &figures);
        println!("medians over {} rounds in turns:\n{summary}", args.rounds);
        (Some(summary), Some(medians))
    } else {
        (None, None)
    };
    let report = json!({
        "settings": {
            "engines": args.engines, "lru_blocks_per_engine": args.lru_blocks, "block_size": BLOCK_SIZE,
            "latency_requests": args.latency_requests, "latency_warmup": args.latency_warmup,
            "latency_words": args.latency_words, "latency_baseline": args.latency_baseline,
            "latency_block": args.latency_block, "concurrency": args.concurrency,
            "answer_tokens": args.answer_tokens, "throughput_secs": args.throughput_secs,
            "throughput_prompt_words": args.throughput_prompt_words,
            "prefix_requests": args.prefix_requests, "prefixes": args.prefixes,
            "prefix_words": args.prefix_words, "suffix_words": args.suffix_words,
            "prefix_concurrency": args.prefix_concurrency,
        },
        "results": rounds.first(),
        "table": first_table,
        "rounds": rounds,
        "summary": summary,
        "medians": medians,
    });
    std::fs::write(
        &args.out,
        serde_json::to_vec_pretty(&report).unwrap_or_default(),
    )
    .map_err(|e| e.to_string())?;
    eprintln!("report: {}", args.out.display());
    engine_process.stop(Duration::from_secs(3));
    Ok(())
}
