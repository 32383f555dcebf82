//! The thread that evaluates one partition's shadows while the partition lives.

use crate::partition::Partition;
use dynamo_kv_router::router::SHADOW_EVALUATOR_SHARE;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long the evaluator waits for a booking before it checks that its partition still lives.
const WAIT_FOR_BOOKINGS: Duration = Duration::from_millis(200);

/// Starts evaluating `partition`'s shadows on a thread of its own, spending at most
/// [`SHADOW_EVALUATOR_SHARE`] of a core on it; the thread ends once the partition is dropped.
/// A partition whose configuration has no shadows queues nothing, and its evaluator only wakes
/// to check on it.
pub fn start_shadow_evaluator(partition: &Arc<Partition>) {
    let weak: Weak<Partition> = Arc::downgrade(partition);
    let name = format!("kv-router shadows {}", partition.key.model_name);
    let started = std::thread::Builder::new().name(name).spawn(move || {
        while let Some(partition) = weak.upgrade() {
            partition
                .router
                .run_shadows_paced(WAIT_FOR_BOOKINGS, SHADOW_EVALUATOR_SHARE);
        }
    });
    if let Err(error) = started {
        tracing::error!(
            partition = %partition.key,
            %error,
            "cannot start the shadow evaluator thread; this partition's shadows will not be evaluated"
        );
    }
}
