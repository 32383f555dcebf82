//! Shadow policies in the service.
//!
//! **Enters:** the bookings each partition's router queued for its roles' shadows (see
//! `Router::run_pending_shadows`). **Leaves:** one evaluator thread per partition that runs the
//! shadows off the request path, and `GET /shadow`, each partition's per-shadow figures beside the
//! live policies' (the same figures are on `/metrics` as `kv_router_shadow_*`).

pub mod shadow_evaluator;
pub mod shadow_route;
