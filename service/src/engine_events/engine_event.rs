//! KV events as engines publish them (vLLM, SGLang), decoded from msgpack but not yet turned
//! into the router's events.

/// One published batch: `[ts, events, data_parallel_rank]` (or the same as a map).
#[derive(Clone, Debug, PartialEq)]
pub struct EngineEventBatch {
    /// The engine's timestamp (seconds).
    pub ts: f64,
    /// The events, in order.
    pub events: Vec<EngineEvent>,
    /// The data-parallel rank that published the batch, when the engine says.
    pub data_parallel_rank: Option<u32>,
}

/// One engine event.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEvent {
    /// Blocks stored after `parent_block_hash`.
    BlockStored(BlockStored),
    /// Blocks evicted.
    BlockRemoved(BlockRemoved),
    /// The whole cache dropped.
    AllBlocksCleared,
    /// An event type the engine marks as ignorable.
    Ignored,
}

/// A `BlockStored` event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockStored {
    /// The engine's ids of the stored blocks, in prefix order.
    pub block_hashes: Vec<u64>,
    /// The engine's id of the block they follow (`None`: they start at the root).
    pub parent_block_hash: Option<u64>,
    /// The tokens of the stored blocks, concatenated.
    pub token_ids: Vec<u32>,
    /// Tokens per block.
    pub block_size: usize,
    /// The LoRA adapter's numeric id (older engines).
    pub lora_id: Option<u64>,
    /// The LoRA adapter's name.
    pub lora_name: Option<String>,
    /// The cache salt (SGLang's metadata map, or a map event's `cache_salt`).
    pub cache_salt: Option<String>,
    /// Where the blocks live (`GPU` when absent).
    pub medium: Option<String>,
    /// The KV cache group (hybrid models); `None` for the main group.
    pub group_idx: Option<u32>,
    /// The group's attention kind (`full_attention`, `sliding_window`, …).
    pub kv_cache_spec_kind: Option<String>,
    /// Whether `token_ids` came as EAGLE bigrams (normalised to plain tokens here).
    pub is_eagle: bool,
    /// The blocks' locality (`LOCAL` when absent).
    pub locality: Option<String>,
}

impl BlockStored {
    /// Blocks `blocks` of `tokens` (`block_size` tokens each) as an engine that numbers its
    /// blocks by position reports them: block `i` has engine id `first_id + i` and the run
    /// follows block `blocks.start - 1` (the root when the run starts at block 0).
    pub fn positional(
        tokens: &[u32],
        block_size: usize,
        blocks: std::ops::Range<usize>,
        first_id: u64,
    ) -> Self {
        BlockStored {
            block_hashes: blocks.clone().map(|i| first_id + i as u64).collect(),
            parent_block_hash: blocks.start.checked_sub(1).map(|p| first_id + p as u64),
            token_ids: tokens[blocks.start * block_size..blocks.end * block_size].to_vec(),
            block_size,
            ..BlockStored::default()
        }
    }
}

/// A `BlockRemoved` event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockRemoved {
    /// The engine's ids of the removed blocks.
    pub block_hashes: Vec<u64>,
    /// Where the blocks lived (`GPU` when absent).
    pub medium: Option<String>,
    /// The KV cache group; `None` for the main group.
    pub group_idx: Option<u32>,
    /// The group's attention kind.
    pub kv_cache_spec_kind: Option<String>,
    /// The blocks' locality.
    pub locality: Option<String>,
}

/// Why the router does not index an event (it is counted, by this label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    /// The engine marked the event ignorable.
    IgnoredEvent,
    /// The blocks live outside the GPU (CPU, disk, …): not indexed for now.
    NonGpuMedium,
    /// The blocks belong to a non-main attention group: not indexed for now.
    NonMainAttention,
    /// The blocks live on another node.
    NonLocal,
}

impl SkipReason {
    /// The label of the reason in metrics.
    pub const fn label(self) -> &'static str {
        match self {
            SkipReason::IgnoredEvent => "ignored_event",
            SkipReason::NonGpuMedium => "non_gpu_medium",
            SkipReason::NonMainAttention => "non_main_attention",
            SkipReason::NonLocal => "non_local",
        }
    }
}

/// Main-attention kinds: their blocks are what prompts match.
fn is_main_attention(kind: &str) -> bool {
    matches!(
        kind,
        "full_attention" | "mla_attention" | "sink_full_attention"
    )
}

fn is_gpu(medium: Option<&str>) -> bool {
    medium.is_none_or(|medium| matches!(medium, "GPU" | "DEVICE"))
}

fn is_local(locality: Option<&str>) -> bool {
    locality.is_none_or(|locality| locality == "LOCAL")
}

fn main_group(group_idx: Option<u32>, kind: Option<&str>) -> bool {
    match kind {
        Some(kind) => is_main_attention(kind),
        None => group_idx.is_none_or(|group| group == 0),
    }
}

impl EngineEvent {
    /// Why the router skips this event, or `None` when it indexes it.
    pub fn skip_reason(&self) -> Option<SkipReason> {
        match self {
            EngineEvent::Ignored => Some(SkipReason::IgnoredEvent),
            EngineEvent::AllBlocksCleared => None,
            EngineEvent::BlockStored(stored) => placement_skip(
                stored.medium.as_deref(),
                stored.locality.as_deref(),
                stored.group_idx,
                stored.kv_cache_spec_kind.as_deref(),
            ),
            EngineEvent::BlockRemoved(removed) => placement_skip(
                removed.medium.as_deref(),
                removed.locality.as_deref(),
                removed.group_idx,
                removed.kv_cache_spec_kind.as_deref(),
            ),
        }
    }
}

fn placement_skip(
    medium: Option<&str>,
    locality: Option<&str>,
    group_idx: Option<u32>,
    kind: Option<&str>,
) -> Option<SkipReason> {
    if !is_local(locality) {
        Some(SkipReason::NonLocal)
    } else if !is_gpu(medium) {
        Some(SkipReason::NonGpuMedium)
    } else if !main_group(group_idx, kind) {
        Some(SkipReason::NonMainAttention)
    } else {
        None
    }
}
