//! The router state's lock: a `parking_lot` read-write lock that bookings (readers) get into
//! within about one event's application while a stream of events (writes) applies.
//!
//! Three rules, each against a way a booking waited far longer than one event:
//! - A reader that finds an event applying spins on `try_read`, then yields its core between
//!   attempts, and parks only after [`READER_SPIN`] + [`READER_YIELD`]. A stream of events from
//!   one thread re-takes the lock within a fraction of a microsecond of releasing it; a parked
//!   reader would be woken only to find the next event holding it again.
//! - A writer lets waiting readers in before it takes the lock again: it spins for up to
//!   [`WRITER_DEFER`] (a running reader gets in within a fraction of that). If they still did
//!   not get in (they lost their core), writers stop waiting for readers until one has: a
//!   writer that also yielded its core to them applied a third of the events, and one that
//!   waited every time was held to one event per [`WRITER_DEFER`] by a descheduled reader.
//! - A writer that finds bookings holding the lock spins on `try_write` rather than announcing
//!   itself. `parking_lot`'s `write` would close the lock to new readers at once and then, while
//!   the bookings finish, yield its core and park: on a loaded machine the lock then stayed
//!   closed to every booking until the writer was scheduled again, and the last booking out
//!   paid the writer's wake-up. Only after [`WRITER_SPIN`] does the writer queue fairly (so many
//!   booking threads cannot starve events).

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a reader spins before it yields its core between attempts: many events'
/// applications, short enough that a writer descheduled while holding the lock costs little.
const READER_SPIN: Duration = Duration::from_micros(50);
/// How long a reader yields between attempts before it queues fairly (and parks).
const READER_YIELD: Duration = Duration::from_millis(2);
/// How long a writer waits for waiting readers to get in before it takes the lock anyway.
const WRITER_DEFER: Duration = Duration::from_micros(20);
/// How long a writer spins for the readers inside to leave before it queues fairly.
const WRITER_SPIN: Duration = Duration::from_micros(200);
/// Attempts between two looks at the clock.
const SPINS_PER_CHECK: u32 = 16;

/// A read-write lock that lets waiting readers in between two writes.
pub(crate) struct StateLock<T> {
    lock: RwLock<T>,
    /// Readers that found the lock taken and do not hold it yet.
    waiting_readers: AtomicU32,
    /// Readers that got the lock after waiting, ever.
    waited_reads: AtomicU64,
    /// `waited_reads` when a writer last stopped waiting for waiting readers without any
    /// getting in (they lost their core): writers do not wait for them again until one has.
    gave_up_at: AtomicU64,
}

/// Spins until `done` holds or `limit` has passed since the first attempt, calling `pause`
/// between attempts; whether it held.
fn spin_until(limit: Duration, pause: impl Fn(), mut done: impl FnMut() -> bool) -> bool {
    if done() {
        return true;
    }
    let start = Instant::now();
    loop {
        for _ in 0..SPINS_PER_CHECK {
            pause();
            if done() {
                return true;
            }
        }
        if start.elapsed() > limit {
            return false;
        }
    }
}

/// Counts a reader as waiting while it lives.
struct Waiting<'a>(&'a AtomicU32);

impl<'a> Waiting<'a> {
    fn new(counter: &'a AtomicU32) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<T> StateLock<T> {
    /// A lock around `value`.
    pub(crate) fn new(value: T) -> Self {
        Self {
            lock: RwLock::new(value),
            waiting_readers: AtomicU32::new(0),
            waited_reads: AtomicU64::new(0),
            gave_up_at: AtomicU64::new(u64::MAX),
        }
    }

    /// Shared access: spins while an event is applied, then yields its core between attempts,
    /// and queues (parks) only after [`READER_SPIN`] + [`READER_YIELD`].
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        if let Some(guard) = self.lock.try_read() {
            return guard;
        }
        let _waiting = Waiting::new(&self.waiting_readers);
        let mut guard = None;
        let mut try_read = || {
            guard = self.lock.try_read();
            guard.is_some()
        };
        let got = spin_until(READER_SPIN, std::hint::spin_loop, &mut try_read)
            || spin_until(READER_YIELD, std::thread::yield_now, &mut try_read);
        let guard = match guard {
            Some(guard) if got => guard,
            _ => self.lock.read(),
        };
        self.waited_reads.fetch_add(1, Ordering::SeqCst);
        guard
    }

    /// Exclusive access, after the readers waiting now got in (or [`WRITER_DEFER`] passed).
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.let_waiting_readers_in();
        let mut guard = None;
        if spin_until(WRITER_SPIN, std::hint::spin_loop, || {
            guard = self.lock.try_write();
            guard.is_some()
        }) && let Some(guard) = guard
        {
            return guard;
        }
        self.lock.write()
    }

    /// Waits (for at most [`WRITER_DEFER`]) until no reader waits, unless the last wait ended
    /// with readers still waiting and none has got in since.
    fn let_waiting_readers_in(&self) {
        if self.waiting_readers.load(Ordering::SeqCst) == 0 {
            return;
        }
        if self.waited_reads.load(Ordering::SeqCst) == self.gave_up_at.load(Ordering::Relaxed) {
            return;
        }
        let none_waiting = || self.waiting_readers.load(Ordering::SeqCst) == 0;
        if !spin_until(WRITER_DEFER, std::hint::spin_loop, none_waiting) {
            self.gave_up_at
                .store(self.waited_reads.load(Ordering::SeqCst), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

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

    /// Two readers that always overlap never leave the lock free; the writer still gets in
    /// (after its spin it queues fairly, which closes the lock to new readers).
    #[test]
    fn a_writer_gets_in_between_overlapping_readers() {
        let lock = Arc::new(StateLock::new(0u64));
        let done = Arc::new(AtomicBool::new(false));
        let reading = Arc::new(AtomicU32::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (lock, done, reading) =
                    (Arc::clone(&lock), Arc::clone(&done), Arc::clone(&reading));
                std::thread::spawn(move || {
                    let mut first = true;
                    while !done.load(Ordering::Acquire) {
                        let guard = lock.read();
                        if first {
                            reading.fetch_add(1, Ordering::AcqRel);
                            first = false;
                        }
                        std::thread::sleep(Duration::from_micros(300));
                        drop(guard);
                    }
                })
            })
            .collect();
        while reading.load(Ordering::Acquire) < 2 {
            std::thread::yield_now();
        }
        for _ in 0..20 {
            *lock.write() += 1;
        }
        done.store(true, Ordering::Release);
        for reader in readers {
            reader.join().expect("a reader finished");
        }
        assert_eq!(*lock.read(), 20);
    }
}
