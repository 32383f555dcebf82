//! `kv-router-service`: the router as an HTTP service that engines and clients talk to.
//!
//! The routes and JSON bodies are those of upstream Dynamo's standalone selection service
//! (`POST /select`, `/select_and_reserve`, `/reservations`, `/workers`, …), so its clients
//! work unchanged; a booking answer also carries `kv_hint`, the envelope this router's hint
//! policies built. Engines (vLLM, SGLang) publish their KV events over ZMQ in msgpack; the
//! service subscribes to each registered worker rank, asks the engine to replay what it
//! missed, and feeds the events into the partition's KV index.

pub mod admin;
pub mod booking_lifecycle;
pub mod engine_event;
pub mod engine_publisher;
pub mod error;
pub mod event_batch_reader;
pub mod event_conversion;
pub mod event_transport;
pub mod gateway;
pub mod http;
pub mod ingest_stats;
pub mod ingest_thread;
pub mod ingress;
pub mod json_body;
pub mod kv_listener;
pub mod loopback_client;
pub mod membership;
pub mod msgpack_batch;
pub mod nats;
pub mod partition;
pub mod polling;
pub mod prompt;
pub mod queries;
pub mod replica;
pub mod reservations;
pub mod resubscription;
pub mod selection;
pub mod selection_answer;
pub mod selection_id;
pub mod selection_request;
pub mod selection_response;
pub mod selection_service;
pub mod serve;
pub mod shadow;
pub mod simulated_engines;
pub mod snapshot;
pub mod token_array;
pub mod worker_record;
pub mod zmq_ingress;

pub use error::ServiceError;
pub use selection_service::SelectionService;
pub use serve::{ServeOptions, serve};
