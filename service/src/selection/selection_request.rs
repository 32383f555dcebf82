//! The bodies of `POST /select`, `/select_and_reserve`, `/reservations` and `/overlap_scores`,
//! with upstream's field names and defaults.

use crate::worker_record::{WireRole, default_model_name, default_routing_group};
use dynamo_kv_router::plugins::SessionContext;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Declares a request body with the prompt fields of [`PromptRequest`] inline, and
/// `take_prompt` to move them out. (Not `#[serde(flatten)]`: flattening buffers every token of
/// the body before reading it, which doubles the parse time of long prompts.)
macro_rules! with_prompt_fields {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
            /// See [`PromptRequest::token_ids`].
            pub token_ids: Option<Vec<u32>>,
            /// See [`PromptRequest::mm_routing_info`].
            pub mm_routing_info: Option<MmRoutingInfo>,
            /// See [`PromptRequest::block_mm_infos`].
            pub block_mm_infos: Option<Vec<serde_json::Value>>,
            /// See [`PromptRequest::block_hashes`].
            pub block_hashes: Option<Vec<i64>>,
            /// See [`PromptRequest::sequence_hashes`].
            pub sequence_hashes: Option<Vec<i64>>,
            /// See [`PromptRequest::isl_tokens`].
            pub isl_tokens: Option<usize>,
            /// See [`PromptRequest::lora_name`].
            pub lora_name: Option<String>,
            /// See [`PromptRequest::cache_salt`].
            pub cache_salt: Option<String>,
            /// See [`PromptRequest::is_eagle`].
            pub is_eagle: Option<bool>,
        }

        impl crate::http::json_body::TokenIdsBody for $name {
            fn token_ids_mut(&mut self) -> &mut Option<Vec<u32>> {
                &mut self.token_ids
            }
        }

        impl $name {
            /// Moves the prompt fields out (they are left empty).
            pub fn take_prompt(&mut self) -> PromptRequest {
                PromptRequest {
                    token_ids: self.token_ids.take(),
                    mm_routing_info: self.mm_routing_info.take(),
                    block_mm_infos: self.block_mm_infos.take(),
                    block_hashes: self.block_hashes.take(),
                    sequence_hashes: self.sequence_hashes.take(),
                    isl_tokens: self.isl_tokens.take(),
                    lora_name: self.lora_name.take(),
                    cache_salt: self.cache_salt.take(),
                    is_eagle: self.is_eagle.take(),
                }
            }
        }
    };
}

/// A prompt: `token_ids`, or upstream's hash-only trio (`block_hashes`, `sequence_hashes`,
/// `isl_tokens`), with the identity that salts its hashes.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PromptRequest {
    /// The prompt's token ids.
    pub token_ids: Option<Vec<u32>>,
    /// Upstream's multimodal routing tokens: `routing_token_ids` replace `token_ids`.
    pub mm_routing_info: Option<MmRoutingInfo>,
    /// Per block, its multimodal objects (`{"mm_objects": [{"mm_hash", "offsets"}]}` or null);
    /// their hashes salt the block hashes.
    pub block_mm_infos: Option<Vec<serde_json::Value>>,
    /// Precomputed local block hashes (signed 64-bit), one per full block.
    pub block_hashes: Option<Vec<i64>>,
    /// Precomputed sequence hashes (signed 64-bit), one per full block.
    pub sequence_hashes: Option<Vec<i64>>,
    /// The prompt length in tokens, for hash-only prompts.
    pub isl_tokens: Option<usize>,
    /// The LoRA adapter the request runs with; salts the block hashes.
    pub lora_name: Option<String>,
    /// The cache salt (upstream's cache namespace); salts the block hashes.
    pub cache_salt: Option<String>,
    /// Whether the request runs with EAGLE speculative decoding.
    pub is_eagle: Option<bool>,
}

/// Upstream's multimodal routing input.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MmRoutingInfo {
    /// The tokens to route on.
    pub routing_token_ids: Vec<u32>,
    /// Per-block multimodal objects, as `block_mm_infos`.
    #[serde(default)]
    pub block_mm_infos: Vec<serde_json::Value>,
}

/// A worker rank named by a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct WorkerRank {
    /// The worker.
    pub worker_id: u64,
    /// The data-parallel rank (default 0).
    #[serde(default)]
    pub dp_rank: u32,
}

