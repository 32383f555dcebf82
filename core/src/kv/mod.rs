//! The KV side of routing: hashing prompts into blocks, the events workers publish about their
//! caches, and the index that answers "how much of this prompt does each worker cache?".

mod block_slab;
mod block_table;
pub mod event;
pub mod event_outcome;
pub mod hashing;
pub mod index;
mod index_hasher;

pub use event::{KvEvent, KvEventData, MalformedEvent, StoredBlock};
pub use event_outcome::{EventOutcome, IgnoreReason};
pub use hashing::{
    HASH_SEED, SequenceHashes, block_hashes, sequence_hashes, sequence_hashes_for_tokens,
    sequence_hashes_from_block_ids, sequence_hashes_iter,
};
pub use index::{IndexCounters, KvIndex};
