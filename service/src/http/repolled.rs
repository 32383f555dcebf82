//! A future that is polled again at once when it wakes itself during its own poll, instead of
//! going back through the runtime's scheduler.
//!
//! On tokio's multi-thread runtime a task woken while it runs is requeued as if it had yielded,
//! and the runtime wakes a parked worker thread to come and take it. An HTTP connection wakes
//! itself several times per request: hyper's server hands the request body to the handler
//! through a channel, and the gateway drives its worker connections inside the request's own
//! task, so handing a request to the worker and the end of its answer both signal the same
//! task. Each of those woke the other worker thread, which found nothing to do and went back to
//! sleep: two needless thread wake-ups per request, on machines where the engines and their
//! clients want the same cores.
//!
//! Enters: any future (a served connection). Leaves: the same output; wakes that arrive while
//! the future is being polled become one more poll in place, wakes that arrive between polls
//! reach the task as before. A poll that keeps waking itself is handed back to the runtime
//! after [`MAX_REPOLLS`] tries or once the task's cooperative budget is spent, so it cannot
//! starve other tasks.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// Polls in place per runtime poll before the future is requeued as a yield.
pub const MAX_REPOLLS: usize = 8;

/// Not being polled: a wake goes to the task.
const IDLE: u8 = 0;
/// Being polled: a wake asks for one more poll.
const POLLING: u8 = 1;
/// Woken while being polled.
const WOKEN: u8 = 2;

/// `future`, polled again in place when it wakes itself (see the module docs).
pub struct Repolled<F> {
    future: Pin<Box<F>>,
    filter: Arc<WakeFilter>,
    waker: Waker,
}

impl<F: Future> Repolled<F> {
    /// Wraps `future`.
    pub fn new(future: F) -> Self {
        let filter = Arc::new(WakeFilter {
            state: AtomicU8::new(IDLE),
            task: Mutex::new(None),
        });
        Self {
            future: Box::pin(future),
            waker: Waker::from(Arc::clone(&filter)),
            filter,
        }
    }
}

impl<F: Future> Future for Repolled<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.filter.register(cx.waker());
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..MAX_REPOLLS {
            this.filter.state.store(POLLING, Ordering::SeqCst);
            if let Poll::Ready(output) = this.future.as_mut().poll(&mut inner) {
                this.filter.state.store(IDLE, Ordering::SeqCst);
                return Poll::Ready(output);
            }
            let settled = this.filter.state.compare_exchange(
                POLLING,
                IDLE,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            if settled.is_ok() {
                return Poll::Pending;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Woken during every poll, or out of budget: let the runtime run others first.
        this.filter.state.store(IDLE, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The waker the wrapped future sees.
struct WakeFilter {
    state: AtomicU8,
    /// The task's own waker, from its latest poll.
    task: Mutex<Option<Waker>>,
}

impl WakeFilter {
    fn register(&self, waker: &Waker) {
        let mut task = self.task.lock();
        if !task.as_ref().is_some_and(|known| known.will_wake(waker)) {
            *task = Some(waker.clone());
        }
    }
}

impl Wake for WakeFilter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load(Ordering::SeqCst);
        loop {
            match state {
                IDLE => {
                    if let Some(task) = self.task.lock().as_ref() {
                        task.wake_by_ref();
                    }
                    return;
                }
                POLLING => {
                    match self.state.compare_exchange(
                        POLLING,
                        WOKEN,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => return,
                        Err(now) => state = now,
                    }
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself `times` times during its polls, then is ready; counts its polls.
    struct SelfWaking {
        times: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.times == 0 {
                return Poll::Ready(());
            }
            self.times -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes it gets.
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once<F: Future>(
        future: &mut Repolled<F>,
        wakes: &Arc<CountingWaker>,
    ) -> Poll<F::Output> {
        let waker = Waker::from(Arc::clone(wakes));
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_wake_during_the_poll_is_a_poll_in_place_not_a_wake_of_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let wakes = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut future = Repolled::new(SelfWaking {
            times: 3,
            polls: Arc::clone(&polls),
        });
        assert!(poll_once(&mut future, &wakes).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 4);
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "the task was never woken"
        );
    }

    #[test]
    fn a_future_that_always_wakes_itself_is_handed_back_to_the_runtime() {
        let polls = Arc::new(AtomicUsize::new(0));
        let wakes = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut future = Repolled::new(SelfWaking {
            times: usize::MAX,
            polls: Arc::clone(&polls),
        });
        assert!(poll_once(&mut future, &wakes).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_REPOLLS);
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "requeued once, as a yield"
        );
    }

    #[test]
    fn a_wake_between_polls_reaches_the_task() {
        let wakes = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let stored = Arc::new(Mutex::new(None::<Waker>));
        let keep = Arc::clone(&stored);
        let mut future = Repolled::new(std::future::poll_fn(move |cx| {
            *keep.lock() = Some(cx.waker().clone());
            Poll::<()>::Pending
        }));
        assert!(poll_once(&mut future, &wakes).is_pending());
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
        let waker = stored.lock().take().expect("the future kept its waker");
        waker.wake_by_ref();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        waker.wake();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 2);
    }
}
