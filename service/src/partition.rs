//! A routing partition: one model in one routing group, with its own router (KV index, loads,
//! policies) at the block size its workers registered with.

use crate::worker_record::PartitionKey;
use dynamo_kv_router::kv::{DumpError, RouterEvent};
use dynamo_kv_router::router::{Router, RouterOptions, RouterSetup};

/// One partition's router.
pub struct Partition {
    /// The model and routing group.
    pub key: PartitionKey,
    /// Tokens per block of every worker in the partition.
    pub block_size: u32,
    /// Whether the partition's workers run EAGLE (their prompts hash with EAGLE's window).
    pub eagle: bool,
    /// The router holding the partition's KV index and loads.
    pub router: Router,
}

impl Partition {
    /// A partition running `setup` with `block_size`-token blocks, EAGLE or not. Its router
    /// is always built with index lineage, whatever `options` say: the service dumps its
    /// indexes (`GET /dump`, snapshots, warm starts of peers).
    pub fn new(
        key: PartitionKey,
        mut setup: RouterSetup,
        options: RouterOptions,
        block_size: u32,
        eagle: bool,
    ) -> Self {
        setup.block_size = block_size;
        Self {
            key,
            block_size,
            eagle,
            router: Router::new(
                setup,
                RouterOptions {
                    index_lineage: true,
                    ..options
                },
            ),
        }
    }

    /// The partition's index in upstream's dump form (see `Router::export_events`). `new`
    /// builds every partition router with lineage, so this fails only if that ever changed.
    pub fn dump_events(&self) -> Result<Vec<RouterEvent>, DumpError> {
        self.router.export_events()
    }
}
