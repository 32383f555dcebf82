//! `kv-router-replay`: replays a workload through the KV router against a simulated cluster and
//! reports what the routing and hint policies change.
//!
//! The cluster runs in virtual, event-driven time. Its workers hold KV in LRU caches, publish
//! real KV events to the router as they compute, fetch and evict blocks, execute `kv.fetch`
//! actions from the router's hints, and report completions — so the effect of a policy is
//! measured, never assumed.

pub mod block_cache;
pub mod builtin_config;
pub mod cluster;
pub mod compare;
pub mod engine_block;
pub mod hit_rate;
pub mod html_report;
pub mod invariants;
pub mod outcome;
pub mod replicas;
pub mod report;
pub mod router_port;
pub mod shadow_table;
pub mod simulation;
pub mod summary;
pub mod synthetic;
pub mod trace;
pub mod without_events;
pub mod workload;

pub use builtin_config::{
    BUILTIN_CONFIGS, ConfigLoadError, builtin_configs, load_config_file, load_config_text,
};
pub use cluster::{ClusterConfig, ClusterError, ResolvedCluster};
pub use compare::{ReplayConfig, ReplayError, ReplayOptions, compare};
pub use invariants::Invariants;
pub use outcome::{BookingRecord, SimulationResult, StageOutcome};
pub use report::{Comparison, WorkloadInfo};
pub use router_port::RouterPort;
pub use simulation::{SimulationError, simulate, stages_for};
pub use summary::ConfigReport;
pub use synthetic::SyntheticWorkload;
pub use trace::{BadLine, LoadedTrace, TraceError, read_trace, read_trace_file};
pub use without_events::WithoutEventsRouter;
pub use workload::{PreparedWorkload, Workload, WorkloadRequest};
