//! Errors the gateway answers in OpenAI's shape: `{"error": {"message", "type", "param",
//! "code"}}` with the matching HTTP status, so a stock OpenAI client raises the right
//! exception (`BadRequestError`, `NotFoundError`, …). Enters: what went wrong; leaves: a
//! response, or the `data: {"error": …}` event that ends a stream that already started.

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answered to an OpenAI client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpenAiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// OpenAI's error type (`invalid_request_error`, `server_error`, …).
    pub kind: &'static str,
    /// What was wrong and what to do.
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<&'static str>,
    /// OpenAI's machine-readable code (`model_not_found`, `context_length_exceeded`, …).
    pub code: Option<&'static str>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: ErrorBody<'a>,
}

impl OpenAiError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param,
            code: None,
        }
    }

    /// OpenAI's 404 for a model nobody serves.
    pub fn model_not_found(model: &str, served: &[&str]) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            message: format!(
                "The model `{model}` does not exist; this gateway serves: {}",
                served.join(", ")
            ),
            param: Some("model"),
            code: Some("model_not_found"),
        }
    }

    /// OpenAI's 404 for a path under `/v1/` the gateway does not serve.
    pub fn unknown_route(method: &Method, path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            message: format!(
                "Invalid URL ({method} {path}): this gateway serves POST /v1/completions, \
                 POST /v1/chat/completions, GET /v1/models and GET /v1/models/{{model}}"
            ),
            param: None,
            code: None,
        }
    }

    /// OpenAI's 405 for a gateway route called with `method` where it takes `allowed`.
    pub fn wrong_method(method: &Method, path: &str, allowed: &Method) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            kind: "invalid_request_error",
            message: format!("Invalid method for URL ({method} {path}): use {allowed}"),
            param: None,
            code: None,
        }
    }

    /// OpenAI's 400 for a prompt longer than the model's context.
    pub fn context_length_exceeded(limit: usize, prompt: usize, max_tokens: Option<u64>) -> Self {
        let asked = match max_tokens {
            Some(max_tokens) => format!(
                "{prompt} tokens in the prompt and {max_tokens} requested for the completion"
            ),
            None => format!("{prompt} tokens in the prompt"),
        };
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: format!(
                "This model's maximum context length is {limit} tokens. However, you requested \
                 {asked}. Please reduce the length of the prompt or of max_tokens."
            ),
            param: Some("messages"),
            code: Some("context_length_exceeded"),
        }
    }

    /// A 503: no worker can take the request now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "service_unavailable",
            message: message.into(),
            param: None,
            code: Some("no_healthy_workers"),
        }
    }

    /// A 502: the workers failed the request before answering.
    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_GATEWAY,
            kind: "server_error",
            message: message.into(),
            param: None,
            code: Some("upstream_failed"),
        }
    }

    /// A 500 for the gateway's own failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// The JSON body, `{"error": {...}}`.
    pub fn to_json(&self) -> String {
        let envelope = Envelope {
            error: ErrorBody {
                message: &self.message,
                kind: self.kind,
                param: self.param,
                code: self.code,
            },
        };
        serde_json::to_string(&envelope).unwrap_or_else(|_| "{\"error\":{}}".to_owned())
    }

    /// The server-sent event that ends a stream with this error (what OpenAI's clients raise
    /// as `APIError` mid-stream), followed by the stream's end marker.
    pub fn to_sse_event(&self) -> String {
        format!("data: {}\n\ndata: [DONE]\n\n", self.to_json())
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.to_json(),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_openais_fields() {
        let error = OpenAiError::model_not_found("x", &["tiny"]);
        let body: serde_json::Value = serde_json::from_str(&error.to_json()).expect("json");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["param"], "model");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("`x`"))
        );
    }

    #[test]
    fn the_stream_event_is_one_data_line_then_done() {
        let event = OpenAiError::bad_gateway("worker 3 failed").to_sse_event();
        assert!(event.starts_with("data: {\"error\":"));
        assert!(event.ends_with("data: [DONE]\n\n"));
    }
}
