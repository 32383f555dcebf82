//! A served model's tokenizer and chat template, loaded from local Hugging Face files (never
//! downloaded), so the gateway computes the token ids a vLLM or SGLang engine computes for the
//! same request.
//!
//! Enters: at startup, a model directory (`tokenizer.json`, optionally `tokenizer_config.json`
//! and `chat_template.jinja`) or a `tokenizer.json` path; per request, a completion prompt or
//! a chat body (`messages`, `tools`, `documents`, `chat_template_kwargs`,
//! `add_generation_prompt`, `continue_final_message`, `add_special_tokens`).
//! Leaves: token ids (and the rendered chat prompt); a [`TokenizerLoadError`] at startup, a
//! [`PromptError`] (a client error) per request.
//!
//! Messages reach the template as vLLM hands them to transformers: rebuilt with only `role`,
//! `content`, `name`, `tool_calls`, `reasoning`, `tool_call_id`, `task` (and a developer's
//! `tools`); tool-call `arguments` given as JSON text parsed into objects. For a template that
//! prints `content` as a string (vLLM's "string" content format, detected as vLLM does), a
//! list of text parts becomes their texts joined with `"\n"`; for one that loops over
//! `content` ("openai" format), content is always a list of `{"type": "text", "text": ...}`
//! parts. Image, audio and other non-text parts are refused: the gateway cannot compute the
//! engine's placeholder tokens for them. Tools are passed as vLLM's `model_dump()` lays them
//! out (`type`, then `function` with `name`, `description`, `parameters`, then extra fields).

use super::chat_template::{
    ChatTemplates, ContentFormat, NamedTemplate, RenderError, SpecialTokens, TemplateError,
    templates_from_config,
};
use super::direct_encoder::DirectEncoder;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The tokenizer file a model directory must hold.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The optional tokenizer configuration beside it (special tokens, template, context limit).
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// The optional chat template file beside it; it wins over the config's `chat_template`.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// `model_max_length` at or above this is transformers' "no limit" sentinel (`int(1e30)`).
const NO_LIMIT_SENTINEL: f64 = 1e29;

/// Why a model's tokenizer could not be loaded (a startup error).
#[derive(Debug, thiserror::Error)]
pub enum TokenizerLoadError {
    /// The path is neither a directory nor a file.
    #[error(
        "{path} does not exist: pass a local model directory holding tokenizer.json (a Hugging Face download), or the tokenizer.json file itself; nothing is downloaded"
    )]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The directory holds no tokenizer.json.
    #[error(
        "{path} is missing: a model directory with the Hugging Face tokenizer.json is needed (copy the model's tokenizer.json there, or pass the file's own path); nothing is downloaded"
    )]
    MissingTokenizer {
        /// The tokenizer.json path looked for.
        path: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// tokenizer.json is not a tokenizer the `tokenizers` library can load.
    #[error(
        "{path} is not a valid tokenizer.json: {detail}; replace it with the model's own tokenizer.json"
    )]
    BadTokenizer {
        /// The file.
        path: PathBuf,
        /// The parser's description (with line and column for malformed JSON).
        detail: String,
    },
    /// tokenizer_config.json is not JSON.
    #[error(
        "{path} is not valid JSON: {source}; fix the file or replace it with the model's own tokenizer_config.json"
    )]
    BadConfig {
        /// The file.
        path: PathBuf,
        /// The parser's error (with line and column).
        source: serde_json::Error,
    },
    /// The chat template is malformed or does not compile.
    #[error("the chat template of {path} is unusable: {source}")]
    Template {
        /// The file the template came from.
        path: PathBuf,
        /// What is wrong with it.
        source: TemplateError,
    },
}

