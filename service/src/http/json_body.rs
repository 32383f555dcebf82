//! JSON request bodies and answers, with the statuses and messages axum's `Json` gives (and so
//! upstream's selection service): 415 without a JSON content type, 413 over the body limit, 400
//! for bad syntax, 422 for wrong field types. Built on `serde_json` directly rather than on
//! axum's `json` feature, which would switch on `serde_json`'s `raw_value` for the whole
//! workspace.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::http::token_array::split_token_ids;

/// A request body read as JSON into `T`.
pub struct JsonBody<T>(pub T);

/// Why a body (or a path parameter) was refused: its status and message, answered as
/// `{"error": ...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub StatusCode, pub String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        json_response(self.0, &serde_json::json!({ "error": self.1 }))
    }
}

/// `value` as a JSON answer with `status`.
pub fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            error.to_string(),
        )
            .into_response(),
    }
}

/// Whether the request says its body is JSON (`application/json` or `application/*+json`).
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", subtype)) => subtype == "json" || subtype.ends_with("+json"),
        _ => false,
    }
}

/// Reads `bytes` as `T`: 400 for bad syntax or trailing characters, 422 for data that does not
/// fit `T` (the message names the field's path).
///
/// Well-formed bodies are read by `serde_json` alone; only a refused body is read again with
/// path tracking to name the field in its message (tracking every element of a long
/// `token_ids` array would cost a large share of a booking).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Refused> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(_) => parse_tracked(bytes),
    }
}

/// [`parse`] with the failing field's path in the message.
fn parse_tracked<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Refused> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| match error
        .inner()
        .classify()
    {
        serde_json::error::Category::Data => Refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Failed to deserialize the JSON body into the target type: {error}"),
        ),
        _ => Refused(
            StatusCode::BAD_REQUEST,
            format!("Failed to parse the request body as JSON: {error}"),
        ),
    })?;
    deserializer.end().map_err(|error| {
        Refused(
            StatusCode::BAD_REQUEST,
            format!("Failed to parse the request body as JSON: {error}"),
        )
    })?;
    Ok(value)
}

/// A request body with a top-level `token_ids` array (the prompt bodies).
pub trait TokenIdsBody: DeserializeOwned {
    /// The body's `token_ids`.
    fn token_ids_mut(&mut self) -> &mut Option<Vec<u32>>;
}

/// Reads a prompt body as [`parse`] does, with its `token_ids` array read by the fast path of
/// [`split_token_ids`]; bodies that path steps aside from (and refused ones) are read by
/// [`parse`] itself, so answers and messages are the same.
pub fn parse_prompt<T: TokenIdsBody>(bytes: &[u8]) -> Result<T, Refused> {
    if let Some(split) = split_token_ids(bytes)
        && let Ok(mut value) = serde_json::from_slice::<T>(&split.rest)
    {
        let tokens = value.token_ids_mut();
        if tokens.as_ref().is_some_and(Vec::is_empty) {
            *tokens = Some(split.token_ids);
            return Ok(value);
        }
    }
    parse(bytes)
}

/// A prompt request body read as JSON into `T` by [`parse_prompt`].
pub struct PromptBody<T>(pub T);

/// The body of a request that says it is JSON, or why it was refused.
async fn json_bytes<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, Refused> {
    if !json_content_type(request.headers()) {
        return Err(Refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Expected request with `Content-Type: application/json`".to_owned(),
        ));
    }
    Bytes::from_request(request, state)
        .await
        .map_err(|rejection| Refused(rejection.status(), rejection.body_text()))
}

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Refused;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_bytes(request, state).await?;
        parse(&bytes).map(JsonBody)
    }
}

impl<T, S> FromRequest<S> for PromptBody<T>
where
    T: TokenIdsBody,
    S: Send + Sync,
{
    type Rejection = Refused;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_bytes(request, state).await?;
        parse_prompt(&bytes).map(PromptBody)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_is_400_and_types_are_422_with_the_path() {
        let syntax = parse::<serde_json::Value>(b"{\"a\": ").expect_err("syntax");
        assert_eq!(syntax.0, StatusCode::BAD_REQUEST);
        let trailing = parse::<serde_json::Value>(b"{} x").expect_err("trailing");
        assert_eq!(trailing.0, StatusCode::BAD_REQUEST);
        #[derive(serde::Deserialize, Debug)]
        struct Body {
            #[allow(dead_code)]
            worker_id: u64,
        }
        let types = parse::<Body>(br#"{"worker_id": "one"}"#).expect_err("types");
        assert_eq!(types.0, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(types.1.contains("worker_id: invalid type"), "{}", types.1);
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Prompt {
        model_name: Option<String>,
        token_ids: Option<Vec<u32>>,
    }

    impl TokenIdsBody for Prompt {
        fn token_ids_mut(&mut self) -> &mut Option<Vec<u32>> {
            &mut self.token_ids
        }
    }

    #[test]
    fn prompt_bodies_read_as_plain_ones() {
        for body in [
            r#"{"model_name": "m", "token_ids": [1, 2, 3]}"#,
            r#"{"token_ids": [], "model_name": null}"#,
            r#"{"token_ids": null}"#,
            r#"{"token_ids": [1, -2]}"#,
            r#"{"token_ids": [1], "token_ids": [2]}"#,
            r#"{"token_ids": [1], "model_name": 3}"#,
            r#"{"token_ids": [1]} x"#,
            r#"{"token_ids": [1], "#,
            r#"{"model_name": "m"}"#,
        ] {
            assert_eq!(
                parse_prompt::<Prompt>(body.as_bytes()),
                parse::<Prompt>(body.as_bytes()),
                "{body}"
            );
        }
        assert_eq!(
            parse_prompt::<Prompt>(br#"{"token_ids": [7, 8]}"#),
            Ok(Prompt {
                model_name: None,
                token_ids: Some(vec![7, 8])
            })
        );
    }

    #[test]
    fn json_content_types() {
        for (value, json) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("application/vnd.api+json", true),
            ("text/json", false),
            ("application/x-www-form-urlencoded", false),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(json_content_type(&headers), json, "{value}");
        }
        assert!(!json_content_type(&HeaderMap::new()));
    }
}
