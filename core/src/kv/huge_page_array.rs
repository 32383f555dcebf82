//! A zero-initialised, fixed-length array of `u64`s that asks the kernel to back it with
//! transparent huge pages once it spans one.
//!
//! The block tables are probed at random: with 4 KiB pages, a table of a few megabytes spans
//! more pages than the TLB covers, so most probes also walk the page tables, and filling a fresh
//! table after it grows faults once per 4 KiB. On Linux, arrays of at least [`MAPPED_FROM`]
//! bytes are therefore mapped straight from the kernel, aligned to a huge page, advised with
//! `MADV_HUGEPAGE` (which lets Linux, with transparent huge pages in `madvise` or `always` mode,
//! back each whole 2 MiB stretch with one huge page) and populated at once with
//! `MADV_POPULATE_WRITE` (one call maps every page, instead of one fault per page at its first
//! write; kernels before 5.14 refuse it, and then the pages fault in as they are written). A
//! fresh anonymous mapping reads as zeros, so such an array is never written to be zeroed: a
//! grown table's new slots are written once, when its entries are refiled. The advice is a hint: where it is unavailable or refused, the array
//! works the same on small pages. Smaller arrays, and every array elsewhere, are ordinary
//! zeroed allocations.

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The huge page size the alignment and the advice are for (x86-64 and most arm64 kernels).
const HUGE_PAGE: usize = 2 << 20;

/// The size from which an array is mapped straight from the kernel and populated at once: one
/// huge page, the least a huge page can back. A smaller array gains nothing from the mapping,
/// and the allocator serves it from memory the process freed before (the tables a growing
/// index left behind, an index dropped earlier), which is already faulted in, where a fresh
/// mapping faults in every page again.
const MAPPED_FROM: usize = HUGE_PAGE;

/// A heap array of `u64`s, all 0 at first, with huge-page backing when it is large.
pub(crate) struct HugePageArray {
    ptr: NonNull<u64>,
    len: usize,
}

// SAFETY: the array owns its memory exclusively, like a `Box<[u64]>`.
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

/// How an array of some length gets its memory.
enum Backing {
    /// None: the array is empty.
    Empty,
    /// The global allocator, with this layout.
    Heap(Layout),
    /// An anonymous mapping of this many bytes (a whole number of pages), huge-page aligned.
    #[cfg(target_os = "linux")]
    Mapping(usize),
}

impl Backing {
    /// The backing of `len` `u64`s.
    fn of(len: usize) -> Self {
        if len == 0 {
            return Self::Empty;
        }
        // Room for aligning a mapping to a huge page is checked too, so that no size that
        // passes here overflows later.
        let bytes = len
            .checked_mul(size_of::<u64>())
            .filter(|bytes| bytes.checked_add(2 * HUGE_PAGE).is_some())
            .unwrap_or_else(|| panic!("an array of {len} u64s overflows the address space"));
        #[cfg(target_os = "linux")]
        if bytes >= MAPPED_FROM {
            return Self::Mapping(bytes.next_multiple_of(page_size()));
        }
        match Layout::array::<u64>(len) {
            Ok(layout) => Self::Heap(layout),
            Err(_) => panic!("an array of {len} u64s overflows the address space"),
        }
    }
}

impl HugePageArray {
    /// `len` zeros.
    pub(crate) fn zeroed(len: usize) -> Self {
        let ptr =
            match Backing::of(len) {
                Backing::Empty => return Self::default(),
                // SAFETY: the layout has a non-zero size.
                Backing::Heap(layout) => NonNull::new(unsafe { alloc_zeroed(layout) })
                    .unwrap_or_else(|| handle_alloc_error(layout)),
                #[cfg(target_os = "linux")]
                Backing::Mapping(bytes) => map_huge_page_aligned(bytes).unwrap_or_else(|| {
                    handle_alloc_error(Layout::from_size_align(bytes, HUGE_PAGE).unwrap_or_else(
                        |_| panic!("a mapping of {bytes} bytes overflows the address space"),
                    ))
                }),
            };
        Self {
            ptr: ptr.cast(),
            len,
        }
    }
}

