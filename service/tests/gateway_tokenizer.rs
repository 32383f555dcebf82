//! The gateway's tokenizer on the tiny fixture model (`tests/fixtures/tiny-model`): completion
//! prompts, chat rendering, context limits, load errors, and, when a Python with `tokenizers`
//! and `jinja2` is at hand (`KV_ROUTER_PYTHON`), the same ids as Python computes.

use kv_router_service::gateway::model_tokenizer::{
    ModelTokenizer, PromptError, TokenizerLoadError,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const BOS: u32 = 1000;
const START_HEADER: u32 = 1002;
const END_HEADER: u32 = 1003;
const EOT: u32 = 1004;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-model")
}

fn fixture() -> ModelTokenizer {
    ModelTokenizer::load(&fixture_dir()).expect("the fixture loads")
}

/// A scratch model directory with the fixture's tokenizer.json and `config` as
/// tokenizer_config.json; removed on drop.
struct ScratchModel(PathBuf);

impl ScratchModel {
    fn new(name: &str, config: Option<&str>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "kv-router-gateway-tokenizer-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        std::fs::copy(
            fixture_dir().join("tokenizer.json"),
            dir.join("tokenizer.json"),
        )
        .expect("copy tokenizer.json");
        if let Some(config) = config {
            std::fs::write(dir.join("tokenizer_config.json"), config).expect("write config");
        }
        Self(dir)
    }
}

impl Drop for ScratchModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn chat_body(messages: Value) -> Value {
    json!({"model": "tiny", "messages": messages})
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"},
    }})
}

#[test]
fn the_tokenizer_is_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ModelTokenizer>();
}

#[test]
fn the_fixture_is_encoded_directly_with_the_full_pipelines_ids() {
    let tokenizer = fixture();
    assert!(tokenizer.encodes_directly());
    let chat = tokenizer
        .render_chat(&chat_body(
            json!([{"role": "user", "content": "Hi there, it's 12:30!"}]),
        ))
        .expect("renders");
    for text in [chat.as_str(), "The cat's 1234 naps.\r\n  Twice  ", ""] {
        for add_special_tokens in [false, true] {
            assert_eq!(
                tokenizer.encode(text, add_special_tokens).expect("encodes"),
                tokenizer
                    .encode_in_full(text, add_special_tokens)
                    .expect("encodes in full"),
                "{text:?}"
            );
        }
    }
}

#[test]
fn encoding_round_trips_and_bos_follows_add_special_tokens() {
    let tokenizer = fixture();
    let text = "Hello world! The router books 1234 tokens.\n\nÜber café ☕";
    let with = tokenizer.encode(text, true).expect("encodes");
    let without = tokenizer.encode(text, false).expect("encodes");
    assert_eq!(with[0], BOS);
    assert_eq!(&with[1..], without.as_slice());
    assert!(!without.contains(&BOS));
    assert_eq!(tokenizer.decode(&without, false).expect("decodes"), text);
    assert_eq!(tokenizer.decode(&with, true).expect("decodes"), text);
    assert_eq!(
        tokenizer.decode(&with, false).expect("decodes"),
        format!("<|begin_of_text|>{text}")
    );
}

#[test]
fn special_tokens_in_text_are_single_ids() {
    let tokenizer = fixture();
    let ids = tokenizer
        .encode("<|start_header_id|>user<|end_header_id|>", false)
        .expect("encodes");
    assert_eq!(ids.first(), Some(&START_HEADER));
    assert_eq!(ids.last(), Some(&END_HEADER));
}

#[test]
fn a_chat_renders_exactly_as_the_template_says() {
    let tokenizer = fixture();
    assert!(tokenizer.has_chat_template());
    let body = chat_body(json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]));
    let expected = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>\
<|start_header_id|>user<|end_header_id|>\n\nWhat is the weather in Paris?<|eot_id|>\
<|start_header_id|>assistant<|end_header_id|>\n\n";
    assert_eq!(tokenizer.render_chat(&body).expect("renders"), expected);
    let ids = tokenizer.chat_tokens(&body).expect("tokenizes");
    assert_eq!(ids, tokenizer.encode(expected, false).expect("encodes"));
    assert_eq!(ids.iter().filter(|&&id| id == BOS).count(), 1);
    assert_eq!(ids.iter().filter(|&&id| id == EOT).count(), 2);
    let tail = tokenizer
        .decode(&ids[ids.len() - 2..], false)
        .expect("decodes");
    assert_eq!(tail, "<|end_header_id|>\n\n");
}

