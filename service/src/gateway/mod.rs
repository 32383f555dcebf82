//! The OpenAI-compatible gateway: `POST /v1/completions`, `POST /v1/chat/completions` (stream
//! and not), `GET /v1/models` and `GET /v1/models/{model}`, on the same process as the
//! selection API; any other path under `/v1/` is OpenAI's 404.
//!
//! Enters: a stock OpenAI client's request. It is parsed and tokenized with the model's own
//! tokenizer and chat template (so the ids hashed are those the engine caches), booked through
//! the selection service on the worker with the best cached prefix, and forwarded to that
//! worker's OpenAI endpoint unchanged but for its hint envelope ([`hint_delivery`]).
//! Leaves: the worker's answer, relayed frame by frame ([`relayed_body`]); the booking's
//! prefill is released at the first byte and the booking at the end, at an error, or when the
//! client goes away. A try that fails before its first byte opens the worker's circuit
//! ([`worker_health`]) and the request is re-booked elsewhere, a bounded number of times.
//! Client errors are 4xx in OpenAI's shape and book nothing ([`openai_error`]).

pub mod after_this_turn;
pub mod booking_guard;
mod cache_prefetch;
pub mod chat_template;
pub mod direct_encoder;
pub mod gateway_metrics;
pub mod hint_delivery;
pub mod model_tokenizer;
pub mod openai_error;
pub mod openai_request;
pub mod relayed_body;
mod short_words;
pub mod static_worker;
pub mod unsupported_tokenizer;
pub mod whitespace_words;
pub mod word_ids;
pub mod word_pattern;
pub mod worker_connections;
pub mod worker_health;
pub mod worker_try;

use crate::http::json_body::json_response;
use crate::selection::selection_request::SelectRequest;
use crate::selection::selection_response::SelectResponse;
use crate::selection::selection_service::{MetricsSource, SelectionService};
use crate::worker_record::default_routing_group;
use crate::{ServiceError, http::REQUEST_BODY_LIMIT_BYTES};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use booking_guard::BookingGuard;
use gateway_metrics::GatewayMetrics;
use hint_delivery::{HintDelivery, KV_HINT_HEADER, forwarded_body, hint_header};
use model_tokenizer::ModelTokenizer;
use openai_error::OpenAiError;
use openai_request::{GenerationRoute, ParsedRequest};
use relayed_body::{RelayAccounting, RelayedBody};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};
use tracing::Instrument as _;
use worker_connections::{WorkerConnections, WorkerRequest};
use worker_health::{BreakerOptions, WorkerHealth};
use worker_try::{
    Answered, answer_header_relayed, try_worker, worker_client, worker_headers, worker_url,
};

/// The response header naming the worker that served a request.
pub const WORKER_HEADER: &str = "x-kv-router-worker-id";

/// How the gateway forwards, retries and watches workers.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayOptions {
    /// Re-bookings on another worker after a try fails before its first byte.
    pub max_retries: usize,
    /// How long a worker may take to accept a connection.
    pub connect_timeout: Duration,
    /// How long a worker may take to send the first byte of its answer (prefill included).
    pub first_byte_timeout: Duration,
    /// How often workers whose circuit is open are considered for a health probe.
    pub probe_interval: Duration,
    /// How long a health probe may take.
    pub probe_timeout: Duration,
    /// The circuit breaker's backoff.
    pub breaker: BreakerOptions,
    /// Where the booked worker reads its hint.
    pub hint_delivery: HintDelivery,
    /// The context limit in tokens, instead of each tokenizer's `model_max_length`.
    pub max_model_len: Option<usize>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            max_retries: 2,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(300),
            probe_interval: Duration::from_millis(250),
            probe_timeout: Duration::from_secs(2),
            breaker: BreakerOptions::default(),
            hint_delivery: HintDelivery::Body,
            max_model_len: None,
        }
    }
}

/// A model the gateway serves: its name (the request's `model`, and the `model_name` its
/// workers register with) and its tokenizer.
pub struct ServedModel {
    /// The name clients ask for.
    pub name: String,
    /// Its tokenizer and chat template.
    pub tokenizer: Arc<ModelTokenizer>,
}

