//! `kv-router-service`: the router as an HTTP service that engines and clients talk to.
//!
//! The routes and JSON bodies are those of upstream Dynamo's standalone selection service
//! (`POST /select`, `/select_and_reserve`, `/reservations`, `/workers`, …), so its clients
//! work unchanged; a booking answer also carries `kv_hint`, the envelope this router's hint
//! policies built. Engines (vLLM, SGLang) publish their KV events over ZMQ in msgpack; the
//! service subscribes to each registered worker rank, asks the engine to replay what it
//! missed, and feeds the events into the partition's KV index.
//!
//! The crate is laid out by concern, each a folder whose opener says what enters and leaves
//! it: [`engine_events`] (engines' KV events, wire to index), [`selection`] (the service's
//! state and the routes that choose and book workers), [`http`] (the selection API's routes
//! and bodies), [`gateway`] (the OpenAI-compatible front), [`replica`] and [`nats`] (router
//! replicas and the NATS event plane), [`admin`] (configuration reloads) and [`shadow`]
//! (shadow policies). Below them all: [`worker_record`], [`partition`] and [`error`].

pub mod admin;
pub mod engine_events;
pub mod error;
pub mod gateway;
pub mod http;
pub mod nats;
pub mod partition;
pub mod polling;
pub mod replica;
pub mod selection;
pub mod serve;
pub mod shadow;
pub mod worker_record;

pub use error::ServiceError;
pub use selection::selection_service::SelectionService;
pub use serve::{ServeOptions, serve};
