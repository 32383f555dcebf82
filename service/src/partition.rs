//! A routing partition: one model in one routing group, with its own router (KV index, loads,
//! policies) at the block size its workers registered with.

use crate::worker_record::PartitionKey;
use dynamo_kv_router::router::{Router, RouterOptions, RouterSetup};

/// One partition's router.
pub struct Partition {
    /// The model and routing group.
    pub key: PartitionKey,
    /// Tokens per block of every worker in the partition.
    pub block_size: u32,
    /// The router holding the partition's KV index and loads.
    pub router: Router,
}

impl Partition {
    /// A partition running `setup` with `block_size`-token blocks.
    pub fn new(
        key: PartitionKey,
        mut setup: RouterSetup,
        options: RouterOptions,
        block_size: u32,
    ) -> Self {
        setup.block_size = block_size;
        Self {
            key,
            block_size,
            router: Router::new(setup, options),
        }
    }
}
