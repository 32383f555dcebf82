//! Choosing and booking workers: the service's state and what the selection routes do with it.
//!
//! **Enters:** the selection API's parsed requests: prompts to choose a worker for
//! (`/select`, `/select_and_reserve`, `/overlap_scores`), booking changes (`/reservations`
//! and its prefill, output and free calls), worker registrations (`/workers`), and reads
//! (`/loads`, `/ready`, `/metrics`, `/dump`). **Leaves:** answers naming the chosen worker
//! with its overlap, load and `kv_hint` envelope; bookings held in the partition's router
//! until they are freed; the state as one snapshot value.
//!
//! - The state: [`selection_service`] (workers, one router per partition, reservations),
//!   [`reservations`] and [`snapshot`].
//! - The bodies: [`selection_request`], [`selection_response`], [`prompt`] and
//!   [`selection_id`].
//! - What the routes do: [`worker_choice`] (`/select`, `/select_and_reserve`),
//!   [`selection_answer`], [`booking_lifecycle`], [`membership`] and [`queries`].

pub mod booking_lifecycle;
pub mod membership;
pub mod prompt;
pub mod queries;
pub mod reservations;
pub mod selection_answer;
pub mod selection_id;
pub mod selection_request;
pub mod selection_response;
pub mod selection_service;
pub mod snapshot;
pub mod worker_choice;
