//! Worker registration: upstream's `POST /workers` body, `PATCH` body and stored record.
//!
//! Role mapping: upstream's selection service serves one worker type per process, so its
//! bodies say nothing about roles. Here a worker may carry `"role": "aggregated" | "prefill" |
//! "decode"` (an extension field upstream clients never send); without it the worker is
//! `aggregated`. A worker that sets `router_hint_worker_type` accepts hints, and the endpoint in
//! `router_hint_source_control_endpoints` for a rank makes that rank a `kv.fetch` source.

use dynamo_kv_router::router::Role;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};

/// The model a body names when it names none (upstream's default).
pub const DEFAULT_MODEL_NAME: &str = "default";
/// The routing group a body names when it names none (upstream's default).
pub const DEFAULT_ROUTING_GROUP: &str = "default";
/// Most data-parallel ranks one worker may declare (upstream's limit).
pub const MAX_DATA_PARALLEL_RANKS: u32 = 4096;

pub(crate) fn default_model_name() -> String {
    DEFAULT_MODEL_NAME.to_owned()
}

/// The routing group of a worker or request that names none (`default`).
pub fn default_routing_group() -> String {
    DEFAULT_ROUTING_GROUP.to_owned()
}

/// A worker's role on the wire: `aggregated`, `prefill` or `decode` (default `aggregated`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireRole(pub Role);

impl Default for WireRole {
    fn default() -> Self {
        WireRole(Role::Aggregated)
    }
}

impl Serialize for WireRole {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for WireRole {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == name)
            .map(WireRole)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown role `{name}`; expected one of: aggregated, prefill, decode"
                ))
            })
    }
}

/// Where a worker is in its life: as upstream reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerLifecycle {
    /// Registered, but metadata is missing (see `not_schedulable_reasons`).
    Incomplete,
    /// Bookable.
    Schedulable,
    /// Being removed.
    Draining,
    /// Removed.
    Unschedulable,
}

/// The body of `POST /workers` (upstream's `WorkerRequest`, plus `role`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct WorkerRequest {
    /// The worker's id.
    pub worker_id: u64,
    /// The model it serves.
    #[serde(default = "default_model_name")]
    pub model_name: String,
    /// The routing group it belongs to.
    #[serde(default = "default_routing_group")]
    pub routing_group: String,
    /// Where requests for it go (returned by bookings).
    pub endpoint: Option<String>,
    /// The engine's KV-event publisher (data-parallel size 1).
    pub kv_events_endpoint: Option<String>,
    /// The engine's KV-event publishers, by global data-parallel rank.
    #[serde(default)]
    pub kv_events_endpoints: BTreeMap<u32, String>,
    /// The engine's replay endpoint (ZMQ ROUTER), for gaps in the event sequence.
    pub replay_endpoint: Option<String>,
    /// Tokens per KV block.
    pub block_size: Option<u32>,
    /// The first global data-parallel rank.
    pub data_parallel_start_rank: Option<u32>,
    /// The number of data-parallel ranks.
    pub data_parallel_size: Option<u32>,
    /// Upstream's scheduler limit; stored and reported.
    pub max_num_batched_tokens: Option<u64>,
    /// The worker's KV capacity in blocks; stored and reported.
    pub total_kv_blocks: Option<u64>,
    /// Upstream's stable routing id; stored and reported.
    pub stable_routing_id: Option<String>,
    /// Whether the worker runs EAGLE speculative decoding.
    pub is_eagle: Option<bool>,
    /// Upstream's worker taints; stored and reported.
    #[serde(default)]
    pub taints: BTreeSet<String>,
    /// Upstream's topology domains; stored and reported.
    #[serde(default)]
    pub topology_domains: BTreeMap<String, String>,
    /// Upstream's KV transfer domain; stored and reported.
    pub kv_transfer_domain: Option<String>,
    /// Upstream's KV transfer enforcement (`required` / `preferred`); stored and reported.
    pub kv_transfer_enforcement: Option<KvTransferEnforcement>,
    /// Upstream's KV transfer weight; stored and reported.
    pub kv_transfer_preferred_weight: Option<f32>,
    /// Set (non-empty) when the worker accepts hints.
    #[serde(default)]
    pub router_hint_worker_type: Option<String>,
    /// Per global data-parallel rank: the control endpoint peers fetch KV from.
    #[serde(default)]
    pub router_hint_source_control_endpoints: BTreeMap<u32, String>,
    /// How the worker publishes KV events; stored and reported.
    #[serde(default)]
    pub kv_event_source_mode: Option<String>,
    /// The role the worker serves (extension; default `aggregated`).
    #[serde(default)]
    pub role: Option<WireRole>,
}

