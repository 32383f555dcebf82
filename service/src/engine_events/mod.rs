//! Engines' KV events, from the wire to the index.
//!
//! **Enters:** what engines (vLLM, SGLang) publish about their KV caches: msgpack
//! `EventBatch`es on a ZMQ PUB socket, numbered, with a ROUTER endpoint that replays a range
//! of them. **Leaves:** the router's KV events, applied to each worker's partition index on
//! the `kv-ingest` thread, and the ingest's counters for `/metrics`.
//!
//! - The wire: [`engine_event`] (the engines' events as decoded), [`msgpack_batch`] (every
//!   layout, through a value tree) and [`event_batch_reader`] (vLLM's layout, straight from
//!   the bytes); [`event_conversion`] turns them into the router's events.
//! - The sockets: [`event_transport`] (subscribe, ask for a replay) and [`resubscription`]
//!   (follow a publisher across its restarts).
//! - Applying: [`ingress`] (what the service attaches to each worker), [`zmq_ingress`] and its
//!   per-rank [`kv_listener`]s, the [`ingest_thread`] they run on, and [`ingest_stats`].
//! - The engines' side, for `serve --simulate` and the tests: [`engine_publisher`] and
//!   [`simulated_engines`].

pub mod engine_event;
pub mod engine_publisher;
pub mod event_batch_reader;
pub mod event_conversion;
pub mod event_transport;
pub mod ingest_stats;
pub mod ingest_thread;
pub mod ingress;
pub mod kv_listener;
pub mod msgpack_batch;
pub mod resubscription;
pub mod simulated_engines;
pub mod zmq_ingress;