/// The kernel's page size, which mappings are a whole number of.
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(1)
}

/// Bytes of the arrays mapped straight from the kernel and not yet unmapped, process-wide.
static MAPPED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes the KV index holds in memory mapped straight from the kernel (its large block tables,
/// see [`KvIndex`](super::KvIndex)), process-wide. The global allocator never sees these
/// bytes: a measurement of the index's memory that counts allocations adds them.
pub fn mapped_bytes() -> usize {
    MAPPED_BYTES.load(Ordering::Relaxed)
}

/// Maps `bytes` (a whole number of pages) of fresh zeroed memory at a huge-page boundary
/// and advises huge pages for it; `None` when the kernel refuses the mapping.
#[cfg(target_os = "linux")]
fn map_huge_page_aligned(bytes: usize) -> Option<NonNull<u8>> {
    // Map one huge page more than asked, then give back the head and tail around the first
    // huge-page boundary.
    let span = bytes.checked_add(HUGE_PAGE)?;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
    // existing memory.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let raw = raw.cast::<u8>();
    let head = (raw as usize).next_multiple_of(HUGE_PAGE) - raw as usize;
    // SAFETY: `head <= HUGE_PAGE`, so `start..start + bytes` lies within the mapping.
    let start = unsafe { raw.add(head) };
    let tail = span - head - bytes;
    // SAFETY: the head and tail are the parts of our own fresh mapping outside
    // `start..start + bytes`; both are page-aligned (the mapping and `start` are, and so is
    // `bytes`). A failed unmap only leaves them mapped and unused.
    unsafe {
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        if tail > 0 {
            libc::munmap(start.add(bytes).cast(), tail);
        }
        // MADV_HUGEPAGE changes no contents; a refusal (EINVAL where THP is compiled out)
        // leaves the pages small.
        libc::madvise(start.cast(), bytes, libc::MADV_HUGEPAGE);
        libc::madvise(start.cast(), bytes, libc::MADV_POPULATE_WRITE);
    }
    MAPPED_BYTES.fetch_add(bytes, Ordering::Relaxed);
    NonNull::new(start)
}

impl Drop for HugePageArray {
    fn drop(&mut self) {
        match Backing::of(self.len) {
            Backing::Empty => {}
            // SAFETY: allocated in `zeroed` with this very layout (a function of `len`).
            Backing::Heap(layout) => unsafe { dealloc(self.ptr.as_ptr().cast(), layout) },
            #[cfg(target_os = "linux")]
            Backing::Mapping(bytes) => {
                // SAFETY: mapped in `zeroed` with this very size (a function of `len`), and no
                // reference into it outlives `self`.
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), bytes) };
                MAPPED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
            }
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
    #[cfg(target_os = "linux")]
    fn mapped_arrays_are_counted_while_they_live() {
        // Other tests map arrays at the same time, so only a lower bound holds while it lives.
        let len = MAPPED_FROM / 8 + 1000;
        let array = HugePageArray::zeroed(len);
        assert!(matches!(Backing::of(len), Backing::Mapping(bytes) if bytes >= len * 8));
        assert!(mapped_bytes() >= len * 8, "{} mapped", mapped_bytes());
        drop(array);
        assert!(matches!(Backing::of(MAPPED_FROM / 8 - 1), Backing::Heap(_)));
    }

    #[test]
    fn large_arrays_are_huge_page_aligned() {
        let array = HugePageArray::zeroed(HUGE_PAGE / 8);
        assert_eq!(array.as_ptr() as usize % HUGE_PAGE, 0);
        let small = HugePageArray::zeroed(16);
        assert_eq!(small.as_ptr() as usize % align_of::<u64>(), 0);
    }
}
