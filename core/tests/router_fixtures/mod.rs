//! Small policies and setups for the router's tests.
#![allow(dead_code)]

use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, RouterEvent, SequenceHash, block_hashes, sequence_hashes,
};
use dynamo_kv_router::plugins::registry::{ConstructedHintPolicy, ConstructedSelectionPolicy};
use dynamo_kv_router::plugins::{
    Commitments, HintAction, HintContext, HintPolicy, KvCopy, PolicyError, Selection,
    WorkerSelectionContext, WorkerSelectionPolicy,
};
use dynamo_kv_router::router::{
    HintOrigin, Prompt, Role, RoleHint, RolePolicies, RouteRequest, Router, RouterMode,
    RouterOptions, RouterSetup, WorkerCapabilities, WorkerId, WorkerInfo,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const BLOCK_SIZE: u32 = 4;

/// Chooses the candidate with the longest cached prefix (ties: smaller id).
pub struct LongestPrefix;

impl WorkerSelectionPolicy for LongestPrefix {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let best = context
            .candidates()
            .iter()
            .max_by_key(|c| (c.cached_blocks, std::cmp::Reverse(c.worker)))
            .ok_or_else(|| PolicyError::new("no candidates"))?;
        Ok(Selection::worker(best.worker))
    }
}

/// Always chooses one worker, committing a copy if given.
pub struct Fixed(pub WorkerId, pub Option<KvCopy>);

impl WorkerSelectionPolicy for Fixed {
    fn select(&self, _context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        Ok(Selection {
            worker: self.0,
            kv_copy: self.1.clone(),
        })
    }

    fn commitments(&self) -> Commitments {
        if self.1.is_some() {
            Commitments::KV_COPY
        } else {
            Commitments::NONE
        }
    }
}

/// Fails or panics.
pub struct BrokenSelection {
    pub panic: bool,
}

impl WorkerSelectionPolicy for BrokenSelection {
    fn select(&self, _context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        if self.panic {
            panic!("selection exploded");
        }
        Err(PolicyError::new("selection refused"))
    }
}

/// Emits `count` actions tagged `tag`, counting its runs.
pub struct Emit {
    pub tag: &'static str,
    pub count: usize,
    pub runs: Arc<AtomicUsize>,
}

impl Emit {
    pub fn new(tag: &'static str, count: usize) -> Self {
        Self {
            tag,
            count,
            runs: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl HintPolicy for Emit {
    fn build_hints(&self, _context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok((0..self.count)
            .map(|i| {
                HintAction::new(
                    "test.emit",
                    "1.0",
                    serde_json::json!({"tag": self.tag, "i": i}),
                )
            })
            .collect())
    }
}

/// Returns an error or panics.
pub struct BrokenHint {
    pub panic: bool,
}

impl HintPolicy for BrokenHint {
    fn build_hints(&self, _context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        if self.panic {
            panic!("hint exploded");
        }
        Err(PolicyError::new("hint refused"))
    }
}

/// Sends the committed copy as `kv.fetch`, else a best-effort fetch from the longest holder.
pub struct CopySender;

impl HintPolicy for CopySender {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        if let Some(copy) = context.committed_kv_copy() {
            return Ok(vec![HintAction::new(
                "kv.fetch",
                "1.0",
                serde_json::json!({"source_control_endpoint": copy.source_endpoint, "block_hashes": copy.block_hashes}),
            )]);
        }
        let booked = context.booked_cached_blocks();
        let Some(source) = context
            .candidates()
            .iter()
            .filter(|c| c.is_fetch_source_for(context.worker()) && c.cached_blocks > booked)
            .max_by_key(|c| (c.cached_blocks, std::cmp::Reverse(c.worker)))
        else {
            return Ok(Vec::new());
        };
        let hashes = context
            .request()
            .engine_block_hashes(source.worker, 0..source.cached_blocks)
            .ok_or_else(|| PolicyError::new("index lacks engine hashes"))?;
        Ok(vec![HintAction::new(
            "kv.fetch",
            "1.0",
            serde_json::json!({"source_control_endpoint": source.source_endpoint.as_deref(), "block_hashes": hashes}),
        )])
    }

    fn commitments(&self) -> Commitments {
        Commitments::KV_COPY
    }
}

pub fn hint(policy_type: &str, policy: impl HintPolicy + 'static) -> RoleHint {
    let commitments = policy.commitments();
    RoleHint {
        policy_type: policy_type.to_owned(),
        name: None,
        origin: HintOrigin::Listed,
        constructed: ConstructedHintPolicy {
            instance: Arc::new(policy),
            commitments,
        },
    }
}

pub fn role_policies(
    selection_type: &str,
    selection: impl WorkerSelectionPolicy + 'static,
    hints: Vec<RoleHint>,
) -> RolePolicies {
    let commitments = selection.commitments();
    RolePolicies::new(
        selection_type,
        ConstructedSelectionPolicy {
            instance: Arc::new(selection),
            commitments,
        },
        hints,
    )
}

pub fn setup(mode: RouterMode, roles: Vec<(Role, RolePolicies)>) -> RouterSetup {
    RouterSetup {
        router_mode: mode,
        block_size: BLOCK_SIZE,
        roles: roles.into_iter().collect::<BTreeMap<_, _>>(),
    }
}

pub fn router(mode: RouterMode, roles: Vec<(Role, RolePolicies)>) -> Router {
    Router::new(setup(mode, roles), RouterOptions::default())
}

pub fn worker(id: u64) -> WorkerId {
    WorkerId::new(id, 0)
}

/// A hinting worker with a fetch endpoint.
pub fn hinting(id: u64, role: Role) -> WorkerInfo {
    WorkerInfo::new(
        worker(id),
        role,
        WorkerCapabilities::hint_source(format!("tcp://10.0.0.{id}:23280")),
    )
}

/// A worker that accepts no hints.
pub fn plain(id: u64, role: Role) -> WorkerInfo {
    WorkerInfo::new(worker(id), role, WorkerCapabilities::none())
}

pub fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|t| t.wrapping_mul(2654435761) ^ salt)
        .collect()
}

pub fn request(id: &str, role: Role, tokens: Vec<u32>) -> RouteRequest {
    RouteRequest::new(id, role, Prompt::Tokens(tokens))
}

/// Engine hash the tests' workers report for a sequence hash.
pub fn engine_of(seq: SequenceHash) -> EngineBlockHash {
    EngineBlockHash(seq.0.rotate_left(17) ^ 0xE0E0)
}

/// A `stored` event for the first `blocks` blocks of `prompt` on `worker`, from the root: each
/// block named by its engine hash and carrying its local hash, as engines report them.
pub fn stored(worker: WorkerId, event_id: u64, prompt: &[u32], blocks: usize) -> RouterEvent {
    stored_range(worker, event_id, prompt, 0..blocks)
}

/// A `stored` event for blocks `range` of `prompt` on `worker`, chained to the block before.
pub fn stored_range(
    worker: WorkerId,
    event_id: u64,
    prompt: &[u32],
    range: std::ops::Range<usize>,
) -> RouterEvent {
    let local = block_hashes(prompt, BLOCK_SIZE);
    let seq = sequence_hashes(&local);
    let parent = range.start.checked_sub(1).map(|p| engine_of(seq[p]));
    let blocks = range.map(|i| (engine_of(seq[i]), local[i]));
    RouterEvent::new(worker, event_id, KvCacheEventData::stored(parent, blocks))
}