struct ModelEntry {
    tokenizer: Arc<ModelTokenizer>,
    context_limit: Option<usize>,
}

/// What the gateway reports on `/metrics`.
struct GatewayStats {
    metrics: GatewayMetrics,
    health: WorkerHealth,
}

impl MetricsSource for GatewayStats {
    fn prometheus_text(&self) -> String {
        let open = self.health.open_workers();
        let mut known: BTreeSet<u64> = self.metrics.known_workers();
        known.extend(open.iter().copied());
        let states: Vec<(u64, bool)> = known
            .into_iter()
            .map(|id| (id, open.contains(&id)))
            .collect();
        self.metrics.prometheus_text(&states)
    }
}

/// The gateway: the served models, the worker client, the breakers and the metrics.
pub struct Gateway {
    service: Arc<SelectionService>,
    models: BTreeMap<String, ModelEntry>,
    options: GatewayOptions,
    client: WorkerConnections,
    stats: Arc<GatewayStats>,
}

impl Gateway {
    /// A gateway over `service` for `models`, reporting on the service's `/metrics` and
    /// probing unhealthy workers in the background (until the gateway is dropped). Needs a
    /// tokio runtime.
    pub fn start(
        service: Arc<SelectionService>,
        models: Vec<ServedModel>,
        options: GatewayOptions,
    ) -> Arc<Self> {
        let models = models
            .into_iter()
            .map(|model| {
                let context_limit = options.max_model_len.or(model.tokenizer.context_limit());
                (
                    model.name,
                    ModelEntry {
                        tokenizer: model.tokenizer,
                        context_limit,
                    },
                )
            })
            .collect();
        let stats = Arc::new(GatewayStats {
            metrics: GatewayMetrics::default(),
            health: WorkerHealth::new(options.breaker),
        });
        service.add_metrics_source(Arc::clone(&stats) as _);
        let gateway = Arc::new(Self {
            service,
            models,
            client: worker_client(options.connect_timeout),
            options,
            stats,
        });
        tokio::spawn(probe_loop(Arc::downgrade(&gateway)));
        gateway
    }

    /// The names of the served models.
    pub fn model_names(&self) -> Vec<&str> {
        self.models.keys().map(String::as_str).collect()
    }

    /// The gateway's metrics.
    pub fn metrics(&self) -> &GatewayMetrics {
        &self.stats.metrics
    }

    /// The workers' circuit breakers.
    pub fn health(&self) -> &WorkerHealth {
        &self.stats.health
    }

    async fn generate(
        &self,
        route: GenerationRoute,
        headers: HeaderMap,
        body: Result<Bytes, BytesRejection>,
    ) -> Response {
        let arrived = Instant::now();
        let span = tracing::info_span!(
            "openai_request",
            route = route.path(),
            model = tracing::field::Empty,
            worker_id = tracing::field::Empty,
            overlap_blocks = tracing::field::Empty,
            selection_id = tracing::field::Empty,
            attempt = tracing::field::Empty,
        );
        let response = self
            .answer(route, headers, body, arrived)
            .instrument(span)
            .await
            .unwrap_or_else(IntoResponse::into_response);
        self.stats
            .metrics
            .answered(route.path(), response.status().as_u16());
        response
    }

