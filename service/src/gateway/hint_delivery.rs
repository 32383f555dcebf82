//! How the booked worker gets its hint envelope, the way upstream Dynamo hands router hints to
//! engines: vLLM reads the envelope from its request's `kv_transfer_params.kv_hint` (upstream's
//! vLLM integration puts it in `sampling_params.extra_args["kv_transfer_params"]["kv_hint"]`,
//! which is where vLLM's OpenAI server puts a request's `kv_transfer_params`); an engine
//! without that field (SGLang) gets it in the `x-dynamo-kv-hint` header as JSON. Enters: the
//! client's raw body and the booking's hint; leaves: the body and headers the worker gets.

use super::openai_request::ParsedRequest;
use bytes::{Bytes, BytesMut};
use dynamo_kv_router::wire::KvHint;
use serde_json::Value;

/// The header that carries the hint envelope when it does not travel in the body.
pub const KV_HINT_HEADER: &str = "x-dynamo-kv-hint";

/// Where a booked worker reads its hint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HintDelivery {
    /// In the body's `kv_transfer_params.kv_hint` (vLLM; the default).
    #[default]
    Body,
    /// In the `x-dynamo-kv-hint` header (SGLang and engines with no body field for it).
    Header,
}

impl std::str::FromStr for HintDelivery {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "body" | "vllm" => Ok(HintDelivery::Body),
            "header" | "sglang" => Ok(HintDelivery::Header),
            other => Err(format!(
                "unknown hint delivery `{other}`; expected `body` (vLLM's kv_transfer_params) \
                 or `header` (x-dynamo-kv-hint)"
            )),
        }
    }
}

/// The body the worker gets: the client's bytes unchanged, but for the hint when it travels in
/// the body. A body without `kv_transfer_params` gets the field appended in place (no
/// re-encoding of the prompt); one with it gets `kv_hint` merged into the object there.
pub fn forwarded_body(
    request: &ParsedRequest,
    hint: Option<&KvHint>,
    delivery: HintDelivery,
) -> Bytes {
    let Some(hint) = hint.filter(|_| delivery == HintDelivery::Body) else {
        return request.raw.clone();
    };
    let Ok(hint_json) = serde_json::to_vec(hint) else {
        return request.raw.clone();
    };
    match request.body.get("kv_transfer_params") {
        None => append_field(&request.raw, &hint_json).unwrap_or_else(|| request.raw.clone()),
        Some(existing) => {
            merged(&request.body, existing, hint).unwrap_or_else(|| request.raw.clone())
        }
    }
}

/// `raw` (a JSON object) with `"kv_transfer_params": {"kv_hint": <hint>}` appended before its
/// closing brace.
fn append_field(raw: &[u8], hint_json: &[u8]) -> Option<Bytes> {
    let close = raw.iter().rposition(|byte| *byte == b'}')?;
    let before = &raw[..close];
    let empty = before
        .iter()
        .rev()
        .find(|byte| !byte.is_ascii_whitespace())
        .is_some_and(|byte| *byte == b'{');
    let mut out = BytesMut::with_capacity(raw.len() + hint_json.len() + 40);
    out.extend_from_slice(before);
    if !empty {
        out.extend_from_slice(b",");
    }
    out.extend_from_slice(b"\"kv_transfer_params\":{\"kv_hint\":");
    out.extend_from_slice(hint_json);
    out.extend_from_slice(b"}");
    out.extend_from_slice(&raw[close..]);
    Some(out.freeze())
}

/// The body re-encoded with `kv_hint` set inside its `kv_transfer_params` object (replacing a
/// `null` there).
fn merged(body: &Value, existing: &Value, hint: &KvHint) -> Option<Bytes> {
    let mut params = match existing {
        Value::Object(params) => params.clone(),
        _ => serde_json::Map::new(),
    };
    params.insert("kv_hint".to_owned(), serde_json::to_value(hint).ok()?);
    let mut body = body.clone();
    body.as_object_mut()?
        .insert("kv_transfer_params".to_owned(), Value::Object(params));
    serde_json::to_vec(&body).ok().map(Bytes::from)
}

/// The header value carrying `hint`, when it travels in a header.
pub fn hint_header(
    hint: Option<&KvHint>,
    delivery: HintDelivery,
) -> Option<axum::http::HeaderValue> {
    let hint = hint.filter(|_| delivery == HintDelivery::Header)?;
    let json = serde_json::to_vec(hint).ok()?;
    axum::http::HeaderValue::from_bytes(&json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::openai_request::GenerationRoute;

    fn hint() -> KvHint {
        serde_json::from_value(serde_json::json!({
            "protocol_version": "0.1",
            "message_id": "r1",
            "actions": [{"action_id": "a1", "action_type": "kv.fetch", "action_version": "1.0",
                         "payload": {"source_control_endpoint": "tcp://127.0.0.1:1", "block_hashes": [1, 2]}}]
        }))
        .expect("a hint")
    }

    fn request(body: &str) -> ParsedRequest {
        ParsedRequest::parse(Bytes::from(body.to_owned()), GenerationRoute::Completions)
            .expect("parses")
    }

    fn forwarded(body: &str) -> Value {
        let bytes = forwarded_body(&request(body), Some(&hint()), HintDelivery::Body);
        serde_json::from_slice(&bytes).expect("still JSON")
    }

    #[test]
    fn the_hint_is_appended_and_everything_else_kept() {
        let body = "{\"model\": \"m\", \"prompt\": \"hi }\", \"n\": 2}\n";
        let out = forwarded(body);
        assert_eq!(
            out["kv_transfer_params"]["kv_hint"],
            serde_json::to_value(hint()).expect("json")
        );
        assert_eq!(out["prompt"], "hi }");
        assert_eq!(out["n"], 2);
        let raw = forwarded_body(&request(body), Some(&hint()), HintDelivery::Body);
        assert!(raw.starts_with(b"{\"model\": \"m\", \"prompt\": \"hi }\", \"n\": 2,"));
    }

    #[test]
    fn existing_transfer_params_are_merged_not_replaced() {
        let out =
            forwarded("{\"model\": \"m\", \"kv_transfer_params\": {\"do_remote_prefill\": true}}");
        assert_eq!(out["kv_transfer_params"]["do_remote_prefill"], true);
        assert_eq!(out["kv_transfer_params"]["kv_hint"]["message_id"], "r1");
        let out = forwarded("{\"model\": \"m\", \"kv_transfer_params\": null}");
        assert_eq!(out["kv_transfer_params"]["kv_hint"]["message_id"], "r1");
    }

    #[test]
    fn without_a_hint_or_in_header_mode_the_body_is_the_clients_bytes() {
        let body = "{\"model\":\"m\",  \"prompt\":\"x\"}";
        assert_eq!(
            forwarded_body(&request(body), None, HintDelivery::Body),
            body.as_bytes()
        );
        assert_eq!(
            forwarded_body(&request(body), Some(&hint()), HintDelivery::Header),
            body.as_bytes()
        );
        let header = hint_header(Some(&hint()), HintDelivery::Header).expect("a header");
        let parsed: KvHint = serde_json::from_slice(header.as_bytes()).expect("json");
        assert_eq!(parsed, hint());
        assert!(hint_header(Some(&hint()), HintDelivery::Body).is_none());
    }
}