#[test]
fn the_generation_prompt_can_be_turned_off() {
    let tokenizer = fixture();
    let mut body = chat_body(json!([{"role": "user", "content": "Hi"}]));
    body["add_generation_prompt"] = json!(false);
    assert_eq!(
        tokenizer.render_chat(&body).expect("renders"),
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    );
}

#[test]
fn continue_final_message_stops_after_the_last_text() {
    let tokenizer = fixture();
    let mut body = chat_body(json!([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello, I am"},
    ]));
    body["add_generation_prompt"] = json!(false);
    body["continue_final_message"] = json!(true);
    assert_eq!(
        tokenizer.render_chat(&body).expect("renders"),
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello, I am"
    );
    body["add_generation_prompt"] = json!(true);
    let error = tokenizer.render_chat(&body).expect_err("conflicting flags");
    assert!(
        error.to_string().contains("add_generation_prompt"),
        "{error}"
    );
}

#[test]
fn tools_reach_the_template_as_json() {
    let tokenizer = fixture();
    let mut body = chat_body(json!([{"role": "user", "content": "Weather?"}]));
    body["tools"] = json!([weather_tool()]);
    let expected = concat!(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou may call these functions:\n\n",
        "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n",
        "        \"description\": \"Weather of a city\",\n        \"parameters\": {\n",
        "            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n",
        "                }\n            },\n            \"required\": [\n                \"city\"\n            ],\n",
        "            \"type\": \"object\"\n        }\n    }\n}\n\n<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    assert_eq!(tokenizer.render_chat(&body).expect("renders"), expected);
}

#[test]
fn assistant_tool_calls_get_parsed_arguments() {
    let tokenizer = fixture();
    let mut body = chat_body(json!([
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
    ]));
    body["add_generation_prompt"] = json!(false);
    assert_eq!(
        tokenizer.render_chat(&body).expect("renders"),
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|>\
<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>\
<|start_header_id|>tool<|end_header_id|>\n\nsunny<|eot_id|>"
    );
}

#[test]
fn text_parts_are_joined_with_newlines() {
    let tokenizer = fixture();
    let parts = chat_body(json!([{"role": "user", "content": [
        {"type": "text", "text": "first"},
        {"type": "text", "text": "second"},
    ]}]));
    let joined = chat_body(json!([{"role": "user", "content": "first\nsecond"}]));
    assert_eq!(
        tokenizer.render_chat(&parts).expect("renders"),
        tokenizer.render_chat(&joined).expect("renders")
    );
    let image = chat_body(json!([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
    ]}]));
    let error = tokenizer
        .render_chat(&image)
        .expect_err("images are refused");
    assert!(
        matches!(
            error,
            PromptError::BadField {
                field: "messages",
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("image_url"), "{error}");
}

#[test]
fn raise_exception_reaches_the_client() {
    let tokenizer = fixture();
    let body = chat_body(json!([{"role": "narrator", "content": "Once"}]));
    let error = tokenizer.chat_tokens(&body).expect_err("bad role");
    let PromptError::Raised(message) = &error else {
        panic!("expected the template's own error, got {error}");
    };
    assert_eq!(
        message,
        "Conversation roles must be user, assistant or tool after an optional first system message; got narrator"
    );
    assert!(error.to_string().contains("got narrator"));
}

#[test]
fn malformed_messages_are_client_errors() {
    let tokenizer = fixture();
    for (body, words) in [
        (json!({"messages": "hi"}), "list of messages"),
        (json!({"messages": [{"content": "hi"}]}), "`role`"),
        (
            json!({"messages": [{"role": "user", "content": 3}]}),
            "`content`",
        ),
        (json!({"messages": [], "tools": {}}), "`tools`"),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []}),
            "chat_template_kwargs",
        ),
    ] {
        let error = tokenizer.render_chat(&body).expect_err("bad shape");
        assert!(error.to_string().contains(words), "{error} lacks {words}");
    }
}