/// Why a request's prompt could not be tokenized (a client error: 400 at the gateway).
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// The model has no chat template.
    #[error(
        "model {model} has no chat_template; use /v1/completions with a `prompt`, or add a chat template to the model's tokenizer_config.json"
    )]
    NoChatTemplate {
        /// The model directory.
        model: String,
    },
    /// The model has named templates but none applies.
    #[error(
        "model {model} has several chat templates and none named `default`; use /v1/completions with a `prompt`"
    )]
    NoDefaultTemplate {
        /// The model directory.
        model: String,
    },
    /// The chat template called `raise_exception(message)`.
    #[error("the model's chat template rejected the messages: {0}")]
    Raised(String),
    /// The chat template failed otherwise.
    #[error(
        "the model's chat template could not render the messages: {0}; check that they have the fields this model expects"
    )]
    Render(String),
    /// A request field has the wrong shape.
    #[error("invalid `{field}`: {detail}")]
    BadField {
        /// The request field.
        field: &'static str,
        /// What was wrong and what is expected.
        detail: String,
    },
    /// The tokenizer failed on the text.
    #[error("the tokenizer failed on the prompt: {0}")]
    Tokenizer(String),
}

impl PromptError {
    fn field(field: &'static str, detail: impl Into<String>) -> Self {
        Self::BadField {
            field,
            detail: detail.into(),
        }
    }
}

/// A model's tokenizer and chat template, loaded from local Hugging Face files.
pub struct ModelTokenizer {
    model: String,
    tokenizer: tokenizers::Tokenizer,
    /// The same ids without `tokenizers`' offset tracking, when the pipeline allows it.
    direct: Option<DirectEncoder>,
    templates: Option<ChatTemplates>,
    special: SpecialTokens,
    context_limit: Option<usize>,
}

impl ModelTokenizer {
    /// Loads `path`: a model directory holding `tokenizer.json` (and optionally
    /// `tokenizer_config.json`, `chat_template.jinja`), or the `tokenizer.json` file itself
    /// (then the config is looked for beside it).
    pub fn load(path: &Path) -> Result<Self, TokenizerLoadError> {
        let (dir, tokenizer_path) = locate(path)?;
        let (tokenizer, direct) = load_tokenizer(&tokenizer_path)?;
        let config_path = dir.join(TOKENIZER_CONFIG_FILE);
        let config = load_config(&config_path)?;
        let special = SpecialTokens::from_config(&config);
        let templates = load_templates(&dir, &config_path, &config, &special)?;
        let model = dir.display().to_string();
        tracing::debug!(
            model,
            chat_template = templates.is_some(),
            "loaded the model's tokenizer"
        );
        Ok(Self {
            model,
            tokenizer,
            direct,
            templates,
            context_limit: context_limit(&config),
            special,
        })
    }

