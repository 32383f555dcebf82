//! What besides its tokens identifies a request's KV blocks: the LoRA adapter, the cache
//! namespace (salt), the multimodal objects of each block, and Eagle's hashing window.
//!
//! Requests under different LoRAs or namespaces hash to different blocks, so they never match
//! each other's cache; this follows upstream `compute_block_hash_for_seq` exactly.

use serde::{Deserialize, Serialize};

/// The request identity that salts block hashes. The default is a plain request: no LoRA, no
/// namespace, no multimodal objects, not Eagle. Empty strings count as absent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestIdentity {
    /// The LoRA adapter the request runs under (upstream `lora_name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_name: Option<String>,
    /// The cache namespace, or salt, that isolates the request's cache (upstream
    /// `cache_namespace`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_namespace: Option<String>,
    /// Per block, in block order, the `mm_hash` of each multimodal object in that block
    /// (upstream `block_mm_infos[i].mm_objects[*].mm_hash`); blocks past the end, and empty
    /// lists, have none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub block_mm_hashes: Vec<Vec<u64>>,
    /// Eagle speculative decoding: each block hashes `block_size + 1` tokens starting at
    /// `i * block_size`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub eagle: bool,
}

impl RequestIdentity {
    /// A plain request.
    pub fn plain() -> Self {
        Self::default()
    }

    /// The same identity under LoRA adapter `lora_name`.
    pub fn with_lora(mut self, lora_name: impl Into<String>) -> Self {
        self.lora_name = Some(lora_name.into());
        self
    }

    /// The same identity in cache namespace `namespace`.
    pub fn with_cache_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.cache_namespace = Some(namespace.into());
        self
    }

    /// The same identity with per-block multimodal object hashes.
    pub fn with_block_mm_hashes(mut self, block_mm_hashes: Vec<Vec<u64>>) -> Self {
        self.block_mm_hashes = block_mm_hashes;
        self
    }

    /// The same identity with Eagle's hashing window on or off.
    pub fn with_eagle(mut self, eagle: bool) -> Self {
        self.eagle = eagle;
        self
    }

    /// Whether the identity changes nothing: hashes equal those of the plain token path.
    pub fn is_plain(&self) -> bool {
        self.salt_seed() == super::xxh3_block::HASH_SEED
            && !self.eagle
            && self.block_mm_hashes.iter().all(Vec::is_empty)
    }

    /// The xxh3 seed of this request's local block hashes (see [`super::xxh3_block::salt_seed`]).
    pub fn salt_seed(&self) -> u64 {
        super::xxh3_block::salt_seed(self.lora_name.as_deref(), self.cache_namespace.as_deref())
    }

    /// The multimodal object hashes of block `index` (empty when it has none).
    pub fn mm_hashes_of(&self, index: usize) -> &[u64] {
        self.block_mm_hashes.get(index).map_or(&[], Vec::as_slice)
    }
}
