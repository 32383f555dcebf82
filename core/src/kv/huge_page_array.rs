//! A zero-initialised, fixed-length array of `u64`s that asks the kernel to back it with
//! transparent huge pages once it spans one.
//!
//! The block tables are probed at random: with 4 KiB pages, a table of a few megabytes spans
//! more pages than the TLB covers, so most probes also walk the page tables, and filling a fresh
//! table after it grows faults once per 4 KiB. Arrays of at least [`HUGE_PAGE`] bytes are
//! therefore allocated aligned to a huge page and advised with `MADV_HUGEPAGE` before they are
//! first written, which lets Linux (with transparent huge pages in `madvise` or `always` mode)
//! map them with 2 MiB pages. The advice is a hint: where it is unavailable or refused, the
//! array works the same on small pages. Smaller arrays are ordinary allocations.

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc, handle_alloc_error};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The huge page size the alignment and the advice are for (x86-64 and most arm64 kernels).
const HUGE_PAGE: usize = 2 << 20;

/// A heap array of `u64`s, all 0 at first, with huge-page backing when it is large.
pub(crate) struct HugePageArray {
    ptr: NonNull<u64>,
    len: usize,
}

// SAFETY: the array owns its allocation exclusively, like a `Box<[u64]>`.
unsafe impl Send for HugePageArray {}
// SAFETY: shared access only reads through `&[u64]`, like a `Box<[u64]>`.
unsafe impl Sync for HugePageArray {}

impl Default for HugePageArray {
    fn default() -> Self {
        Self {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }
}

impl HugePageArray {
    /// `len` zeros.
    pub(crate) fn zeroed(len: usize) -> Self {
        let Some(layout) = layout_for(len) else {
            return Self::default();
        };
        let ptr = if layout.align() == HUGE_PAGE {
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe { alloc(layout) };
            if !raw.is_null() {
                advise_huge_pages(raw, layout.size());
                // SAFETY: `raw` points to `layout.size()` writable bytes just allocated.
                unsafe { raw.write_bytes(0, layout.size()) };
            }
            raw
        } else {
            // SAFETY: the layout has a non-zero size.
            unsafe { alloc_zeroed(layout) }
        };
        match NonNull::new(ptr.cast::<u64>()) {
            Some(ptr) => Self { ptr, len },
            None => handle_alloc_error(layout),
        }
    }
}

/// The layout of `len` `u64`s (`None` when empty): huge-page aligned from one huge page up.
fn layout_for(len: usize) -> Option<Layout> {
    if len == 0 {
        return None;
    }
    let bytes = len
        .checked_mul(size_of::<u64>())
        .unwrap_or_else(|| panic!("an array of {len} u64s overflows the address space"));
    let align = if bytes >= HUGE_PAGE {
        HUGE_PAGE
    } else {
        align_of::<u64>()
    };
    Layout::from_size_align(bytes, align).ok()
}

/// Asks Linux to back the huge pages `[start, start + bytes)` covers with transparent huge pages.
#[cfg(target_os = "linux")]
fn advise_huge_pages(start: *mut u8, bytes: usize) {
    // SAFETY: the range lies within one live allocation of ours; MADV_HUGEPAGE changes no
    // contents, and a refusal (EINVAL where THP is compiled out) leaves the pages as they are.
    let _ = unsafe { libc::madvise(start.cast(), bytes, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_start: *mut u8, _bytes: usize) {}

impl Drop for HugePageArray {
    fn drop(&mut self) {
        if let Some(layout) = layout_for(self.len) {
            // SAFETY: allocated in `zeroed` with this very layout (a function of `len`).
            unsafe { dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

impl Deref for HugePageArray {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        // SAFETY: `ptr` points to `len` initialised `u64`s owned by `self` (dangling and
        // aligned when `len` is 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for HugePageArray {
    fn deref_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_arrays_start_zeroed_and_keep_writes() {
        for len in [
            0,
            1,
            7,
            1000,
            HUGE_PAGE / 8,
            HUGE_PAGE / 8 + 3,
            3 * HUGE_PAGE / 8 - 1,
        ] {
            let mut array = HugePageArray::zeroed(len);
            assert_eq!(array.len(), len);
            assert!(array.iter().all(|slot| *slot == 0), "len {len}");
            if let Some(last) = array.last_mut() {
                *last = 7;
            }
            if let Some(first) = array.first_mut() {
                *first = 5;
            }
            assert_eq!(
                array.iter().sum::<u64>(),
                if len == 1 {
                    5
                } else if len > 1 {
                    12
                } else {
                    0
                }
            );
        }
    }

    #[test]
    fn large_arrays_are_huge_page_aligned() {
        let array = HugePageArray::zeroed(HUGE_PAGE / 8);
        assert_eq!(array.as_ptr() as usize % HUGE_PAGE, 0);
        let small = HugePageArray::zeroed(16);
        assert_eq!(small.as_ptr() as usize % align_of::<u64>(), 0);
    }
}