/// Upstream's structured session context.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SelectionSessionContext {
    /// The session id.
    pub session_id: String,
    /// The parent session, if any.
    #[serde(default)]
    pub parent_session_id: Option<String>,
    /// Whether this is the session's last request.
    #[serde(default)]
    pub session_final: Option<bool>,
    /// What started the request: `user_message`, `tool_result` or `other`.
    #[serde(default)]
    pub input_trigger: Option<InputTrigger>,
    /// Opaque agent headers.
    #[serde(default)]
    pub agent_headers: Option<BTreeMap<String, Vec<String>>>,
}

/// What started a request in a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputTrigger {
    /// A user message.
    UserMessage,
    /// A tool result.
    ToolResult,
    /// Anything else.
    Other,
}

impl InputTrigger {
    fn as_str(self) -> &'static str {
        match self {
            InputTrigger::UserMessage => "user_message",
            InputTrigger::ToolResult => "tool_result",
            InputTrigger::Other => "other",
        }
    }
}

with_prompt_fields! {
/// The fields `/select` and `/select_and_reserve` share.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SelectRequest {
    /// The model.
    #[serde(default = "default_model_name")]
    pub model_name: String,
    /// The routing group.
    #[serde(default = "default_routing_group")]
    pub routing_group: String,
    /// The booking id (`/select_and_reserve` makes one up when absent).
    pub selection_id: Option<String>,
    /// Upstream's per-request router overrides (accepted; this router has none to override).
    pub router_config_override: Option<serde_json::Value>,
    /// Expected output length (accepted and unused).
    pub expected_output_tokens: Option<u32>,
    /// Upstream's queue priority (accepted; this router does not queue).
    pub priority_jump: Option<f64>,
    /// Upstream's queue priority (accepted; this router does not queue).
    pub strict_priority: Option<u32>,
    /// Legacy session id; `session_context` wins when both are present.
    pub session_id: Option<String>,
    /// The session the request belongs to.
    pub session_context: Option<SelectionSessionContext>,
    /// Book exactly this worker rank (no selection policy runs).
    pub pinned_worker: Option<WorkerRank>,
    /// Workers the request may go to.
    pub allowed_worker_ids: Option<BTreeSet<u64>>,
    /// Upstream's advisory flag (accepted; `/select` never books).
    #[serde(default)]
    pub advisory: bool,
    /// The role to book (extension; default `aggregated`).
    #[serde(default)]
    pub role: Option<WireRole>,
}
}

impl SelectRequest {
    /// The session context handed to policies: `session_context`, else `session_id`.
    pub fn session(&self) -> SessionContext {
        if let Some(context) = &self.session_context {
            let mut session = SessionContext::new(context.session_id.clone());
            if let Some(parent) = &context.parent_session_id {
                session = session.with_attribute("parent_session_id", parent.clone());
            }
            if let Some(last) = context.session_final {
                session = session.with_attribute("session_final", last.to_string());
            }
            if let Some(trigger) = context.input_trigger {
                session = session.with_attribute("input_trigger", trigger.as_str());
            }
            if let Some(headers) = &context.agent_headers {
                for (name, values) in headers {
                    session = session.with_attribute(format!("header:{name}"), values.join(","));
                }
            }
            return session;
        }
        match &self.session_id {
            Some(id) => SessionContext::new(id.clone()),
            None => SessionContext::default(),
        }
    }
}

with_prompt_fields! {
/// The body of `POST /reservations`: replay the selection cached under `selection_id` by an
/// earlier `/select`, or (with `worker_id`) book that worker directly.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ReservationRequest {
    /// The model.
    #[serde(default = "default_model_name")]
    pub model_name: String,
    /// The routing group.
    #[serde(default = "default_routing_group")]
    pub routing_group: String,
    /// The booking id.
    pub selection_id: String,
    /// Book this worker (explicit form).
    pub worker_id: Option<u64>,
    /// Its rank (default 0).
    pub dp_rank: Option<u32>,
    /// Accepted and unused.
    pub router_config_override: Option<serde_json::Value>,
    /// Accepted and unused.
    pub expected_output_tokens: Option<u32>,
    /// Prefill tokens to reserve instead of the uncached prompt (at most the prompt length).
    pub effective_prefill_tokens: Option<usize>,
    /// Accepted; prefill tokens are always tracked.
    pub track_prefill_tokens: Option<bool>,
    /// The role to book (extension; default `aggregated`).
    #[serde(default)]
    pub role: Option<WireRole>,
}
}

with_prompt_fields! {
/// The body of `POST /overlap_scores` and `POST /potential_loads`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct OverlapScoresRequest {
    /// The model.
    #[serde(default = "default_model_name")]
    pub model_name: String,
    /// The routing group.
    #[serde(default = "default_routing_group")]
    pub routing_group: String,
    /// Accepted and unused.
    pub router_config_override: Option<serde_json::Value>,
}
}
