//! A request to book: its id, role, prompt and session.

use crate::block_identity::SequenceHash;
use crate::kv::RequestIdentity;
use crate::plugins::SessionContext;
use crate::router::candidate_filter::CandidateFilter;
use crate::router::worker::Role;

/// One request the caller wants a worker for, in one role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRequest {
    /// The request id (the hint's `message_id`; also the key of `prefill_complete`/`release`).
    pub request_id: String,
    /// The role to book.
    pub role: Role,
    /// The prompt.
    pub prompt: Prompt,
    /// The caller's session context, passed to policies.
    pub session: SessionContext,
    /// What besides its tokens identifies the request's blocks: LoRA, cache namespace,
    /// multimodal objects, Eagle. Used when the prompt is tokens; requests under different
    /// identities never match each other's cache.
    pub identity: RequestIdentity,
    /// The workers the request may be booked on (upstream's `allowed_worker_ids`); `None`
    /// allows every worker of the role. The overlap pass still scores every worker; the
    /// selection policy sees only the allowed ones.
    pub allowed_workers: Option<CandidateFilter>,
}

/// A prompt: its tokens, or its precomputed per-block sequence hashes (for example from a trace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// Token ids; the router hashes them once, into full blocks of the router's block size.
    Tokens(Vec<u32>),
    /// Sequence hashes already computed (one per full block) and the prompt length in tokens.
    Blocks {
        /// The sequence hashes, one per full block, in order.
        sequence_hashes: Vec<SequenceHash>,
        /// The prompt length in tokens.
        prompt_tokens: usize,
    },
}

impl RouteRequest {
    /// A request `request_id` for `role` with `prompt` and no session.
    pub fn new(request_id: impl Into<String>, role: Role, prompt: Prompt) -> Self {
        Self {
            request_id: request_id.into(),
            role,
            prompt,
            session: SessionContext::default(),
            identity: RequestIdentity::default(),
            allowed_workers: None,
        }
    }

    /// The same request, bookable only on the workers `filter` allows.
    pub fn with_allowed_workers(mut self, filter: CandidateFilter) -> Self {
        self.allowed_workers = Some(filter);
        self
    }

    /// The same request under `identity` (LoRA, cache namespace, multimodal objects, Eagle).
    pub fn with_identity(mut self, identity: RequestIdentity) -> Self {
        self.identity = identity;
        self
    }

    /// The same request in `session`.
    pub fn with_session(mut self, session: SessionContext) -> Self {
        self.session = session;
        self
    }
}

impl Prompt {
    /// The prompt length in tokens.
    pub fn prompt_tokens(&self) -> usize {
        match self {
            Prompt::Tokens(tokens) => tokens.len(),
            Prompt::Blocks { prompt_tokens, .. } => *prompt_tokens,
        }
    }
}