    async fn answer(
        &self,
        route: GenerationRoute,
        headers: HeaderMap,
        body: Result<Bytes, BytesRejection>,
        arrived: Instant,
    ) -> Result<Response, OpenAiError> {
        let raw = body.map_err(|rejection| OpenAiError {
            status: rejection.status(),
            ..OpenAiError::bad_request(rejection.body_text(), None)
        })?;
        let request = ParsedRequest::parse(raw, route)?;
        tracing::Span::current().record("model", request.model.as_str());
        let model = self
            .models
            .get(&request.model)
            .ok_or_else(|| OpenAiError::model_not_found(&request.model, &self.model_names()))?;
        let started = Instant::now();
        let tokens = request.prompt_tokens(route, &model.tokenizer)?;
        self.stats.metrics.tokenized(started.elapsed());
        if tokens.is_empty() {
            return Err(OpenAiError::bad_request(
                "the prompt is empty",
                Some("prompt"),
            ));
        }
        if let Some(limit) = model.context_limit {
            let wanted = tokens.len() as u64 + request.max_tokens.unwrap_or(0);
            if tokens.len() > limit || wanted > limit as u64 {
                return Err(OpenAiError::context_length_exceeded(
                    limit,
                    tokens.len(),
                    request.max_tokens,
                ));
            }
        }
        self.dispatch(route, &request, &tokens, &headers, arrived)
            .await
    }

    /// Books, forwards, and on a failure before the first byte re-books elsewhere.
    async fn dispatch(
        &self,
        route: GenerationRoute,
        request: &ParsedRequest,
        tokens: &[u32],
        client_headers: &HeaderMap,
        arrived: Instant,
    ) -> Result<Response, OpenAiError> {
        let mut excluded = BTreeSet::new();
        let mut failures = Vec::new();
        for attempt in 0..=self.options.max_retries {
            let booking_started = Instant::now();
            let Some(selection) = self.book(&request.model, tokens, &excluded)? else {
                break;
            };
            self.stats.metrics.booked(booking_started.elapsed());
            let worker_id = selection.worker_id;
            let span = tracing::Span::current();
            span.record("worker_id", worker_id);
            span.record(
                "overlap_blocks",
                selection.overlap.gpu / selection.block_size.max(1),
            );
            span.record("attempt", attempt);
            let selection_id = selection.selection_id.clone().unwrap_or_default();
            span.record("selection_id", selection_id.as_str());
            let booking = BookingGuard::new(Arc::clone(&self.service), selection_id);
            let counters = self.stats.metrics.worker(worker_id);
            counters.requests.fetch_add(1, Ordering::Relaxed);
            let exchange = self.try_on(route, request, client_headers, &selection);
            match self.while_worker_computes(exchange).await {
                Ok(answered) => {
                    self.stats.health.succeeded(worker_id);
                    counters.ttft.observe(arrived.elapsed());
                    let accounting = RelayAccounting {
                        booking,
                        counters,
                        arrived,
                        worker_id,
                    };
                    return Ok(relay(answered, accounting, request.stream, worker_id));
                }
                Err(failure) => {
                    let backoff = self.stats.health.failed(worker_id, Instant::now());
                    counters.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        worker_id,
                        attempt,
                        %failure,
                        ?backoff,
                        "worker failed before its first byte; its circuit is open and the request is re-booked"
                    );
                    failures.push(format!("worker {worker_id}: {failure}"));
                    excluded.insert(worker_id);
                    drop(booking);
                }
            }
        }
        if failures.is_empty() {
            return Err(OpenAiError::unavailable(format!(
                "no healthy worker serves model `{}`",
                request.model
            )));
        }
        Err(OpenAiError::bad_gateway(format!(
            "the request failed on {} worker(s) before any answer: {}",
            failures.len(),
            failures.join("; ")
        )))
    }

    /// Runs `exchange` to its end, and after its first turn (which wrote the request to the
    /// worker) records the bookings' queued cache predictions: the worker computes meanwhile,
    /// so the client does not wait for them.
    async fn while_worker_computes<T>(&self, exchange: impl Future<Output = T>) -> T {
        let mut exchange = std::pin::pin!(exchange);
        let first_turn = std::future::poll_fn(|cx| Poll::Ready(exchange.as_mut().poll(cx))).await;
        if let Poll::Ready(done) = first_turn {
            return done;
        }
        self.service.settle_predictions();
        exchange.await
    }

    async fn try_on(
        &self,
        route: GenerationRoute,
        request: &ParsedRequest,
        client_headers: &HeaderMap,
        selection: &SelectResponse,
    ) -> Result<Answered, worker_try::TryFailure> {
        let url = worker_url(&selection.endpoint, route.path())?;
        let delivery = self.options.hint_delivery;
        let hint = selection.kv_hint.as_ref();
        let body = forwarded_body(request, hint, delivery);
        let extra = hint_header(hint, delivery).map(|value| (KV_HINT_HEADER, value));
        let headers = worker_headers(client_headers, extra);
        try_worker(
            &self.client,
            url,
            headers,
            body,
            self.options.first_byte_timeout,
        )
        .await
    }

    /// Books the prompt on a worker of `model` outside `excluded` and outside the open
    /// circuits; `None` when no such worker is left.
    fn book(
        &self,
        model: &str,
        tokens: &[u32],
        excluded: &BTreeSet<u64>,
    ) -> Result<Option<SelectResponse>, OpenAiError> {
        let open = self.stats.health.open_workers();
        let allowed = if open.is_empty() && excluded.is_empty() {
            None
        } else {
            let allowed: BTreeSet<u64> = self
                .service
                .list_workers(Some(model), None)
                .into_iter()
                .map(|record| record.worker_id)
                .filter(|id| !open.contains(id) && !excluded.contains(id))
                .collect();
            if allowed.is_empty() {
                return Ok(None);
            }
            Some(allowed)
        };
        let request = select_request(model, tokens, allowed);
        match self.service.select_and_reserve(request) {
            Ok(selection) => Ok(Some(selection)),
            Err(error) => Err(booking_error(error)),
        }
    }

    async fn probe(&self, now: Instant) {
        let due = self.stats.health.due_for_probe(now);
        if due.is_empty() {
            return;
        }
        let endpoints: BTreeMap<u64, String> = self
            .service
            .list_workers(None, None)
            .into_iter()
            .filter_map(|record| Some((record.worker_id, record.endpoint?)))
            .collect();
        for worker_id in due {
            let Some(endpoint) = endpoints.get(&worker_id) else {
                // Deregistered while its circuit was open.
                self.stats.health.forget(worker_id);
                continue;
            };
            if self.probe_worker(endpoint).await {
                tracing::info!(
                    worker_id,
                    "health probe passed; the worker is booked again, on trial"
                );
                self.stats.health.probe_passed(worker_id);
            } else {
                let backoff = self.stats.health.failed(worker_id, Instant::now());
                tracing::debug!(worker_id, ?backoff, "health probe failed");
            }
        }
    }

    async fn probe_worker(&self, endpoint: &str) -> bool {
        let Ok(url) = worker_url(endpoint, "/health") else {
            return false;
        };
        let request = WorkerRequest {
            method: hyper::http::Method::GET,
            url,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let answer = tokio::time::timeout(self.options.probe_timeout, async {
            let (head, body) = self.client.send(request).await?;
            // Read to the end, so the connection is kept for the next request.
            let _ = http_body_util::BodyExt::collect(body).await;
            Ok::<_, worker_connections::SendError>(head.status)
        });
        matches!(answer.await, Ok(Ok(status)) if status.is_success())
    }
}

