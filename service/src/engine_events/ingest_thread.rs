//! The thread engines' KV events are read and applied on: a current-thread tokio runtime on
//! an OS thread of its own.
//!
//! Enters: the futures an ingress spawns on [`IngestThread::handle`] (the ZMQ listeners of
//! [`ZmqIngress::on_runtime`](super::zmq_ingress::ZmqIngress::on_runtime), the JetStream
//! consumer of [`NatsIngress::connect_on`](crate::nats::NatsIngress::connect_on)). Leaves:
//! nothing; they apply their events to the partitions' indexes, behind the same locks as
//! before.
//!
//! On the service's own runtime an engine's events woke a worker thread while that engine's
//! answer was on its way to a client, and the answer then waited for, or was handed between,
//! the runtime's threads: with the gateway in front of engines that publish a store of 512
//! blocks per 8,192-token prompt, the gateway's added latency was about 100 µs higher than
//! with the events on a thread of their own (BENCHMARKS, issue 27). Upstream's indexer keeps
//! its tree on a thread of its own for the same reason.

use std::thread::JoinHandle;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A running ingest thread; dropping it stops the thread and every task spawned on it.
pub struct IngestThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl IngestThread {
    /// Starts the thread (named `kv-ingest`) and its runtime.
    pub fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kv-ingest".to_owned())
            .spawn(move || {
                // Until the owner drops its sender; the runtime, dropped here, cancels the
                // tasks left.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Self {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The runtime to spawn listeners on.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Drop for IngestThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the KV ingest thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn tasks_run_on_the_ingest_thread_and_stop_with_it() {
        let ingest = IngestThread::start().expect("an ingest thread");
        let name = ingest
            .handle()
            .block_on(
                ingest
                    .handle()
                    .spawn(async { std::thread::current().name().map(str::to_owned) }),
            )
            .expect("the task ran");
        assert_eq!(name.as_deref(), Some("kv-ingest"));
        // A task that never ends is dropped with the thread.
        let dropped = Arc::new(AtomicBool::new(false));
        struct SetOnDrop(Arc<AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let guard = SetOnDrop(Arc::clone(&dropped));
        let _task = ingest.handle().spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(!dropped.load(Ordering::SeqCst));
        drop(ingest);
        assert!(
            dropped.load(Ordering::SeqCst),
            "the pending task outlived the thread"
        );
    }
}