#[test]
fn chat_template_kwargs_reach_the_template() {
    let tokenizer = fixture();
    let mut body = chat_body(json!([{"role": "user", "content": "Hi"}]));
    body["chat_template_kwargs"] = json!({"add_generation_prompt": false});
    assert!(
        tokenizer
            .render_chat(&body)
            .expect("renders")
            .ends_with("Hi<|eot_id|>")
    );
}

#[test]
fn a_model_without_a_template_points_to_completions() {
    let scratch = ScratchModel::new("no-template", Some(r#"{"model_max_length": 512}"#));
    let tokenizer = ModelTokenizer::load(&scratch.0).expect("loads");
    assert!(!tokenizer.has_chat_template());
    let error = tokenizer
        .chat_tokens(&chat_body(json!([{"role": "user", "content": "Hi"}])))
        .expect_err("no template");
    let message = error.to_string();
    assert!(
        message.contains(&scratch.0.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("no chat_template") && message.contains("/v1/completions"),
        "{message}"
    );
    assert_eq!(tokenizer.context_limit(), Some(512));
    assert_eq!(tokenizer.encode("Hi", true).expect("encodes")[0], BOS);
}

#[test]
fn a_chat_template_jinja_file_wins() {
    let scratch = ScratchModel::new("jinja-file", None);
    std::fs::write(
        scratch.0.join("chat_template.jinja"),
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}\n",
    )
    .expect("write template");
    let tokenizer =
        ModelTokenizer::load(&scratch.0.join("tokenizer.json")).expect("loads beside the file");
    let body = chat_body(
        json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]),
    );
    assert_eq!(
        tokenizer.render_chat(&body).expect("renders"),
        "[user] Hi\n[assistant] Yo\n"
    );
    assert_eq!(tokenizer.context_limit(), None);
}