    /// Token ids of a completion prompt (`add_special_tokens`: true for /v1/completions
    /// prompts, as vLLM does).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, PromptError> {
        let direct = self.direct.as_ref();
        if let Some(ids) = direct.and_then(|d| d.encode(&self.tokenizer, text, add_special_tokens))
        {
            return Ok(ids);
        }
        self.encode_in_full(text, add_special_tokens)
    }

    /// Token ids through `tokenizers`' whole pipeline (what [`encode`](Self::encode) gives
    /// where the direct encoder cannot).
    pub fn encode_in_full(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, PromptError> {
        self.tokenizer
            .encode_fast(text, add_special_tokens)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|error| PromptError::Tokenizer(error.to_string()))
    }

    /// Whether prompts are encoded by the [`DirectEncoder`] (else by `tokenizers`' full
    /// pipeline); the startup log says why not.
    pub fn encodes_directly(&self) -> bool {
        self.direct.is_some()
    }

    /// The text of token ids (for tests and logs).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, PromptError> {
        self.tokenizer
            .decode(ids, skip_special_tokens)
            .map_err(|error| PromptError::Tokenizer(error.to_string()))
    }

    /// Token ids of a chat request: the rendered template encoded with the body's
    /// `add_special_tokens` (default false: the template carries BOS), as vLLM does.
    pub fn chat_tokens(&self, body: &Value) -> Result<Vec<u32>, PromptError> {
        let add_special_tokens = optional_bool(body, "add_special_tokens", false)?;
        let text = self.render_chat(body)?;
        self.encode(&text, add_special_tokens)
    }

    /// The rendered chat prompt (what [`chat_tokens`](Self::chat_tokens) encodes).
    pub fn render_chat(&self, body: &Value) -> Result<String, PromptError> {
        let templates = self
            .templates
            .as_ref()
            .ok_or_else(|| PromptError::NoChatTemplate {
                model: self.model.clone(),
            })?;
        let request = ChatRequest::parse(body)?;
        let name = templates.select(request.tools.is_some()).ok_or_else(|| {
            PromptError::NoDefaultTemplate {
                model: self.model.clone(),
            }
        })?;
        let messages = conversation(request.messages, templates.content_format(name))?;
        let context = request.context(&messages, &self.special);
        let rendered = templates
            .render(name, context)
            .map_err(|error| match error {
                RenderError::Raised(message) => PromptError::Raised(message),
                failed @ RenderError::Failed { .. } => PromptError::Render(failed.to_string()),
            })?;
        if request.continue_final_message {
            return continue_final_message(rendered, &messages);
        }
        Ok(rendered)
    }

    /// The context limit: tokenizer_config.json's `model_max_length`, unless it is absent or
    /// transformers' "no limit" sentinel.
    pub fn context_limit(&self) -> Option<usize> {
        self.context_limit
    }

    /// Whether a chat template was found.
    pub fn has_chat_template(&self) -> bool {
        self.templates.is_some()
    }

    /// The model directory the files were loaded from (as errors name it).
    pub fn model_dir(&self) -> &str {
        &self.model
    }
}