/// Probes workers whose circuit is open, until the gateway is dropped.
async fn probe_loop(gateway: Weak<Gateway>) {
    loop {
        let interval = match gateway.upgrade() {
            Some(gateway) => {
                gateway.probe(Instant::now()).await;
                gateway.options.probe_interval
            }
            None => return,
        };
        tokio::time::sleep(interval).await;
    }
}

fn select_request(model: &str, tokens: &[u32], allowed: Option<BTreeSet<u64>>) -> SelectRequest {
    SelectRequest {
        model_name: model.to_owned(),
        routing_group: default_routing_group(),
        selection_id: None,
        router_config_override: None,
        expected_output_tokens: None,
        priority_jump: None,
        strict_priority: None,
        session_id: None,
        session_context: None,
        pinned_worker: None,
        allowed_worker_ids: allowed,
        advisory: false,
        role: None,
        token_ids: Some(tokens.to_vec()),
        mm_routing_info: None,
        block_mm_infos: None,
        block_hashes: None,
        sequence_hashes: None,
        isl_tokens: None,
        lora_name: None,
        cache_salt: None,
        is_eagle: None,
    }
}

fn booking_error(error: ServiceError) -> OpenAiError {
    match error {
        ServiceError::BadRequest(message) => OpenAiError::bad_request(message, None),
        ServiceError::NotReady(message) | ServiceError::NotFound(message) => {
            OpenAiError::unavailable(message)
        }
        ServiceError::Overloaded(message) => OpenAiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            code: Some("workers_at_capacity"),
            ..OpenAiError::unavailable(message)
        },
        ServiceError::Conflict(message) | ServiceError::Internal(message) => {
            OpenAiError::internal(message)
        }
    }
}