/// Upstream's KV transfer enforcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvTransferEnforcement {
    /// A hard constraint.
    Required,
    /// A preference.
    Preferred,
}

/// The body of `PATCH /workers/{id}`: every present field replaces the stored one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WorkerPatchRequest {
    /// See [`WorkerRequest::endpoint`].
    pub endpoint: Option<String>,
    /// See [`WorkerRequest::kv_events_endpoint`].
    pub kv_events_endpoint: Option<String>,
    /// See [`WorkerRequest::kv_events_endpoints`].
    pub kv_events_endpoints: Option<BTreeMap<u32, String>>,
    /// See [`WorkerRequest::replay_endpoint`].
    pub replay_endpoint: Option<String>,
    /// See [`WorkerRequest::block_size`].
    pub block_size: Option<u32>,
    /// See [`WorkerRequest::data_parallel_start_rank`].
    pub data_parallel_start_rank: Option<u32>,
    /// See [`WorkerRequest::data_parallel_size`].
    pub data_parallel_size: Option<u32>,
    /// See [`WorkerRequest::max_num_batched_tokens`].
    pub max_num_batched_tokens: Option<u64>,
    /// See [`WorkerRequest::total_kv_blocks`].
    pub total_kv_blocks: Option<u64>,
    /// See [`WorkerRequest::stable_routing_id`].
    pub stable_routing_id: Option<String>,
    /// See [`WorkerRequest::is_eagle`].
    pub is_eagle: Option<bool>,
    /// See [`WorkerRequest::taints`].
    pub taints: Option<BTreeSet<String>>,
    /// See [`WorkerRequest::topology_domains`].
    pub topology_domains: Option<BTreeMap<String, String>>,
    /// See [`WorkerRequest::kv_transfer_domain`].
    pub kv_transfer_domain: Option<String>,
    /// See [`WorkerRequest::kv_transfer_enforcement`].
    pub kv_transfer_enforcement: Option<KvTransferEnforcement>,
    /// See [`WorkerRequest::kv_transfer_preferred_weight`].
    pub kv_transfer_preferred_weight: Option<f32>,
    /// See [`WorkerRequest::router_hint_worker_type`].
    pub router_hint_worker_type: Option<String>,
    /// See [`WorkerRequest::router_hint_source_control_endpoints`].
    pub router_hint_source_control_endpoints: Option<BTreeMap<u32, String>>,
    /// See [`WorkerRequest::kv_event_source_mode`].
    pub kv_event_source_mode: Option<String>,
    /// See [`WorkerRequest::role`].
    pub role: Option<WireRole>,
}

/// A worker as the service stores and reports it (upstream's `WorkerCatalogRecord`, plus
/// `role`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerCatalogRecord {
    /// The worker's id.
    pub worker_id: u64,
    /// The model it serves.
    pub model_name: String,
    /// Its routing group.
    pub routing_group: String,
    /// Where it is in its life.
    pub lifecycle: WorkerLifecycle,
    /// Where requests for it go.
    pub endpoint: Option<String>,
    /// Its KV-event publisher (data-parallel size 1).
    pub kv_events_endpoint: Option<String>,
    /// Its KV-event publishers by rank.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub kv_events_endpoints: BTreeMap<u32, String>,
    /// Its replay endpoint.
    pub replay_endpoint: Option<String>,
    /// Tokens per KV block.
    pub block_size: Option<u32>,
    /// The first data-parallel rank.
    pub data_parallel_start_rank: Option<u32>,
    /// The number of data-parallel ranks.
    pub data_parallel_size: Option<u32>,
    /// See [`WorkerRequest::max_num_batched_tokens`].
    pub max_num_batched_tokens: Option<u64>,
    /// See [`WorkerRequest::total_kv_blocks`].
    pub total_kv_blocks: Option<u64>,
    /// See [`WorkerRequest::stable_routing_id`].
    pub stable_routing_id: Option<String>,
    /// See [`WorkerRequest::is_eagle`].
    pub is_eagle: Option<bool>,
    /// See [`WorkerRequest::taints`].
    pub taints: BTreeSet<String>,
    /// See [`WorkerRequest::topology_domains`].
    pub topology_domains: BTreeMap<String, String>,
    /// See [`WorkerRequest::kv_transfer_domain`].
    pub kv_transfer_domain: Option<String>,
    /// See [`WorkerRequest::kv_transfer_enforcement`].
    pub kv_transfer_enforcement: Option<KvTransferEnforcement>,
    /// See [`WorkerRequest::kv_transfer_preferred_weight`].
    pub kv_transfer_preferred_weight: Option<f32>,
    /// See [`WorkerRequest::router_hint_worker_type`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_hint_worker_type: Option<String>,
    /// See [`WorkerRequest::router_hint_source_control_endpoints`].
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub router_hint_source_control_endpoints: BTreeMap<u32, String>,
    /// See [`WorkerRequest::kv_event_source_mode`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_event_source_mode: Option<String>,
    /// Why the worker is not schedulable (empty when it is).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_schedulable_reasons: Vec<String>,
    /// The role it serves.
    pub role: WireRole,
}

