//! The simulated cluster's shape and speeds: workers per role, KV capacity, prefill, decode and
//! KV fetch throughput.

use serde::{Deserialize, Serialize};

/// KV capacity of a worker when none is configured, in tokens (turned into blocks at the
/// workload's block size).
pub const DEFAULT_KV_CAPACITY_TOKENS: u64 = 262_144;

/// How much faster fetching a block is than recomputing it, when no fetch bandwidth is configured.
pub const DEFAULT_FETCH_SPEEDUP: f64 = 4.0;

/// The simulated cluster. Every field has a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Workers per role the configuration books.
    pub workers_per_role: usize,
    /// KV capacity of each worker, in blocks; default [`DEFAULT_KV_CAPACITY_TOKENS`] worth.
    pub kv_capacity_blocks: Option<u64>,
    /// Prefill throughput of each worker, in prompt tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Decode throughput of each request, in output tokens per second.
    pub decode_tokens_per_s: f64,
    /// KV fetch bandwidth of each worker, in blocks per second; default
    /// [`DEFAULT_FETCH_SPEEDUP`] times the prefill throughput.
    pub fetch_blocks_per_s: Option<f64>,
    /// Fixed cost of one fetch or transfer (connection set-up, first byte), in milliseconds.
    pub fetch_latency_ms: f64,
    /// Whether workers advertise `router_hint` (with a source endpoint `tcp://sim-worker-N:23280`).
    pub router_hint: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            workers_per_role: 8,
            kv_capacity_blocks: None,
            prefill_tokens_per_s: 10_000.0,
            decode_tokens_per_s: 50.0,
            fetch_blocks_per_s: None,
            fetch_latency_ms: 2.0,
            router_hint: true,
        }
    }
}

/// A cluster parameter that cannot be simulated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("cluster parameter `{field}` is {value}; {expected}")]
pub struct ClusterError {
    /// The parameter.
    pub field: &'static str,
    /// Its value, as written.
    pub value: String,
    /// What it must be.
    pub expected: &'static str,
}

/// A cluster with every default resolved for one block size, in the units the simulation uses.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ResolvedCluster {
    /// Workers per role.
    pub workers_per_role: usize,
    /// KV capacity of each worker, in blocks.
    pub kv_capacity_blocks: usize,
    /// Prefill tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Decode tokens per second per request.
    pub decode_tokens_per_s: f64,
    /// Fetched blocks per second.
    pub fetch_blocks_per_s: f64,
    /// Fixed cost of a fetch, in microseconds.
    pub fetch_latency_us: f64,
    /// Whether workers advertise `router_hint`.
    pub router_hint: bool,
    /// Tokens per block.
    pub block_size: u32,
}

fn positive(field: &'static str, value: f64) -> Result<f64, ClusterError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ClusterError {
            field,
            value: value.to_string(),
            expected: "it must be a finite number above 0",
        })
    }
}

impl ClusterConfig {
    /// Checks the parameters and fills in the defaults for `block_size`.
    pub fn resolve(&self, block_size: u32) -> Result<ResolvedCluster, ClusterError> {
        if self.workers_per_role == 0 || self.workers_per_role > 4096 {
            return Err(ClusterError {
                field: "workers_per_role",
                value: self.workers_per_role.to_string(),
                expected: "it must be between 1 and 4096",
            });
        }
        let block_size = block_size.max(1);
        let prefill = positive("prefill_tokens_per_s", self.prefill_tokens_per_s)?;
        let decode = positive("decode_tokens_per_s", self.decode_tokens_per_s)?;
        let fetch = match self.fetch_blocks_per_s {
            Some(value) => positive("fetch_blocks_per_s", value)?,
            None => prefill * DEFAULT_FETCH_SPEEDUP / f64::from(block_size),
        };
        let latency = self.fetch_latency_ms;
        if !latency.is_finite() || latency < 0.0 {
            return Err(ClusterError {
                field: "fetch_latency_ms",
                value: latency.to_string(),
                expected: "it must be a finite number ≥ 0",
            });
        }
        let capacity = self
            .kv_capacity_blocks
            .unwrap_or(DEFAULT_KV_CAPACITY_TOKENS / u64::from(block_size));
        if capacity > u64::from(u32::MAX / 2) {
            return Err(ClusterError {
                field: "kv_capacity_blocks",
                value: capacity.to_string(),
                expected: "it must be at most 2147483647",
            });
        }
        Ok(ResolvedCluster {
            workers_per_role: self.workers_per_role,
            kv_capacity_blocks: capacity as usize,
            prefill_tokens_per_s: prefill,
            decode_tokens_per_s: decode,
            fetch_blocks_per_s: fetch,
            fetch_latency_us: latency * 1000.0,
            router_hint: self.router_hint,
            block_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_block_size_and_bad_values_are_rejected() {
        let resolved = ClusterConfig::default().resolve(16).unwrap();
        assert_eq!(resolved.kv_capacity_blocks, 16_384);
        assert_eq!(resolved.fetch_blocks_per_s, 2_500.0);
        let trace = ClusterConfig::default().resolve(512).unwrap();
        assert_eq!(trace.kv_capacity_blocks, 512);
        let bad = ClusterConfig {
            prefill_tokens_per_s: f64::NAN,
            ..ClusterConfig::default()
        };
        assert_eq!(bad.resolve(16).unwrap_err().field, "prefill_tokens_per_s");
        let none = ClusterConfig {
            workers_per_role: 0,
            ..ClusterConfig::default()
        };
        assert!(
            none.resolve(16)
                .unwrap_err()
                .to_string()
                .contains("workers_per_role")
        );
    }
}
