//! An OpenAI request as the gateway reads it: the raw body the worker will get, and what
//! routing needs of it (model, stream flag, `max_tokens`, the prompt's token ids). Enters: the
//! client's bytes and the model's tokenizer; leaves: a [`ParsedRequest`] or a 4xx
//! [`OpenAiError`], before anything is booked.

use super::model_tokenizer::ModelTokenizer;
use super::openai_error::OpenAiError;
use bytes::Bytes;
use serde_json::Value;

/// The generation routes the gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerationRoute {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    ChatCompletions,
}

impl GenerationRoute {
    /// The route's path, as the worker serves it too.
    pub fn path(self) -> &'static str {
        match self {
            GenerationRoute::Completions => "/v1/completions",
            GenerationRoute::ChatCompletions => "/v1/chat/completions",
        }
    }
}

/// A client's request, parsed once.
#[derive(Debug)]
pub struct ParsedRequest {
    /// The body exactly as the client sent it.
    pub raw: Bytes,
    /// The body as JSON (always an object).
    pub body: Value,
    /// The `model` field.
    pub model: String,
    /// Whether the answer is streamed (`stream: true`).
    pub stream: bool,
    /// `max_tokens` (or chat's `max_completion_tokens`), when given.
    pub max_tokens: Option<u64>,
}

impl ParsedRequest {
    /// Parses `raw`: a JSON object with a string `model`.
    pub fn parse(raw: Bytes, route: GenerationRoute) -> Result<Self, OpenAiError> {
        let value: Value = serde_json::from_slice(&raw).map_err(|error| {
            OpenAiError::bad_request(
                format!("the request body is not valid JSON ({error}); send a JSON object"),
                None,
            )
        })?;
        let Value::Object(fields) = &value else {
            return Err(OpenAiError::bad_request(
                "the request body must be a JSON object",
                None,
            ));
        };
        let body = fields;
        let model = match body.get("model") {
            Some(Value::String(model)) => model.clone(),
            Some(_) => {
                return Err(OpenAiError::bad_request(
                    "`model` must be a string",
                    Some("model"),
                ));
            }
            None => {
                return Err(OpenAiError::bad_request(
                    "`model` is required",
                    Some("model"),
                ));
            }
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => {
                return Err(OpenAiError::bad_request(
                    "`stream` must be a boolean",
                    Some("stream"),
                ));
            }
        };
        let max_tokens = max_tokens(body, route)?;
        Ok(Self {
            raw,
            body: value,
            model,
            stream,
            max_tokens,
        })
    }

    /// The prompt's token ids, as the engine computes them: a completion's `prompt` (a
    /// string, token ids, or a list of either, routed by its first entry) encoded with the
    /// tokenizer's special tokens; a chat's `messages` rendered through the model's chat
    /// template.
    pub fn prompt_tokens(
        &self,
        route: GenerationRoute,
        tokenizer: &ModelTokenizer,
    ) -> Result<Vec<u32>, OpenAiError> {
        let prompt_error = |error: super::model_tokenizer::PromptError| {
            OpenAiError::bad_request(error.to_string(), None)
        };
        match route {
            GenerationRoute::ChatCompletions => {
                if !matches!(self.body.get("messages"), Some(Value::Array(_))) {
                    return Err(OpenAiError::bad_request(
                        "`messages` is required and must be a list of messages",
                        Some("messages"),
                    ));
                }
                tokenizer.chat_tokens(&self.body).map_err(prompt_error)
            }
            GenerationRoute::Completions => match completion_prompt(self.body.get("prompt"))? {
                CompletionPrompt::Text(text) => tokenizer.encode(text, true).map_err(prompt_error),
                CompletionPrompt::Tokens(tokens) => Ok(tokens),
            },
        }
    }
}

fn max_tokens(
    body: &serde_json::Map<String, Value>,
    route: GenerationRoute,
) -> Result<Option<u64>, OpenAiError> {
    let fields: &[&'static str] = match route {
        GenerationRoute::Completions => &["max_tokens"],
        GenerationRoute::ChatCompletions => &["max_completion_tokens", "max_tokens"],
    };
    for field in fields {
        match body.get(*field) {
            None | Some(Value::Null) => continue,
            Some(value) => {
                return value.as_u64().map(Some).ok_or_else(|| {
                    OpenAiError::bad_request(
                        format!("`{field}` must be a non-negative integer"),
                        Some(field),
                    )
                });
            }
        }
    }
    Ok(None)
}

enum CompletionPrompt<'a> {
    Text(&'a str),
    Tokens(Vec<u32>),
}

fn completion_prompt(prompt: Option<&Value>) -> Result<CompletionPrompt<'_>, OpenAiError> {
    let invalid = || {
        OpenAiError::bad_request(
            "`prompt` must be a string, a list of token ids, or a non-empty list of either",
            Some("prompt"),
        )
    };
    match prompt {
        None | Some(Value::Null) => Err(OpenAiError::bad_request(
            "`prompt` is required",
            Some("prompt"),
        )),
        Some(Value::String(text)) => Ok(CompletionPrompt::Text(text)),
        Some(Value::Array(items)) => match items.first() {
            None => Err(invalid()),
            Some(Value::String(text)) => Ok(CompletionPrompt::Text(text)),
            Some(Value::Array(first)) => token_ids(first).map(CompletionPrompt::Tokens),
            Some(Value::Number(_)) => token_ids(items).map(CompletionPrompt::Tokens),
            Some(_) => Err(invalid()),
        },
        Some(_) => Err(invalid()),
    }
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, OpenAiError> {
    items
        .iter()
        .map(|item| {
            item.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    OpenAiError::bad_request(
                        "a token id in `prompt` is not a non-negative 32-bit integer",
                        Some("prompt"),
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ParsedRequest, OpenAiError> {
        ParsedRequest::parse(Bytes::from(text.to_owned()), GenerationRoute::Completions)
    }

    #[test]
    fn a_body_that_is_not_an_object_with_a_model_is_a_400() {
        for body in [
            "{",
            "[1]",
            "{}",
            "{\"model\": 3}",
            "{\"model\": \"m\", \"stream\": 1}",
        ] {
            let error = parse(body).expect_err(body);
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(error.kind, "invalid_request_error");
        }
    }

    #[test]
    fn stream_and_max_tokens_are_read() {
        let parsed =
            parse("{\"model\": \"m\", \"stream\": true, \"max_tokens\": 7, \"prompt\": \"x\"}")
                .expect("parses");
        assert!(parsed.stream);
        assert_eq!(parsed.max_tokens, Some(7));
        assert!(parse("{\"model\": \"m\", \"max_tokens\": -1}").is_err());
    }

    #[test]
    fn token_id_prompts_are_taken_as_they_are() {
        for (prompt, expected) in [
            (serde_json::json!([1, 2, 3]), vec![1, 2, 3]),
            (serde_json::json!([[4, 5], [6]]), vec![4, 5]),
        ] {
            match completion_prompt(Some(&prompt)) {
                Ok(CompletionPrompt::Tokens(tokens)) => assert_eq!(tokens, expected),
                _ => panic!("{prompt} should be token ids"),
            }
        }
        assert!(completion_prompt(Some(&serde_json::json!([]))).is_err());
        assert!(completion_prompt(Some(&serde_json::json!([-1]))).is_err());
        assert!(completion_prompt(None).is_err());
    }
}
