//! A fake OpenAI engine in the test's process: it answers `/v1/completions` and
//! `/v1/chat/completions` (streamed: one SSE chunk per token, at a set interval) and
//! `/health`, records every request it gets, counts streams whose client went away, and can
//! be told to fail: answer 500, answer 400, hang, fail mid-stream, or stop listening.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body::Frame;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

/// What the engine does with the next generation requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Answers.
    Normal,
    /// Answers 500 before any byte.
    ServerError,
    /// Answers 400 (a client error the gateway must pass through).
    ClientError,
    /// Never answers.
    Hang,
    /// Streams two chunks, then breaks the connection.
    BreakMidStream,
}

/// One request as the engine got it.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub body: Value,
    pub headers: HeaderMap,
}

#[derive(Debug)]
struct EngineState {
    id: u64,
    mode: Mutex<Mode>,
    healthy: Mutex<bool>,
    received: Mutex<Vec<Received>>,
    token_interval: Duration,
    cancelled: AtomicUsize,
    completed: AtomicUsize,
    active: AtomicUsize,
    next_id: AtomicU64,
}

/// A running fake engine; dropping it stops it.
pub struct FakeEngine {
    pub address: SocketAddr,
    state: Arc<EngineState>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeEngine {
    /// Starts engine `id` on 127.0.0.1 port 0, streaming a token every `token_interval`.
    pub async fn start(id: u64, token_interval: Duration) -> Self {
        let state = Arc::new(EngineState {
            id,
            mode: Mutex::new(Mode::Normal),
            healthy: Mutex::new(true),
            received: Mutex::new(Vec::new()),
            token_interval,
            cancelled: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("address");
        let routes = Router::new()
            .route("/v1/completions", post(generate))
            .route("/v1/chat/completions", post(generate))
            .route("/health", get(health))
            .with_state(Arc::clone(&state));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, routes).await;
        });
        Self {
            address,
            state,
            server,
        }
    }

    /// Its OpenAI base URL.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Sets what it does with the next requests.
    pub fn set_mode(&self, mode: Mode) {
        *self.state.mode.lock() = mode;
    }

    /// Sets what `/health` answers.
    pub fn set_healthy(&self, healthy: bool) {
        *self.state.healthy.lock() = healthy;
    }

    /// Stops listening: new connections are refused (and open ones dropped).
    pub fn stop(&self) {
        self.server.abort();
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().clone()
    }

    /// Streams whose client went away before their end.
    pub fn cancelled(&self) -> usize {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    /// Answers streamed to their end.
    pub fn completed(&self) -> usize {
        self.state.completed.load(Ordering::SeqCst)
    }

    /// Answers being streamed now.
    pub fn active(&self) -> usize {
        self.state.active.load(Ordering::SeqCst)
    }
}

async fn health(State(state): State<Arc<EngineState>>) -> StatusCode {
    if *state.healthy.lock() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn generate(
    State(state): State<Arc<EngineState>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state.received.lock().push(Received {
        path: uri.path().to_owned(),
        body: body.clone(),
        headers,
    });
    let mode = *state.mode.lock();
    match mode {
        Mode::ServerError => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "engine exploded").into_response();
        }
        Mode::ClientError => {
            let error = json!({"error": {"message": "bad sampling params", "type": "BadRequestError", "param": null, "code": 400}});
            return (StatusCode::BAD_REQUEST, error.to_string()).into_response();
        }
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Mode::Normal | Mode::BreakMidStream => {}
    }
    let tokens = body["max_tokens"].as_u64().unwrap_or(4) as usize;
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    if body["stream"].as_bool() == Some(true) {
        state.active.fetch_add(1, Ordering::SeqCst);
        let stream = TokenStream {
            state: Arc::clone(&state),
            request: format!("cmpl-{}-{id}", state.id),
            left: tokens,
            break_after: (mode == Mode::BreakMidStream).then_some(2),
            sent: 0,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            done: false,
        };
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::new(stream))
            .unwrap_or_default();
    }
    state.completed.fetch_add(1, Ordering::SeqCst);
    let answer = json!({
        "id": format!("cmpl-{}-{id}", state.id),
        "object": "text_completion",
        "model": body["model"],
        "choices": [{"index": 0, "text": " tok".repeat(tokens), "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
    });
    ([("content-type", "application/json")], answer.to_string()).into_response()
}

/// An SSE answer: one chunk per token, then `[DONE]`.
struct TokenStream {
    state: Arc<EngineState>,
    request: String,
    left: usize,
    break_after: Option<usize>,
    sent: usize,
    sleep: Pin<Box<tokio::time::Sleep>>,
    done: bool,
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        self.state.active.fetch_sub(1, Ordering::SeqCst);
        if self.done {
            self.state.completed.fetch_add(1, Ordering::SeqCst);
        } else {
            self.state.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl http_body::Body for TokenStream {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let interval = self.state.token_interval;
        if !interval.is_zero() {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let deadline = tokio::time::Instant::now() + interval;
            self.sleep.as_mut().reset(deadline);
        }
        if self.break_after == Some(self.sent) {
            return Poll::Ready(Some(Err(std::io::Error::other("engine died mid-stream"))));
        }
        if self.left == 0 {
            self.done = true;
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                b"data: [DONE]\n\n",
            )))));
        }
        self.left -= 1;
        self.sent += 1;
        let chunk = json!({
            "id": self.request,
            "object": "text_completion",
            "choices": [{"index": 0, "text": " tok", "finish_reason": null}],
        });
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
            "data: {chunk}\n\n"
        ))))))
    }
}