impl WorkerCatalogRecord {
    /// The record of a new registration, not yet checked (lifecycle `incomplete`).
    pub fn new(request: WorkerRequest) -> Self {
        Self {
            worker_id: request.worker_id,
            model_name: request.model_name,
            routing_group: request.routing_group,
            lifecycle: WorkerLifecycle::Incomplete,
            endpoint: request.endpoint,
            kv_events_endpoint: request.kv_events_endpoint,
            kv_events_endpoints: request.kv_events_endpoints,
            replay_endpoint: request.replay_endpoint,
            block_size: request.block_size,
            data_parallel_start_rank: request.data_parallel_start_rank,
            data_parallel_size: request.data_parallel_size,
            max_num_batched_tokens: request.max_num_batched_tokens,
            total_kv_blocks: request.total_kv_blocks,
            stable_routing_id: request.stable_routing_id,
            is_eagle: request.is_eagle,
            taints: request.taints,
            topology_domains: request.topology_domains,
            kv_transfer_domain: request.kv_transfer_domain,
            kv_transfer_enforcement: request.kv_transfer_enforcement,
            kv_transfer_preferred_weight: request.kv_transfer_preferred_weight,
            router_hint_worker_type: request.router_hint_worker_type,
            router_hint_source_control_endpoints: request.router_hint_source_control_endpoints,
            kv_event_source_mode: request.kv_event_source_mode,
            not_schedulable_reasons: Vec::new(),
            role: request.role.unwrap_or(WireRole(Role::Aggregated)),
        }
    }

    /// The partition the worker belongs to.
    pub fn partition(&self) -> PartitionKey {
        PartitionKey {
            model_name: self.model_name.clone(),
            routing_group: self.routing_group.clone(),
        }
    }

    /// Whether the worker belongs to `key`'s partition (no key is built: a booking asks this
    /// of every worker).
    pub fn is_in(&self, key: &PartitionKey) -> bool {
        self.model_name == key.model_name && self.routing_group == key.routing_group
    }

    /// The first data-parallel rank (default 0).
    pub fn dp_start(&self) -> u32 {
        self.data_parallel_start_rank.unwrap_or(0)
    }

    /// The number of data-parallel ranks (default 1).
    pub fn dp_size(&self) -> u32 {
        self.data_parallel_size.unwrap_or(1)
    }

    /// The worker's global data-parallel ranks.
    pub fn dp_ranks(&self) -> std::ops::Range<u32> {
        let start = self.dp_start();
        start..start.saturating_add(self.dp_size())
    }

    /// The KV-event publisher of each rank: `kv_events_endpoints`, else `kv_events_endpoint`
    /// for a single-rank worker.
    pub fn listener_endpoints(&self) -> BTreeMap<u32, String> {
        if !self.kv_events_endpoints.is_empty() {
            return self.kv_events_endpoints.clone();
        }
        match (self.dp_size(), &self.kv_events_endpoint) {
            (1, Some(endpoint)) => BTreeMap::from([(self.dp_start(), endpoint.clone())]),
            _ => BTreeMap::new(),
        }
    }

    /// Whether the worker accepts hints.
    pub fn accepts_hints(&self) -> bool {
        self.router_hint_worker_type
            .as_deref()
            .is_some_and(|kind| !kind.is_empty())
    }

