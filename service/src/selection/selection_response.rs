//! The answers of the selection routes, with upstream's field names.

use crate::worker_record::WorkerCatalogRecord;
use dynamo_kv_router::wire::KvHint;
use serde::Serialize;
use std::collections::BTreeMap;

/// Matched tokens of the chosen worker, per tier (upstream's Mooncake summary). CPU and disk
/// counts are cumulative through the tiers before them; this router indexes the GPU tier only,
/// so they equal `gpu`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OverlapSummary {
    /// The longest match over the tiers, in tokens.
    pub longest_matched: u32,
    /// Tokens matched on the GPU.
    pub gpu: u32,
    /// GPU tokens matched per data-parallel rank of the chosen worker (keys are ranks).
    pub dp: BTreeMap<String, u32>,
    /// Tokens matched through host memory.
    pub cpu: u32,
    /// Tokens matched through disk.
    pub disk: u32,
}

/// The answer of `/select` and `/select_and_reserve`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectResponse {
    /// The booking id (when the request had one, or for a booking).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selection_id: Option<String>,
    /// The prompt's sequence hashes, signed 64-bit (bookings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_hashes: Option<Vec<i64>>,
    /// The prompt length in tokens (bookings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isl_tokens: Option<usize>,
    /// Whether prefill tokens are tracked (bookings only; always true here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track_prefill_tokens: Option<bool>,
    /// The model.
    pub model_name: String,
    /// The routing group.
    pub routing_group: String,
    /// The chosen worker.
    pub worker_id: u64,
    /// Its data-parallel rank.
    pub dp_rank: u32,
    /// Where to send the request.
    pub endpoint: String,
    /// Tokens per block.
    pub block_size: u32,
    /// What the chosen worker caches of the prompt.
    pub overlap: OverlapSummary,
    /// Prompt tokens the chosen worker must compute.
    pub effective_prefill_tokens: usize,
    /// KV blocks on the chosen worker once this request decodes, its own included.
    pub potential_decode_blocks: u64,
    /// The hint envelope for the chosen worker, from the role's hint policies (bookings only;
    /// absent when no policy returned an action or the worker accepts no hints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_hint: Option<KvHint>,
}

/// The answer of `POST /reservations`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReservationResponse {
    /// The booking id.
    pub selection_id: String,
    /// The model.
    pub model_name: String,
    /// The routing group.
    pub routing_group: String,
    /// The booked worker.
    pub worker_id: u64,
    /// Its rank.
    pub dp_rank: u32,
    /// Where to send the request.
    pub endpoint: String,
}

/// The answer of `GET /ready`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReadyResponse {
    /// Whether some worker is schedulable.
    pub ready: bool,
    /// How many workers are schedulable.
    pub schedulable_workers: usize,
    /// Every registered worker.
    pub workers: Vec<WorkerCatalogRecord>,
}

/// One worker rank's load in `GET /loads`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PotentialLoad {
    /// The worker.
    pub worker_id: u64,
    /// Its rank.
    pub dp_rank: u32,
    /// Prompt tokens of bookings whose prefill has not completed.
    pub potential_prefill_tokens: usize,
    /// KV blocks of bookings not yet released.
    pub potential_decode_blocks: usize,
    /// Bookings not yet released.
    pub active_requests: usize,
}

/// One partition's loads in `GET /loads`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelLoadResponse {
    /// The model.
    pub model_name: String,
    /// The routing group.
    pub routing_group: String,
    /// Per worker rank.
    pub loads: Vec<PotentialLoad>,
    /// Requests waiting in a queue (this router does not queue: 0).
    pub pending_count: usize,
    /// Their prompt tokens (0).
    pub pending_isl_tokens: usize,
}

/// One worker rank in `POST /overlap_scores`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerOverlapScore {
    /// The worker.
    pub worker_id: u64,
    /// Its rank.
    pub dp_rank: u32,
    /// Leading prompt blocks cached on the GPU.
    pub device_blocks: usize,
    /// Cumulative through host memory (equals `device_blocks` here).
    pub host_pinned_blocks: usize,
    /// Cumulative through disk (equals `device_blocks` here).
    pub disk_blocks: usize,
    /// Blocks found in host memory beyond the GPU prefix (0 here).
    pub host_pinned_extension_blocks: usize,
    /// Blocks found on disk beyond the host prefix (0 here).
    pub disk_extension_blocks: usize,
    /// Shared-cache blocks beyond the GPU prefix (no shared cache here: null).
    pub shared_beyond_device_blocks: Option<u32>,
}

/// The shared-cache part of `POST /overlap_scores` (no shared cache here).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SharedCacheOverlapScore {
    /// Whether a shared cache is consulted.
    pub enabled: bool,
    /// Blocks it holds.
    pub total_hit_blocks: u32,
    /// Block ranges it holds.
    pub ranges: Vec<(u32, u32)>,
    /// Why it could not be consulted.
    pub error: Option<String>,
}

/// The answer of `POST /overlap_scores`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OverlapScoresResponse {
    /// Tokens per block.
    pub block_size: u32,
    /// Full blocks in the prompt.
    pub num_blocks: usize,
    /// Every schedulable worker rank of the partition, by id and rank.
    pub workers: Vec<WorkerOverlapScore>,
    /// The shared cache.
    pub shared_cache: SharedCacheOverlapScore,
}
