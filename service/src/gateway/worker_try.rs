//! One try of a request on one worker: the request goes out over a kept HTTP/1 connection
//! ([`WorkerConnections`]), and the try succeeds once the worker's answer has its first byte. A
//! refused connection, no first byte within the timeout, a 5xx status or a body that fails
//! before its first byte is a failure the gateway may re-book elsewhere, since the client has
//! seen nothing yet. Enters: the worker's endpoint, the client's headers and the body to send;
//! leaves: the answer's head, its first frame and the rest of its body, or why the try failed.

use super::worker_connections::{WorkerBody, WorkerConnections, WorkerRequest};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use std::time::Duration;

/// How long a kept connection to a worker may sit idle before it is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The gateway's connections to its workers, refused after `connect_timeout`.
pub fn worker_client(connect_timeout: Duration) -> WorkerConnections {
    WorkerConnections::new(connect_timeout, IDLE_TIMEOUT)
}

/// A worker's answer whose first byte has arrived.
pub struct Answered {
    /// Status and headers.
    pub head: hyper::http::response::Parts,
    /// The first frame of the body (`None`: the body is empty).
    pub first: Option<Frame<Bytes>>,
    /// The rest of the body.
    pub rest: WorkerBody,
}

/// Why a try failed before the client saw a byte.
#[derive(Debug, thiserror::Error)]
pub enum TryFailure {
    /// The worker's endpoint is not an `http://` URL the gateway can call.
    #[error(
        "endpoint `{endpoint}` is not an http:// base URL ({reason}); register the worker with its OpenAI base URL, e.g. http://10.0.0.5:8000"
    )]
    BadEndpoint {
        /// The endpoint as registered.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connection was refused or broke before an answer.
    #[error("could not reach the worker: {0}")]
    Unreachable(String),
    /// No first byte within the timeout.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The worker answered a server error.
    #[error("the worker answered {status}: {body}")]
    ServerError {
        /// The status.
        status: StatusCode,
        /// The start of its body.
        body: String,
    },
}

/// The URL of `path` (`/v1/completions`) on a worker whose endpoint is `endpoint`: its OpenAI
/// base URL, with or without a trailing `/v1`.
pub fn worker_url(endpoint: &str, path: &str) -> Result<Uri, TryFailure> {
    let bad = |reason: &str| TryFailure::BadEndpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    if endpoint.is_empty() {
        return Err(bad("the worker has no endpoint"));
    }
    if !endpoint.starts_with("http://") {
        return Err(bad("only http:// is supported"));
    }
    let base = endpoint.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    format!("{base}{path}")
        .parse::<Uri>()
        .map_err(|error| bad(&error.to_string()))
}

/// Headers that describe one connection, not the message, in either direction (RFC 9110
/// §7.6.1), and `content-length`, which the gateway's own connection sets (a forwarded body
/// may have changed length, a relayed one goes frame by frame).
fn connection_header(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "trailer"
            | "upgrade"
            | "content-length"
    )
}

/// Whether a header of the client's request reaches the worker: every one but the
/// `connection_header`s, the proxy's own (`proxy-*`, `te`) and `host`, which the worker's URL
/// sets.
fn forwarded(name: &HeaderName) -> bool {
    let name = name.as_str();
    !connection_header(name)
        && !matches!(
            name,
            "proxy-connection" | "proxy-authenticate" | "proxy-authorization" | "te" | "host"
        )
}

/// Whether a header of the worker's answer reaches the client: every one but the
/// `connection_header`s, which the gateway's own connection sets.
pub fn answer_header_relayed(name: &HeaderName) -> bool {
    !connection_header(name.as_str())
}

/// The headers the worker gets: the client's end-to-end headers, plus `extra`.
pub fn worker_headers(client: &HeaderMap, extra: Option<(&'static str, HeaderValue)>) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(client.len() + 2);
    for (name, value) in client {
        if forwarded(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some((name, value)) = extra {
        headers.insert(HeaderName::from_static(name), value);
    }
    headers
}

/// Sends `body` to `url` and waits, at most `timeout`, for the answer's first byte.
pub async fn try_worker(
    client: &WorkerConnections,
    url: Uri,
    headers: HeaderMap,
    body: Bytes,
    timeout: Duration,
) -> Result<Answered, TryFailure> {
    let request = WorkerRequest {
        method: Method::POST,
        url,
        headers,
        body,
    };
    let exchange = async {
        let (head, mut rest) = client
            .send(request)
            .await
            .map_err(|error| TryFailure::Unreachable(error_chain(&error)))?;
        if head.status.is_server_error() {
            let body = first_bytes(rest).await;
            return Err(TryFailure::ServerError {
                status: head.status,
                body,
            });
        }
        let first = match rest.frame().await {
            None => None,
            Some(Ok(frame)) => Some(frame),
            Some(Err(error)) => return Err(TryFailure::Unreachable(error_chain(&error))),
        };
        Ok(Answered { head, first, rest })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(TryFailure::TimedOut(timeout)))
}

/// The start of an error body, for the log and the client's message.
async fn first_bytes(body: WorkerBody) -> String {
    let limited = http_body_util::Limited::new(body, 4096);
    match limited.collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(_) => String::new(),
    }
}

/// An error and its sources, one after the other (hyper's own message is only the outer one).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_urls_accept_a_base_with_or_without_v1() {
        for endpoint in [
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/",
            "http://127.0.0.1:8000/v1",
            "http://127.0.0.1:8000/v1/",
        ] {
            assert_eq!(
                worker_url(endpoint, "/v1/completions")
                    .expect(endpoint)
                    .to_string(),
                "http://127.0.0.1:8000/v1/completions"
            );
        }
        assert!(matches!(
            worker_url("", "/v1/completions"),
            Err(TryFailure::BadEndpoint { .. })
        ));
        assert!(matches!(
            worker_url("tcp://h:1", "/v1/completions"),
            Err(TryFailure::BadEndpoint { .. })
        ));
    }

    #[test]
    fn hop_by_hop_headers_are_not_forwarded() {
        let mut client = HeaderMap::new();
        client.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        client.insert(header::HOST, HeaderValue::from_static("gateway"));
        client.insert(header::CONTENT_LENGTH, HeaderValue::from_static("10"));
        client.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        let headers = worker_headers(
            &client,
            Some(("x-dynamo-kv-hint", HeaderValue::from_static("{}"))),
        );
        assert!(headers.get(header::CONNECTION).is_none());
        assert!(headers.get(header::HOST).is_none());
        assert!(headers.get(header::CONTENT_LENGTH).is_none());
        assert_eq!(headers[header::AUTHORIZATION], "Bearer k");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(headers["x-dynamo-kv-hint"], "{}");
    }

    #[test]
    fn hop_by_hop_answer_headers_are_not_relayed() {
        for dropped in [
            "connection",
            "transfer-encoding",
            "content-length",
            "upgrade",
        ] {
            assert!(!answer_header_relayed(&HeaderName::from_static(dropped)));
        }
        for kept in ["content-type", "x-request-id", "cache-control"] {
            assert!(answer_header_relayed(&HeaderName::from_static(kept)));
        }
    }
}