/// The model directory and its tokenizer.json.
fn locate(path: &Path) -> Result<(PathBuf, PathBuf), TokenizerLoadError> {
    if path.is_dir() {
        let tokenizer = path.join(TOKENIZER_FILE);
        if !tokenizer.is_file() {
            return Err(TokenizerLoadError::MissingTokenizer { path: tokenizer });
        }
        return Ok((path.to_path_buf(), tokenizer));
    }
    if path.is_file() {
        let dir = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        return Ok((dir.to_path_buf(), path.to_path_buf()));
    }
    Err(TokenizerLoadError::NotFound {
        path: path.to_path_buf(),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, TokenizerLoadError> {
    std::fs::read(path).map_err(|source| TokenizerLoadError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The tokenizer at `path`, and its direct encoder when its pipeline has one.
fn load_tokenizer(
    path: &Path,
) -> Result<(tokenizers::Tokenizer, Option<DirectEncoder>), TokenizerLoadError> {
    let bytes = read(path)?;
    let bad = |detail: String| TokenizerLoadError::BadTokenizer {
        path: path.to_path_buf(),
        detail,
    };
    let tokenizer = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| bad(e.to_string()))?;
    let json: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let direct = match DirectEncoder::plan(&json, &tokenizer) {
        Ok(direct) => Some(direct),
        Err(why) => {
            tracing::info!(
                tokenizer = %path.display(),
                %why,
                "prompts go through tokenizers' full pipeline (no direct encoder)"
            );
            None
        }
    };
    Ok((tokenizer, direct))
}

/// The parsed tokenizer_config.json, or an empty object when there is none.
fn load_config(path: &Path) -> Result<Value, TokenizerLoadError> {
    if !path.is_file() {
        return Ok(Value::Object(Map::new()));
    }
    let bytes = read(path)?;
    serde_json::from_slice(&bytes).map_err(|source| TokenizerLoadError::BadConfig {
        path: path.to_path_buf(),
        source,
    })
}

/// The compiled templates: `chat_template.jinja` if present, else the config's.
fn load_templates(
    dir: &Path,
    config_path: &Path,
    config: &Value,
    special: &SpecialTokens,
) -> Result<Option<ChatTemplates>, TokenizerLoadError> {
    let jinja_path = dir.join(CHAT_TEMPLATE_FILE);
    let (path, templates) = if jinja_path.is_file() {
        let source = String::from_utf8_lossy(&read(&jinja_path)?).into_owned();
        let named = NamedTemplate {
            name: super::chat_template::DEFAULT_TEMPLATE.to_owned(),
            source,
        };
        (jinja_path, Ok(vec![named]))
    } else {
        (config_path.to_path_buf(), templates_from_config(config))
    };
    let template_error = |source| TokenizerLoadError::Template {
        path: path.clone(),
        source,
    };
    let templates = templates.map_err(template_error)?;
    if templates.is_empty() {
        return Ok(None);
    }
    ChatTemplates::compile(templates, special)
        .map(Some)
        .map_err(template_error)
}

fn context_limit(config: &Value) -> Option<usize> {
    let limit = config.get("model_max_length")?;
    if let Some(limit) = limit.as_u64() {
        return (limit > 0 && (limit as f64) < NO_LIMIT_SENTINEL)
            .then(|| usize::try_from(limit).ok())
            .flatten();
    }
    let limit = limit.as_f64()?;
    (limit.is_finite() && (1.0..NO_LIMIT_SENTINEL).contains(&limit) && limit < usize::MAX as f64)
        .then_some(limit as usize)
}

fn optional_bool(body: &Value, field: &'static str, default: bool) -> Result<bool, PromptError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(value)) => Ok(*value),
        Some(_) => Err(PromptError::field(field, "expected true or false")),
    }
}

/// A template value (minijinja's maps keep insertion order here, which `serde_json::Map`
/// does not in this build: it sorts keys, so ordered data is built as template values).
type Jinja = minijinja::Value;

fn jinja(value: &Value) -> Jinja {
    Jinja::from(minijinja::value::Serde(value))
}

fn jinja_map(pairs: Vec<(&str, Jinja)>) -> Jinja {
    Jinja::from_pairs(pairs)
}

/// The chat fields of a request body that shape the prompt.
struct ChatRequest<'a> {
    messages: &'a [Value],
    tools: Option<Vec<Jinja>>,
    documents: Option<&'a Value>,
    add_generation_prompt: bool,
    continue_final_message: bool,
    kwargs: Option<&'a Map<String, Value>>,
}

impl<'a> ChatRequest<'a> {
    fn parse(body: &'a Value) -> Result<Self, PromptError> {
        let messages = match body.get("messages") {
            Some(Value::Array(messages)) => messages.as_slice(),
            _ => {
                return Err(PromptError::field(
                    "messages",
                    "expected a list of messages, each {\"role\": ..., \"content\": ...}",
                ));
            }
        };
        let add_generation_prompt = optional_bool(body, "add_generation_prompt", true)?;
        let continue_final_message = optional_bool(body, "continue_final_message", false)?;
        if add_generation_prompt && continue_final_message {
            return Err(PromptError::field(
                "continue_final_message",
                "cannot be true together with `add_generation_prompt` (which defaults to true); set `add_generation_prompt` to false",
            ));
        }
        let kwargs = match body.get("chat_template_kwargs") {
            None | Some(Value::Null) => None,
            Some(Value::Object(kwargs)) => Some(kwargs),
            Some(_) => {
                return Err(PromptError::field(
                    "chat_template_kwargs",
                    "expected an object of template variables",
                ));
            }
        };
        Ok(Self {
            messages,
            tools: tools(body.get("tools"))?,
            documents: body.get("documents"),
            add_generation_prompt,
            continue_final_message,
            kwargs,
        })
    }

    /// The template's variables: the special tokens, then transformers' render arguments,
    /// then `chat_template_kwargs` over them (vLLM updates its kwargs with them), except
    /// `messages`, which stays the request's conversation.
    fn context(&self, messages: &[Message], special: &SpecialTokens) -> Jinja {
        let mut context: BTreeMap<String, Jinja> = BTreeMap::new();
        let specials = [
            ("bos_token", &special.bos_token),
            ("eos_token", &special.eos_token),
            ("pad_token", &special.pad_token),
            ("unk_token", &special.unk_token),
        ];
        for (key, token) in specials {
            if let Some(token) = token {
                context.insert(key.to_owned(), Jinja::from(token.as_str()));
            }
        }
        let tools = self.tools.clone().map_or(Jinja::from(()), Jinja::from);
        context.insert("tools".to_owned(), tools);
        let documents = self.documents.map_or(Jinja::from(()), jinja);
        context.insert("documents".to_owned(), documents);
        let generation = Jinja::from(self.add_generation_prompt);
        context.insert("add_generation_prompt".to_owned(), generation);
        for (key, value) in self.kwargs.into_iter().flatten() {
            context.insert(key.clone(), jinja(value));
        }
        let messages: Vec<Jinja> = messages.iter().map(|m| m.value.clone()).collect();
        context.insert("messages".to_owned(), Jinja::from(messages));
        Jinja::from_pairs(context)
    }
}

/// The request's tools as vLLM's `ChatCompletionToolsParam.model_dump()` lays them out.
fn tools(tools: Option<&Value>) -> Result<Option<Vec<Jinja>>, PromptError> {
    match tools {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(tools)) => tools.iter().map(tool).collect::<Result<_, _>>().map(Some),
        Some(_) => Err(PromptError::field(
            "tools",
            "expected a list of {\"type\": \"function\", \"function\": {...}}",
        )),
    }
}

fn tool(tool: &Value) -> Result<Jinja, PromptError> {
    let bad = || {
        PromptError::field(
            "tools",
            "each tool must be {\"type\": \"function\", \"function\": {\"name\": ..., \"description\": ..., \"parameters\": {...}}}",
        )
    };
    let tool = tool.as_object().ok_or_else(bad)?;
    let function = tool
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(bad)?;
    if !function.get("name").is_some_and(Value::is_string) {
        return Err(bad());
    }
    let kind = tool.get("type").map_or(Jinja::from("function"), jinja);
    let function = declared_first(function, &["name", "description", "parameters"]);
    let mut laid_out = vec![("type", kind), ("function", function)];
    for (key, value) in tool {
        if key != "type" && key != "function" {
            laid_out.push((key.as_str(), jinja(value)));
        }
    }
    Ok(jinja_map(laid_out))
}

/// `fields` first (none when absent, as pydantic dumps defaults), then the other keys.
fn declared_first(object: &Map<String, Value>, fields: &[&str]) -> Jinja {
    let mut pairs: Vec<(&str, Jinja)> = fields
        .iter()
        .map(|field| (*field, object.get(*field).map_or(Jinja::from(()), jinja)))
        .collect();
    for (key, value) in object {
        if !fields.contains(&key.as_str()) {
            pairs.push((key.as_str(), jinja(value)));
        }
    }
    jinja_map(pairs)
}

/// One message as the template gets it, and its content (for `continue_final_message`).
struct Message {
    value: Jinja,
    content: Value,
}

/// The messages as vLLM's `parse_chat_messages` hands them to the template.
fn conversation(messages: &[Value], format: ContentFormat) -> Result<Vec<Message>, PromptError> {
    messages
        .iter()
        .enumerate()
        .map(|(index, message)| conversation_message(index, message, format))
        .collect()
}

fn conversation_message(
    index: usize,
    message: &Value,
    format: ContentFormat,
) -> Result<Message, PromptError> {
    let bad = |what: &str| PromptError::field("messages", format!("message {index}: {what}"));
    let message = message
        .as_object()
        .ok_or_else(|| bad("expected an object {\"role\": ..., \"content\": ...}"))?;
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("`role` must be a string"))?;
    let mut content = message_content(message.get("content"), format).map_err(|what| bad(&what))?;
    if let (Value::Array(parts), "tool") = (&content, role) {
        content = Value::String(joined_texts(parts));
    }
    let mut pairs = vec![("role", Jinja::from(role)), ("content", jinja(&content))];
    role_fields(role, message, &mut pairs).map_err(|what| bad(&what))?;
    for key in ["name", "task"] {
        if let Some(value @ Value::String(_)) = message.get(key) {
            pairs.push((key, jinja(value)));
        }
    }
    if role == "developer" {
        pairs.push(("tools", message.get("tools").map_or(Jinja::from(()), jinja)));
    }
    Ok(Message {
        value: jinja_map(pairs),
        content,
    })
}

