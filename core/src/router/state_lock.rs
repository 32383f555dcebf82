//! The router state's lock: a `parking_lot` read-write lock whose readers (bookings) spin
//! briefly instead of parking when an event holds it.
//!
//! A stream of events from one thread re-takes the write lock within a fraction of a
//! microsecond of releasing it. A booking that parked behind an event would be woken only to
//! find the next event holding the lock again, and would wait for the lock's periodic
//! fairness (about half a millisecond). A booking that spins on `try_read` instead takes the
//! lock in the gap between two events, so it waits for about one event's application.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// How long a reader spins before it parks: many events' applications, short enough that a
/// writer descheduled while holding the lock costs little spinning.
const READER_SPIN: Duration = Duration::from_micros(50);
/// `try_read` attempts between two looks at the clock.
const SPINS_PER_CHECK: u32 = 16;

/// A read-write lock whose readers spin before they park.
pub(crate) struct StateLock<T> {
    lock: RwLock<T>,
}

impl<T> StateLock<T> {
    /// A lock around `value`.
    pub(crate) fn new(value: T) -> Self {
        Self {
            lock: RwLock::new(value),
        }
    }

    /// Shared access: spins while an event is applied, parks only after [`READER_SPIN`].
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        if let Some(guard) = self.lock.try_read() {
            return guard;
        }
        let start = Instant::now();
        loop {
            for _ in 0..SPINS_PER_CHECK {
                std::hint::spin_loop();
                if let Some(guard) = self.lock.try_read() {
                    return guard;
                }
            }
            if start.elapsed() > READER_SPIN {
                return self.lock.read();
            }
        }
    }

    /// Exclusive access.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.lock.write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn readers_see_every_write_in_order() {
        let lock = Arc::new(StateLock::new(0u64));
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (lock, done) = (Arc::clone(&lock), Arc::clone(&done));
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    *lock.write() += 1;
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut last = 0;
        while !done.load(Ordering::Acquire) {
            let seen = *lock.read();
            assert!(seen >= last, "a reader saw the value go back");
            last = seen;
        }
        writer.join().expect("the writer finished");
        assert_eq!(*lock.read(), 20_000);
    }
}
