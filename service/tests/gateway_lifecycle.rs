//! The gateway's request lifecycle against fake engines in this process: answers relayed,
//! bookings released at the end, at an error and when the client goes away (1,000 clients
//! that leave mid-stream leave no load); failures before the first byte re-booked elsewhere
//! with the worker's circuit opened and closed again by its health probe; failures after it
//! ending the stream with an OpenAI error event; client errors answered 4xx without a booking.

mod gateway_support;

use gateway_support::fake_engine::{FakeEngine, Mode};
use gateway_support::*;
use kv_router_service::gateway::GatewayOptions;
use kv_router_service::gateway::worker_health::BreakerOptions;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn fast_options() -> GatewayOptions {
    GatewayOptions {
        first_byte_timeout: Duration::from_millis(400),
        probe_interval: Duration::from_millis(20),
        breaker: BreakerOptions {
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(400),
        },
        ..GatewayOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_relayed_and_their_bookings_released() {
    let gateway = start_gateway(DEFAULT_YAML, fast_options()).await;
    let engine = FakeEngine::start(1, Duration::from_millis(1)).await;
    gateway.register(1, &engine.endpoint());

    let plain = post(
        &gateway.url("/v1/completions"),
        &completion(&tokens(64, 1), false, 3),
    )
    .await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(plain.json()["choices"][0]["text"], " tok tok tok");
    assert_eq!(plain.worker(), Some(1));

    let streamed = post(
        &gateway.url("/v1/completions"),
        &completion(&tokens(64, 2), true, 5),
    )
    .await;
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.headers["content-type"], "text/event-stream");
    assert_eq!(
        streamed.body.matches("data: {").count(),
        5,
        "{}",
        streamed.body
    );
    assert!(streamed.body.ends_with("data: [DONE]\n\n"));

    // The engine got the client's body unchanged (no hint was due: nothing is cached).
    let received = engine.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].path, "/v1/completions");
    assert_eq!(received[0].body["prompt"], serde_json::json!(tokens(64, 1)));
    assert!(received[0].body.get("kv_transfer_params").is_none());
    assert_eq!(
        gateway.settle().await,
        0,
        "bookings left after answers ended"
    );

    let models = get(&gateway.url("/v1/models")).await;
    assert_eq!(models.json()["data"][0]["id"], MODEL);
    let metrics = get(&gateway.url("/metrics")).await.body;
    assert!(
        metrics.contains(
            "kv_router_gateway_requests_total{route=\"/v1/completions\",status=\"200\"} 2"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("kv_router_gateway_ttft_seconds_count{worker_id=\"1\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kv_router_gateway_request_seconds_count{worker_id=\"1\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kv_router_gateway_booking_seconds_count 2"),
        "one booking per request: {metrics}"
    );
}

