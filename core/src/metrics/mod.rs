//! Router counters and the booking-latency histogram: a snapshot struct for in-process readers
//! and the Prometheus text exposition (format 0.0.4), written by hand: it is a few lines of
//! `name{labels} value`, and a metrics crate would add a registry and global state for nothing.
//!
//! [`snapshot`](MetricsSnapshot) is what readers see, [`histogram`](HistogramSnapshot) the
//! booking latency, `live` the router's lock-free counters, `prometheus` the exposition (one
//! table row per metric family), `prediction_metrics` the cache predictions' samples and
//! [`BookErrorReason`] the labels of failed bookings.

mod book_error_reason;
mod histogram;
mod live;
mod prediction_metrics;
mod prometheus;
mod shadow_report;
mod snapshot;

pub use book_error_reason::BookErrorReason;
pub use histogram::HistogramSnapshot;
pub(crate) use live::{PolicyFailureCounter, RouterMetrics};
pub use prediction_metrics::{PredictionMode, prediction_prometheus_text};
pub use prometheus::escape_label;
pub use shadow_report::{ShadowReport, shadow_prometheus_text};
pub use snapshot::{EventMetrics, MetricsSnapshot, PolicyFailures};
