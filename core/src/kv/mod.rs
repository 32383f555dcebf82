//! The KV side of routing: hashing prompts into blocks, the events workers publish about their
//! caches, and the index that answers "how much of this prompt does each worker cache?".

mod block_slab;
mod block_table;
pub mod event;
mod event_cursor;
pub mod event_outcome;
pub mod event_placement;
pub mod hashing;
mod huge_page_array;
pub mod index;
mod index_hasher;
mod local_hash_lanes;
pub mod predicted_blocks;
pub mod predicted_cache;
pub mod request_identity;
mod sequence_hashes_iter;
mod xxh3_block;

pub use crate::block_identity::{EngineBlockHash, LocalBlockHash, SequenceHash};
pub use event::{
    BlockExtraInfo, BlockMmObjectInfo, KvCacheEvent, KvCacheEventData, KvCacheRemoveData,
    KvCacheStoreData, KvCacheStoredBlockData, MalformedEvent, RouterEvent,
};
pub use event_outcome::{EventOutcome, IgnoreReason};
pub use event_placement::{EventPlacement, ResidencyDomain, StorageTier};
pub use hashing::{
    HASH_SEED, SequenceHashes, block_hashes, full_blocks, local_block_hashes, next_sequence_hash,
    salt_seed, sequence_hashes, sequence_hashes_for_request, sequence_hashes_for_tokens,
    sequence_hashes_from_block_ids, sequence_hashes_iter,
};
pub use huge_page_array::mapped_bytes;
pub use index::{
    BatchProgress, DumpError, IndexCounters, IndexOptions, KvIndex, RecordedEngines, ReplayRequest,
    WorkerIndexState,
};
pub(crate) use index_hasher::mix;
pub use predicted_blocks::PredictedBlocks;
pub use predicted_cache::{
    ApproximateConfig, ApproximateConfigError, PredictedCache, PredictedCacheStats,
};
pub use request_identity::RequestIdentity;