/// Sends a streamed completion over a raw connection, waits for the first chunk and goes away.
async fn leave_mid_stream(address: std::net::SocketAddr, body: String) -> bool {
    let Ok(mut connection) = tokio::net::TcpStream::connect(address).await else {
        return false;
    };
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    if connection.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        while !seen.windows(6).any(|w| w == b"data: ") {
            match connection.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
            if seen.len() >= 12 && !seen.starts_with(b"HTTP/1.1 200") {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_that_leave_mid_stream_leave_no_load_and_cancel_upstream() {
    let gateway = start_gateway(DEFAULT_YAML, fast_options()).await;
    let engines = [
        FakeEngine::start(1, Duration::from_millis(5)).await,
        FakeEngine::start(2, Duration::from_millis(5)).await,
    ];
    for (id, engine) in (1..).zip(&engines) {
        gateway.register(id, &engine.endpoint());
    }
    let address = gateway.address;
    let mut left = 0;
    for wave in 0..10u32 {
        let clients: Vec<_> = (0..100u32)
            .map(|i| {
                let body = completion(&tokens(48, wave * 100 + i), true, 1_500);
                tokio::spawn(leave_mid_stream(address, body))
            })
            .collect();
        for client in clients {
            left += usize::from(client.await.unwrap_or(false));
        }
    }
    assert_eq!(left, 1000, "every client saw its stream start");
    assert_eq!(
        gateway.settle().await,
        0,
        "bookings left after 1,000 clients went away"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while engines.iter().map(FakeEngine::cancelled).sum::<usize>() < 1000
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        engines.iter().map(FakeEngine::cancelled).sum::<usize>(),
        1000,
        "the engines' streams were cancelled"
    );
    assert_eq!(engines.iter().map(FakeEngine::active).sum::<usize>(), 0);
    let metrics = get(&gateway.url("/metrics")).await.body;
    let disconnects: u64 = metrics
        .lines()
        .filter(|line| line.starts_with("kv_router_gateway_client_disconnects_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(disconnects, 1000, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_failing_before_the_first_byte_are_skipped_and_probed_back() {
    let options = GatewayOptions {
        max_retries: 3,
        ..fast_options()
    };
    let gateway = start_gateway(DEFAULT_YAML, options).await;
    let refusing = FakeEngine::start(1, Duration::from_millis(1)).await;
    let failing = FakeEngine::start(2, Duration::from_millis(1)).await;
    let hanging = FakeEngine::start(3, Duration::from_millis(1)).await;
    let good = FakeEngine::start(4, Duration::from_millis(1)).await;
    refusing.stop();
    // Down for good until told otherwise: their health probes fail too.
    failing.set_mode(Mode::ServerError);
    failing.set_healthy(false);
    hanging.set_mode(Mode::Hang);
    hanging.set_healthy(false);
    for (id, engine) in [(1, &refusing), (2, &failing), (3, &hanging), (4, &good)] {
        gateway.register(id, &engine.endpoint());
    }
    // Ties between workers are broken at random, so a failing worker is tried only once a
    // booking picks it: keep sending (at least 12 requests, at most 200) until every failing
    // worker has been tried. Each try of one fails before the first byte, opens its circuit and
    // is re-booked, so every answer comes from the healthy worker.
    let mut tried_all = false;
    for salt in 0..200 {
        let answer = post(
            &gateway.url("/v1/completions"),
            &completion(&tokens(64, salt), salt % 2 == 0, 2),
        )
        .await;
        assert_eq!(answer.status, 200, "request {salt}: {}", answer.body);
        assert_eq!(
            answer.worker(),
            Some(4),
            "request {salt} served by the healthy worker"
        );
        let metrics = get(&gateway.url("/metrics")).await.body;
        tried_all = (1..=3).all(|worker| {
            worker_metric(&metrics, "kv_router_gateway_worker_requests_total", worker) > 0
        });
        if tried_all && salt >= 11 {
            break;
        }
    }
    assert!(tried_all, "200 bookings never tried every failing worker");
    assert_eq!(
        gateway.settle().await,
        0,
        "re-booked tries left load behind"
    );
    let metrics = get(&gateway.url("/metrics")).await.body;
    for worker in 1..=3 {
        assert!(
            metrics.contains(&format!(
                "kv_router_gateway_worker_unhealthy{{worker_id=\"{worker}\"}} 1"
            )),
            "worker {worker} should be unhealthy: {metrics}"
        );
        assert!(!metrics.contains(&format!(
            "kv_router_gateway_retries_total{{worker_id=\"{worker}\"}} 0"
        )));
    }
    assert!(metrics.contains("kv_router_gateway_worker_unhealthy{worker_id=\"4\"} 0"));
    // Its probe passes once the worker recovers, and it is booked again.
    failing.set_mode(Mode::Normal);
    failing.set_healthy(true);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gateway.gateway.health().is_open(2) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !gateway.gateway.health().is_open(2),
        "worker 2's probe passed"
    );
    // A worker whose /health fails stays out.
    assert!(
        gateway.gateway.health().is_open(1),
        "worker 1 still refuses"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_failing_is_a_502_that_names_them_and_leaves_no_load() {
    let gateway = start_gateway(DEFAULT_YAML, fast_options()).await;
    let engines = [
        FakeEngine::start(1, Duration::from_millis(1)).await,
        FakeEngine::start(2, Duration::from_millis(1)).await,
    ];
    for (id, engine) in (1..).zip(&engines) {
        engine.set_mode(Mode::ServerError);
        gateway.register(id, &engine.endpoint());
    }
    let answer = post(
        &gateway.url("/v1/completions"),
        &completion(&tokens(32, 1), false, 2),
    )
    .await;
    assert_eq!(answer.status, 502, "{}", answer.body);
    let error = &answer.json()["error"];
    assert_eq!(error["type"], "server_error");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("worker 1") && message.contains("worker 2"),
        "{message}"
    );
    assert_eq!(gateway.settle().await, 0);
    // Both circuits are open now: the next request is refused at once, 503, and books nothing.
    let answer = post(
        &gateway.url("/v1/completions"),
        &completion(&tokens(32, 2), false, 2),
    )
    .await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(engines.iter().map(|e| e.received().len()).sum::<usize>(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_bytes_streamed_ends_with_an_error_event_and_no_retry() {
    let gateway = start_gateway(DEFAULT_YAML, fast_options()).await;
    let engine = FakeEngine::start(1, Duration::from_millis(1)).await;
    let spare = FakeEngine::start(2, Duration::from_millis(1)).await;
    engine.set_mode(Mode::BreakMidStream);
    spare.set_mode(Mode::BreakMidStream);
    gateway.register(1, &engine.endpoint());
    gateway.register(2, &spare.endpoint());
    let answer = post(
        &gateway.url("/v1/completions"),
        &completion(&tokens(32, 1), true, 50),
    )
    .await;
    assert_eq!(answer.status, 200);
    let chunks = answer.body.matches("data: {\"choices\"").count();
    assert_eq!(chunks, 2, "{}", answer.body);
    let last_event = answer
        .body
        .trim_end()
        .rsplit("\n\n")
        .nth(1)
        .unwrap_or_default();
    assert!(
        last_event.starts_with("data: {\"error\":"),
        "{}",
        answer.body
    );
    assert!(answer.body.ends_with("data: [DONE]\n\n"));
    assert_eq!(
        engine.received().len() + spare.received().len(),
        1,
        "no retry after bytes were sent"
    );
    assert_eq!(gateway.settle().await, 0);
    let metrics = get(&gateway.url("/metrics")).await.body;
    assert!(
        metrics.contains("kv_router_gateway_stream_errors_total{worker_id=\""),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_openai_4xx_and_book_nothing() {
    let options = GatewayOptions {
        max_model_len: Some(100),
        ..fast_options()
    };
    let gateway = start_gateway(DEFAULT_YAML, options).await;
    let engine = FakeEngine::start(1, Duration::from_millis(1)).await;
    gateway.register(1, &engine.endpoint());
    let url = gateway.url("/v1/completions");
    let cases = [
        ("{\"model\": ", 400, "invalid_request_error", None),
        ("[]", 400, "invalid_request_error", None),
        (
            "{\"prompt\": \"hi\"}",
            400,
            "invalid_request_error",
            Some("model"),
        ),
        (
            "{\"model\": \"nope\", \"prompt\": \"hi\"}",
            404,
            "invalid_request_error",
            Some("model"),
        ),
        (
            "{\"model\": \"tiny\"}",
            400,
            "invalid_request_error",
            Some("prompt"),
        ),
        (
            "{\"model\": \"tiny\", \"prompt\": [1, -2]}",
            400,
            "invalid_request_error",
            Some("prompt"),
        ),
        (
            "{\"model\": \"tiny\", \"prompt\": [1, 2], \"max_tokens\": \"x\"}",
            400,
            "invalid_request_error",
            Some("max_tokens"),
        ),
    ];
    for (body, status, kind, param) in cases {
        let answer = post(&url, body).await;
        assert_eq!(answer.status, status, "{body}: {}", answer.body);
        let error = &answer.json()["error"];
        assert_eq!(error["type"], kind, "{body}");
        if let Some(param) = param {
            assert_eq!(error["param"], param, "{body}");
        }
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let long = post(&url, &completion(&tokens(101, 1), false, 1)).await;
    assert_eq!(long.status, 400);
    assert_eq!(long.json()["error"]["code"], "context_length_exceeded");
    let with_output = post(&url, &completion(&tokens(90, 1), false, 20)).await;
    assert_eq!(
        with_output.json()["error"]["code"],
        "context_length_exceeded"
    );
    let chat = post(
        &gateway.url("/v1/chat/completions"),
        "{\"model\": \"tiny\", \"messages\": \"hi\"}",
    )
    .await;
    assert_eq!(chat.status, 400);
    assert_eq!(chat.json()["error"]["param"], "messages");
    assert!(
        engine.received().is_empty(),
        "a client error reached the engine"
    );
    assert_eq!(gateway.active_bookings(), 0);

    // An engine's own 4xx is the client's: passed through, not retried, worker still healthy.
    engine.set_mode(Mode::ClientError);
    let refused = post(&url, &completion(&tokens(16, 3), false, 1)).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["message"], "bad sampling params");
    assert_eq!(engine.received().len(), 1);
    assert!(!gateway.gateway.health().is_open(1));
    assert_eq!(gateway.settle().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_and_unknown_urls_answer_in_openai_shape() {
    let gateway = start_gateway(DEFAULT_YAML, fast_options()).await;
    let engine = FakeEngine::start(1, Duration::from_millis(1)).await;
    gateway.register(1, &engine.endpoint());

    let listed = get(&gateway.url("/v1/models")).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["object"], "list");
    let retrieved = get(&gateway.url(&format!("/v1/models/{MODEL}"))).await;
    assert_eq!(retrieved.status, 200, "{}", retrieved.body);
    assert_eq!(retrieved.json(), listed.json()["data"][0]);

    // A model name may hold slashes, as a client sends it unescaped or escaped.
    for path in [
        "/v1/models/org/no-such-model",
        "/v1/models/org%2Fno-such-model",
    ] {
        let missing = get(&gateway.url(path)).await;
        assert_eq!(missing.status, 404, "{path}: {}", missing.body);
        let error = &missing.json()["error"];
        assert_eq!(error["code"], "model_not_found", "{path}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("`org/no-such-model`") && m.contains(MODEL)),
            "{path}: {error}"
        );
    }

    let unknown = post(
        &gateway.url("/v1/embeddings"),
        "{\"model\": \"tiny\", \"input\": \"hi\"}",
    )
    .await;
    assert_eq!(unknown.status, 404);
    let error = &unknown.json()["error"];
    assert_eq!(error["type"], "invalid_request_error");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Invalid URL (POST /v1/embeddings)")),
        "{error}"
    );

    let wrong = get(&gateway.url("/v1/chat/completions")).await;
    assert_eq!(wrong.status, 405);
    assert_eq!(wrong.headers["allow"], "POST");
    assert_eq!(wrong.json()["error"]["type"], "invalid_request_error");
    let wrong = post(&gateway.url("/v1/models"), "{}").await;
    assert_eq!(wrong.status, 405);
    assert_eq!(wrong.headers["allow"], "GET");

    // Paths outside `/v1/` keep the selection API's answers.
    let outside = get(&gateway.url("/no-such-route")).await;
    assert_eq!(outside.status, 404);
    assert_eq!(
        outside.json(),
        serde_json::json!({"error": "route not found"})
    );
    assert!(engine.received().is_empty(), "a request reached the engine");
    assert_eq!(gateway.active_bookings(), 0);
}