#[test]
fn context_limit_comes_from_the_config() {
    assert_eq!(fixture().context_limit(), Some(2048));
    let scratch = ScratchModel::new(
        "sentinel",
        Some(r#"{"model_max_length": 1000000000000000019884624838656}"#),
    );
    assert_eq!(
        ModelTokenizer::load(&scratch.0)
            .expect("loads")
            .context_limit(),
        None
    );
}

fn load_error(path: &Path) -> String {
    match ModelTokenizer::load(path) {
        Ok(_) => panic!("{} should not load", path.display()),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_missing_directory_is_named() {
    let path = std::env::temp_dir().join("kv-router-no-such-model-dir");
    let message = load_error(&path);
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains("does not exist") && message.contains("tokenizer.json"),
        "{message}"
    );
}

#[test]
fn a_directory_without_tokenizer_json_is_named() {
    let scratch = ScratchModel::new("no-tokenizer", None);
    std::fs::remove_file(scratch.0.join("tokenizer.json")).expect("remove");
    let error = ModelTokenizer::load(&scratch.0).err().expect("fails");
    assert!(matches!(error, TokenizerLoadError::MissingTokenizer { .. }));
    let message = error.to_string();
    assert!(
        message.contains(&scratch.0.join("tokenizer.json").display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("model directory with the Hugging Face tokenizer.json"),
        "{message}"
    );
}

#[test]
fn malformed_json_is_reported_with_its_file() {
    let scratch = ScratchModel::new("bad-json", Some("{\"bos_token\": "));
    let message = load_error(&scratch.0);
    assert!(
        message.contains("tokenizer_config.json") && message.contains("not valid JSON"),
        "{message}"
    );
    assert!(message.contains("line 1"), "{message}");
    std::fs::write(scratch.0.join("tokenizer.json"), "{ not json").expect("write");
    let message = load_error(&scratch.0);
    assert!(
        message.contains("tokenizer.json") && message.contains("not a valid tokenizer.json"),
        "{message}"
    );
}

#[test]
fn a_template_that_does_not_compile_is_shown_with_its_line() {
    let config = json!({"chat_template": "{{ bos_token }}\n{% for m in messages %}\n{{ m.content }\n{% endfor %}"});
    let scratch = ScratchModel::new("bad-template", Some(&config.to_string()));
    let message = load_error(&scratch.0);
    assert!(message.contains("does not compile at line 3"), "{message}");
    assert!(message.contains("{{ m.content }"), "{message}");
    assert!(message.contains("fix the template"), "{message}");
    let shape = ScratchModel::new(
        "bad-shape",
        Some(r#"{"chat_template": [{"name": "default"}]}"#),
    );
    let message = load_error(&shape.0);
    assert!(message.contains("`chat_template` must be"), "{message}");
}

/// The prompts and chat bodies compared against Python.
fn cross_check_commands() -> Vec<Value> {
    let mut tools_body = chat_body(json!([{"role": "user", "content": "Weather in Paris?"}]));
    tools_body["tools"] = json!([weather_tool()]);
    let mut no_prompt = chat_body(json!([
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "Hello! 12345 tokens, please.\n\nThanks"},
        {"role": "assistant", "content": "Sure: one, two."},
        {"role": "user", "content": [{"type": "text", "text": "And"}, {"type": "text", "text": "more?"}]},
    ]));
    no_prompt["add_generation_prompt"] = json!(false);
    vec![
        json!({"op": "encode", "text": "Hello world! The router books 1234 tokens.", "add_special_tokens": true}),
        json!({"op": "encode", "text": "  leading spaces, tabs\tand\nnewlines\n\n café ☕ 9876543210", "add_special_tokens": false}),
        json!({"op": "encode", "text": "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "add_special_tokens": true}),
        json!({"op": "chat", "body": chat_body(json!([{"role": "user", "content": "What is the weather in Paris?"}]))}),
        json!({"op": "chat", "body": tools_body}),
        json!({"op": "chat", "body": no_prompt}),
        json!({"op": "chat", "body": chat_body(json!([{"role": "narrator", "content": "x"}]))}),
    ]
}

/// Runs `scripts/tokenize_reference.py` under `python`; `Err` says why it could not.
fn python_reference(python: &str, commands: &[Value]) -> Result<Vec<Value>, String> {
    use std::io::Write as _;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tokenize_reference.py");
    let probe = std::process::Command::new(python)
        .args(["-c", "import tokenizers, jinja2"])
        .output()
        .map_err(|error| format!("cannot run {python}: {error}"))?;
    if !probe.status.success() {
        return Err(format!(
            "{python} lacks the tokenizers or jinja2 package: {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    let mut child = std::process::Command::new(python)
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot run {python}: {error}"))?;
    let request = json!({"model_dir": fixture_dir(), "commands": commands});
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(request.to_string().as_bytes())
        .expect("write the commands");
    let output = child.wait_with_output().expect("the script finishes");
    assert!(output.status.success(), "{} failed", script.display());
    Ok(serde_json::from_slice(&output.stdout).expect("the script prints JSON"))
}

#[test]
fn ids_match_python_tokenizers_and_jinja2() {
    const TEST: &str = "gateway_tokenizer_python";
    let Ok(python) = std::env::var("KV_ROUTER_PYTHON") else {
        test_skip::skip_unless_ci(
            TEST,
            "set KV_ROUTER_PYTHON to a Python with tokenizers and jinja2 (.ci/run does)",
        );
        return;
    };
    let commands = cross_check_commands();
    let expected = match python_reference(&python, &commands) {
        Ok(expected) => expected,
        Err(reason) => {
            test_skip::skip_unless_ci(TEST, &reason);
            return;
        }
    };
    let tokenizer = fixture();
    for (command, python) in commands.iter().zip(&expected) {
        if command["op"] == "encode" {
            let text = command["text"].as_str().expect("text");
            let special = command["add_special_tokens"].as_bool().expect("flag");
            let ids = tokenizer.encode(text, special).expect("encodes");
            assert_eq!(json!(ids), python["ids"], "ids of {text:?}");
            continue;
        }
        match tokenizer.chat_tokens(&command["body"]) {
            Ok(ids) => {
                let text = tokenizer.render_chat(&command["body"]).expect("renders");
                assert_eq!(json!(text), python["text"], "rendered {command}");
                assert_eq!(json!(ids), python["ids"], "ids of {command}");
            }
            Err(PromptError::Raised(message)) => assert_eq!(json!(message), python["error"]),
            Err(error) => panic!("{command}: {error}"),
        }
    }
}