/// The client's response: the worker's status and end-to-end headers, and its body relayed.
fn relay(
    answered: Answered,
    accounting: RelayAccounting,
    stream: bool,
    worker_id: u64,
) -> Response {
    let Answered { head, first, rest } = answered;
    let body = RelayedBody::new(first, rest, accounting, stream);
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = head.status;
    let headers = response.headers_mut();
    for (name, value) in &head.headers {
        if answer_header_relayed(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(WORKER_HEADER, HeaderValue::from(worker_id));
    response
}

async fn completions(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    gateway
        .generate(GenerationRoute::Completions, headers, body)
        .await
}

async fn chat_completions(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    gateway
        .generate(GenerationRoute::ChatCompletions, headers, body)
        .await
}

async fn models(State(gateway): State<Arc<Gateway>>) -> Response {
    let data: Vec<serde_json::Value> = gateway
        .models
        .iter()
        .map(|(name, model)| model_object(name, model))
        .collect();
    json_response(
        StatusCode::OK,
        &serde_json::json!({"object": "list", "data": data}),
    )
}

/// `GET /v1/models/{model}` (the client's `models.retrieve`): the model's object, or OpenAI's
/// 404. The name may hold slashes (`meta-llama/Llama-3.1-8B-Instruct`).
async fn model(State(gateway): State<Arc<Gateway>>, Path(name): Path<String>) -> Response {
    match gateway.models.get(&name) {
        Some(model) => json_response(StatusCode::OK, &model_object(&name, model)),
        None => OpenAiError::model_not_found(&name, &gateway.model_names()).into_response(),
    }
}

/// A served model as OpenAI's model object (with vLLM's `root` and `max_model_len`).
fn model_object(name: &str, model: &ModelEntry) -> serde_json::Value {
    serde_json::json!({
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "kv-router",
        "root": name,
        "max_model_len": model.context_limit,
    })
}

/// Any other path under `/v1/`: OpenAI's 404 for an invalid URL, naming the routes served, so
/// that a client calling an endpoint the gateway lacks (embeddings, …) gets `NotFoundError`.
async fn unknown_route(method: Method, uri: Uri) -> Response {
    OpenAiError::unknown_route(&method, uri.path()).into_response()
}

/// The fallback of a gateway route that takes only `allowed`: OpenAI's 405 in its error shape,
/// with the `Allow` header HTTP asks for.
fn wrong_method(
    allowed: Method,
) -> impl FnOnce(Method, Uri) -> std::future::Ready<Response> + Clone + Send + Sync + 'static {
    move |method, uri| {
        let error = OpenAiError::wrong_method(&method, uri.path(), &allowed);
        std::future::ready(([(header::ALLOW, allowed.as_str())], error).into_response())
    }
}

/// The gateway's routes.
pub fn routes(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route(
            "/v1/completions",
            post(completions).fallback(wrong_method(Method::POST)),
        )
        .route(
            "/v1/chat/completions",
            post(chat_completions).fallback(wrong_method(Method::POST)),
        )
        .route(
            "/v1/models",
            get(models).fallback(wrong_method(Method::GET)),
        )
        .route(
            "/v1/models/{*model}",
            get(model).fallback(wrong_method(Method::GET)),
        )
        .route("/v1/{*rest}", any(unknown_route))
        .layer(DefaultBodyLimit::max(REQUEST_BODY_LIMIT_BYTES))
        .with_state(gateway)
}
