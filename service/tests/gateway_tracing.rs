//! A gateway request's tracing span names the route, the model, the booked worker, its
//! overlap (cached blocks), the booking id and the attempt.

mod gateway_support;

use gateway_support::fake_engine::FakeEngine;
use gateway_support::*;
use kv_router_service::gateway::GatewayOptions;
use parking_lot::Mutex;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::fmt::format::FmtSpan;

/// Everything the subscriber writes, kept.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_span_names_its_worker_and_overlap() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter("kv_router_service=info")
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let gateway = start_gateway(DEFAULT_YAML, GatewayOptions::default()).await;
    let engine = FakeEngine::start(7, Duration::from_millis(1)).await;
    gateway.register(7, &engine.endpoint());
    let answer = post(
        &gateway.url("/v1/completions"),
        &completion(&tokens(40, 1), false, 2),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(gateway.settle().await, 0);
    let text = String::from_utf8_lossy(&captured.0.lock()).into_owned();
    let span = text
        .lines()
        .find(|line| line.contains("openai_request{") && line.contains("close"))
        .unwrap_or_else(|| panic!("no closed openai_request span in: {text}"));
    for field in [
        "route=\"/v1/completions\"",
        "model=\"tiny\"",
        "worker_id=7",
        "overlap_blocks=0",
        "attempt=0",
        "selection_id=",
    ] {
        assert!(span.contains(field), "{field} missing from: {span}");
    }
}