    /// What keeps the worker from being schedulable, as upstream words it.
    pub fn missing_metadata(&self) -> Vec<String> {
        let mut missing = Vec::new();
        if self.endpoint.as_deref().is_none_or(str::is_empty) {
            missing.push("endpoint is required".to_owned());
        }
        if self.block_size.is_none_or(|size| size == 0) {
            missing.push("block_size must be greater than 0".to_owned());
        }
        if self.dp_size() == 0 {
            missing.push("data_parallel_size must be greater than 0".to_owned());
        }
        missing
    }

    /// What the event ingestion needs from the worker: a publisher per rank, and a replay
    /// endpoint only for single-rank workers (the replay protocol carries no rank).
    pub fn missing_event_metadata(&self) -> Vec<String> {
        let endpoints = self.listener_endpoints();
        let mut missing: Vec<String> = self
            .dp_ranks()
            .filter(|rank| endpoints.get(rank).is_none_or(String::is_empty))
            .map(|rank| format!("kv_events endpoint is required for dp_rank {rank}"))
            .collect();
        if self.dp_size() > 1 && self.replay_endpoint.is_some() {
            missing.push("replay_endpoint is supported only for data_parallel_size 1".to_owned());
        }
        missing
    }

    /// Applies a `PATCH` body: every present field replaces the stored one.
    pub fn apply_patch(&mut self, patch: WorkerPatchRequest) {
        fn set<T>(slot: &mut Option<T>, value: Option<T>) {
            if value.is_some() {
                *slot = value;
            }
        }
        set(&mut self.endpoint, patch.endpoint);
        set(&mut self.kv_events_endpoint, patch.kv_events_endpoint);
        if let Some(endpoints) = patch.kv_events_endpoints {
            self.kv_events_endpoints = endpoints;
        }
        set(&mut self.replay_endpoint, patch.replay_endpoint);
        set(&mut self.block_size, patch.block_size);
        set(
            &mut self.data_parallel_start_rank,
            patch.data_parallel_start_rank,
        );
        set(&mut self.data_parallel_size, patch.data_parallel_size);
        set(
            &mut self.max_num_batched_tokens,
            patch.max_num_batched_tokens,
        );
        set(&mut self.total_kv_blocks, patch.total_kv_blocks);
        set(&mut self.stable_routing_id, patch.stable_routing_id);
        set(&mut self.is_eagle, patch.is_eagle);
        if let Some(taints) = patch.taints {
            self.taints = taints;
        }
        if let Some(domains) = patch.topology_domains {
            self.topology_domains = domains;
        }
        set(&mut self.kv_transfer_domain, patch.kv_transfer_domain);
        set(
            &mut self.kv_transfer_enforcement,
            patch.kv_transfer_enforcement,
        );
        set(
            &mut self.kv_transfer_preferred_weight,
            patch.kv_transfer_preferred_weight,
        );
        set(
            &mut self.router_hint_worker_type,
            patch.router_hint_worker_type,
        );
        if let Some(endpoints) = patch.router_hint_source_control_endpoints {
            self.router_hint_source_control_endpoints = endpoints;
        }
        set(&mut self.kv_event_source_mode, patch.kv_event_source_mode);
        if let Some(role) = patch.role {
            self.role = role;
        }
    }
}

/// A routing partition: the workers of one model in one routing group share a KV index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    /// The model.
    pub model_name: String,
    /// The routing group.
    pub routing_group: String,
}

impl PartitionKey {
    /// The partition's key in `GET /dump` answers and snapshots: `"model:group"` (a snapshot
    /// reads it back by splitting at the first `:`).
    pub fn dump_key(&self) -> String {
        format!("{}:{}", self.model_name, self.routing_group)
    }
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "model={} routing_group={}",
            self.model_name, self.routing_group
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(model_name: &str, routing_group: &str) -> WorkerCatalogRecord {
        let request: WorkerRequest = serde_json::from_value(serde_json::json!({
            "worker_id": 1, "model_name": model_name, "routing_group": routing_group
        }))
        .expect("a registration");
        WorkerCatalogRecord::new(request)
    }

    #[test]
    fn a_worker_is_in_its_own_partition_only() {
        let worker = record("m", "a");
        assert!(worker.is_in(&worker.partition()));
        for (model_name, routing_group) in [("m", "b"), ("n", "a"), ("ma", ""), ("", "ma")] {
            let key = PartitionKey {
                model_name: model_name.to_owned(),
                routing_group: routing_group.to_owned(),
            };
            assert!(!worker.is_in(&key), "{key}");
        }
    }
}
