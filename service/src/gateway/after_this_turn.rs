//! Bookkeeping the client's answer does not wait for: releasing a booking's prefill or its
//! whole load, and recording how long the answer took, once hyper has the frame at hand.
//!
//! Enters: a closure, from inside a body that hyper is polling. Leaves: the closure run as a
//! task of the same tokio worker. A task spawned there takes the worker's next turn, which
//! comes when the connection task yields, that is after it wrote the frame it just took to
//! the client's socket; so the client does not wait for the closure, and the closure still
//! runs within microseconds (it never queues behind other connections' work). Without a
//! current runtime the closure runs at once. A task that never runs (its runtime shut down
//! first) drops its closure, and with it what the closure holds: a booking guard then frees its
//! booking as it would have.

/// Runs `work` on this worker's next turn (at once when no tokio runtime is current).
pub fn after_this_turn(work: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(async move { work() })),
        Err(_) => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn without_a_runtime_the_work_runs_at_once() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        after_this_turn(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn on_a_runtime_the_work_runs_when_the_caller_yields() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        after_this_turn(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(
            runs.load(Ordering::SeqCst),
            0,
            "not before the caller's turn ends"
        );
        tokio::task::yield_now().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