/// The assistant's `tool_calls` and `reasoning`, a tool message's `tool_call_id`.
fn role_fields<'a>(
    role: &str,
    message: &'a Map<String, Value>,
    pairs: &mut Vec<(&'a str, Jinja)>,
) -> Result<(), String> {
    match role {
        "assistant" => {
            if let Some(calls) = message.get("tool_calls").filter(|calls| !calls.is_null()) {
                let calls = tool_calls(calls)?;
                if !calls.is_empty() {
                    pairs.push(("tool_calls", jinja(&Value::Array(calls))));
                }
            }
            if let Some(reasoning) = message.get("reasoning").filter(|r| !r.is_null()) {
                pairs.push(("reasoning", jinja(reasoning)));
                pairs.push(("reasoning_content", jinja(reasoning)));
            }
        }
        "tool" => {
            if let Some(id) = message.get("tool_call_id") {
                pairs.push(("tool_call_id", jinja(id)));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Tool calls with JSON-text `arguments` parsed into objects (`{}` when not JSON), as vLLM's
/// `_postprocess_messages` does.
fn tool_calls(calls: &Value) -> Result<Vec<Value>, String> {
    let Value::Array(calls) = calls else {
        return Err("`tool_calls` must be a list".to_owned());
    };
    calls
        .iter()
        .map(|call| {
            let mut call = call.clone();
            let function = call
                .get_mut("function")
                .and_then(Value::as_object_mut)
                .ok_or("each tool call needs a `function` object")?;
            let arguments = match function.get("arguments") {
                Some(Value::String(text)) => serde_json::from_str(text).unwrap_or_default(),
                Some(value @ (Value::Object(_) | Value::Array(_))) => value.clone(),
                _ => Value::Object(Map::new()),
            };
            let arguments = if arguments.is_null() {
                Value::Object(Map::new())
            } else {
                arguments
            };
            function.insert("arguments".to_owned(), arguments);
            Ok(call)
        })
        .collect()
}

fn joined_texts(parts: &[Value]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect();
    texts.join("\n")
}

/// A message's content as the template gets it: a string (text parts joined with `"\n"`) for
/// a string-format template, a list of text parts for an OpenAI-format one.
fn message_content(content: Option<&Value>, format: ContentFormat) -> Result<Value, String> {
    let texts = match content {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part_text(part).transpose())
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`content` must be a string or a list of content parts".to_owned()),
    };
    Ok(match format {
        ContentFormat::String => Value::String(texts.join("\n")),
        ContentFormat::OpenAi => Value::Array(
            texts
                .into_iter()
                .map(|text| serde_json::json!({"type": "text", "text": text}))
                .collect(),
        ),
    })
}

/// The text of one content part (`None` for a text part without text, which vLLM skips).
fn part_text(part: &Value) -> Result<Option<String>, String> {
    let object = match part {
        Value::String(text) => return Ok(Some(text.clone())),
        Value::Object(object) => object,
        _ => {
            return Err(
                "each content part must be an object {\"type\": \"text\", \"text\": ...}"
                    .to_owned(),
            );
        }
    };
    let kind = object.get("type").and_then(Value::as_str);
    let key = match kind {
        Some("text" | "input_text" | "output_text") => "text",
        Some("refusal") => "refusal",
        Some("thinking") => "thinking",
        Some(other) => {
            return Err(format!(
                "content parts of type `{other}` are not supported by this gateway; send text parts only"
            ));
        }
        None => {
            return Err(
                "a content part has no `type`; use {\"type\": \"text\", \"text\": ...}".to_owned(),
            );
        }
    };
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!(
            "a `{}` part's `{key}` must be a string",
            kind.unwrap_or_default()
        )),
    }
}

/// transformers' `continue_final_message`: the prompt is cut right after the final message's
/// text, so the model continues it instead of starting a new turn.
fn continue_final_message(rendered: String, messages: &[Message]) -> Result<String, PromptError> {
    let bad = |detail: &str| PromptError::field("continue_final_message", detail);
    let last = messages
        .last()
        .map(|message| &message.content)
        .ok_or_else(|| bad("there is no final message to continue"))?;
    let text = match last {
        Value::String(text) => text.as_str(),
        Value::Array(parts) => parts
            .iter()
            .rev()
            .find_map(|part| part.get("text").and_then(Value::as_str))
            .ok_or_else(|| bad("the final message has no text to continue"))?,
        _ => return Err(bad("the final message has no text to continue")),
    };
    let stripped = text.trim();
    let Some(at) = rendered.rfind(stripped) else {
        return Err(bad(
            "the final message does not appear in the rendered chat template",
        ));
    };
    let lstripped = text.trim_start();
    let end = if rendered[at..].starts_with(lstripped) && lstripped == text {
        at + lstripped.len()
    } else {
        at + stripped.len()
    };
    let mut rendered = rendered;
    rendered.truncate(end);
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_parts_are_joined_for_string_templates() {
        let parts = json!([{"type": "text", "text": "a"}, "b", {"type": "text", "text": null}, {"type": "input_text", "text": "c"}]);
        assert_eq!(
            message_content(Some(&parts), ContentFormat::String),
            Ok(json!("a\nb\nc"))
        );
        assert_eq!(
            message_content(Some(&json!("x")), ContentFormat::OpenAi),
            Ok(json!([{"type": "text", "text": "x"}]))
        );
        assert_eq!(message_content(None, ContentFormat::String), Ok(json!("")));
        let image = json!([{"type": "image_url", "image_url": {"url": "x"}}]);
        assert!(message_content(Some(&image), ContentFormat::String).is_err());
    }

    #[test]
    fn tool_call_arguments_become_objects() {
        let calls = json!([
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
            {"id": "2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
        ]);
        let calls = tool_calls(&calls).expect("parses");
        assert_eq!(calls[0]["function"]["arguments"], json!({"x": 1}));
        assert_eq!(calls[1]["function"]["arguments"], json!({}));
    }

    #[test]
    fn tools_are_laid_out_as_vllm_dumps_them() {
        let laid =
            tools(Some(&json!([{"function": {"name": "f", "strict": true}}]))).expect("parses");
        assert_eq!(
            laid.map(|tools| Jinja::from(tools).to_string()),
            Some("[{'type': 'function', 'function': {'name': 'f', 'description': None, 'parameters': None, 'strict': True}}]".to_owned())
        );
        assert!(tools(Some(&json!([{"type": "function"}]))).is_err());
    }

    #[test]
    fn the_sentinel_means_no_limit() {
        assert_eq!(
            context_limit(&json!({"model_max_length": 2048})),
            Some(2048)
        );
        assert_eq!(
            context_limit(&json!({"model_max_length": 1000000000000000019884624838656.0})),
            None
        );
        let sentinel: Value =
            serde_json::from_str(r#"{"model_max_length": 1000000000000000019884624838656}"#)
                .expect("json");
        assert_eq!(context_limit(&sentinel), None);
        assert_eq!(context_limit(&json!({})), None);
    }

    #[test]
    fn continuing_cuts_after_the_final_text() {
        let messages = vec![Message {
            value: Jinja::from(()),
            content: json!("Hello "),
        }];
        let cut = continue_final_message("<a>Hello<end>".to_owned(), &messages).expect("cuts");
        assert_eq!(cut, "<a>Hello");
        assert!(continue_final_message("<a>Bye<end>".to_owned(), &messages).is_err());
    }
}
