//! A hint to the CPU to bring a value's cache line in before it is read. Enters: a reference
//! to anything in memory; leaves nothing (on targets without a prefetch instruction it does
//! nothing at all).

/// Asks the CPU to bring `item`'s cache line into every cache level.
#[inline(always)]
pub fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of every x86_64 target, and a prefetch only hints the cache: it
        // neither reads nor writes memory as the program sees it.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}
