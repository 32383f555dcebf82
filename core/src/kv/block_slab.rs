//! A growable array in fixed-size chunks: indices stay valid as it grows, and growing never
//! reserves more than one chunk beyond what is used (a `Vec` that doubles can leave half of
//! its memory unused, which at a million blocks is more than the rest of the index).
//!
//! Each entry may carry a *side* value, stored in an array of its own within the entry's chunk:
//! a loop that reads only the entries reads no side values' bytes, and one chunk lookup finds
//! both. Without a side value (`S = ()`) the side array takes no memory.

/// Entries per chunk (a power of two); other per-entry arrays cut in chunks use the same size,
/// so that a run of entries within one chunk is a run within one chunk of theirs too.
pub(crate) const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;

/// One chunk: [`CHUNK`] entries, then their side values.
struct Chunk<T, S> {
    entries: [T; CHUNK],
    sides: [S; CHUNK],
}

/// Entries (each with a side value of type `S`) addressed by `u32` index, stored in chunks of
/// [`CHUNK`].
pub(crate) struct ChunkedSlab<T, S = ()> {
    chunks: Vec<Box<Chunk<T, S>>>,
    len: usize,
}

impl<T, S> Default for ChunkedSlab<T, S> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Copy + Default, S: Copy + Default> ChunkedSlab<T, S> {
    /// Entries in use (the highest index plus one).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entries the allocated chunks hold.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Makes room for `additional` more entries.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let needed = (self.len + additional).div_ceil(CHUNK);
        while self.chunks.len() < needed {
            self.add_chunk();
        }
    }

    /// Allocates one more chunk. Out of line: a push takes it once in [`CHUNK`] pushes, and
    /// the check that decides it stays in the push itself.
    #[cold]
    #[inline(never)]
    fn add_chunk(&mut self) {
        // Fixed-size arrays, so indexing within a chunk needs no bounds check.
        self.chunks.push(Box::new(Chunk {
            entries: [T::default(); CHUNK],
            sides: [S::default(); CHUNK],
        }));
    }

    /// Appends `value` with a default side value; returns its index.
    pub(crate) fn push(&mut self, value: T) -> u32 {
        self.push_with_side(value, S::default())
    }

    /// Appends `value` with the side value `side`; returns its index.
    #[inline]
    pub(crate) fn push_with_side(&mut self, value: T, side: S) -> u32 {
        let index = self.len as u32;
        if self.len >> CHUNK_BITS >= self.chunks.len() {
            self.add_chunk();
        }
        self.set(index, value, side);
        self.len += 1;
        index
    }

    /// Drops the last entry (releasing its chunk once the chunk is empty).
    pub(crate) fn pop(&mut self) {
        if self.len == 0 {
            return;
        }
        self.len -= 1;
        let needed = self.len.div_ceil(CHUNK);
        // Keep one spare chunk so that a push right after a pop does not reallocate.
        if self.chunks.len() > needed + 1 {
            self.chunks.truncate(needed + 1);
        }
    }

    /// The entry at `index`.
    #[inline]
    pub(crate) fn get(&self, index: u32) -> &T {
        let index = index as usize;
        &self.chunks[index >> CHUNK_BITS].entries[index & (CHUNK - 1)]
    }

    /// The entry at `index`, if `index` is in use (or was, and is on the free list).
    #[inline]
    pub(crate) fn try_get(&self, index: u32) -> Option<&T> {
        let index = index as usize;
        if index >= self.len {
            return None;
        }
        Some(&self.chunks[index >> CHUNK_BITS].entries[index & (CHUNK - 1)])
    }

    /// The entries from `index` to the end of its chunk (or to the last entry in use), with
    /// their side values: empty when `index` is not in use.
    #[inline]
    pub(crate) fn run_from(&self, index: u32) -> (&[T], &[S]) {
        match self.run_bounds(index) {
            Some((chunk, range)) => {
                let chunk = &self.chunks[chunk];
                (&chunk.entries[range.clone()], &chunk.sides[range])
            }
            None => (&[], &[]),
        }
    }

    /// [`ChunkedSlab::run_from`] with the entries mutable.
    #[inline]
    pub(crate) fn run_from_mut(&mut self, index: u32) -> (&mut [T], &[S]) {
        match self.run_bounds(index) {
            Some((chunk, range)) => {
                let chunk = &mut self.chunks[chunk];
                (&mut chunk.entries[range.clone()], &chunk.sides[range])
            }
            None => (&mut [], &[]),
        }
    }

    /// The chunk of entry `index` and the range within it from `index` to the chunk's end (or
    /// to the last entry in use); `None` when `index` is not in use.
    #[inline]
    fn run_bounds(&self, index: u32) -> Option<(usize, std::ops::Range<usize>)> {
        let index = index as usize;
        if index >= self.len {
            return None;
        }
        let start = index & (CHUNK - 1);
        let end = (self.len - (index - start)).min(CHUNK);
        Some((index >> CHUNK_BITS, start..end))
    }

    /// The entry at `index`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, index: u32) -> &mut T {
        let index = index as usize;
        &mut self.chunks[index >> CHUNK_BITS].entries[index & (CHUNK - 1)]
    }

    /// Overwrites the entry at `index` (in use, or on the free list) and its side value.
    #[inline]
    pub(crate) fn set(&mut self, index: u32, value: T, side: S) {
        let index = index as usize;
        let chunk = &mut self.chunks[index >> CHUNK_BITS];
        chunk.entries[index & (CHUNK - 1)] = value;
        chunk.sides[index & (CHUNK - 1)] = side;
    }

    /// The side value of the entry at `index`.
    #[inline]
    pub(crate) fn side(&self, index: u32) -> S {
        let index = index as usize;
        self.chunks[index >> CHUNK_BITS].sides[index & (CHUNK - 1)]
    }

    /// The side value of the entry at `index`, mutably.
    #[cfg(test)]
    pub(crate) fn side_mut(&mut self, index: u32) -> &mut S {
        let index = index as usize;
        &mut self.chunks[index >> CHUNK_BITS].sides[index & (CHUNK - 1)]
    }

    /// Every entry in use with its index.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.entries.iter())
            .take(self.len)
            .enumerate()
            .map(|(index, entry)| (index as u32, entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_survive_growth_and_pops_release_chunks() {
        let mut slab = ChunkedSlab::<u64>::default();
        for value in 0..(3 * CHUNK as u64 + 5) {
            assert_eq!(slab.push(value * 2) as u64, value);
        }
        assert_eq!(*slab.get(7), 14);
        assert_eq!(
            *slab.get((2 * CHUNK + 1) as u32),
            (2 * CHUNK as u64 + 1) * 2
        );
        *slab.get_mut(7) = 1;
        assert_eq!(slab.iter().nth(7), Some((7, &1)));
        assert_eq!(slab.iter().count(), slab.len());
        for _ in 0..(2 * CHUNK) {
            slab.pop();
        }
        assert_eq!(slab.len(), CHUNK + 5);
        assert!(slab.chunks.len() <= 3);
    }

    #[test]
    fn side_values_stay_with_their_entries_across_chunks() {
        let mut slab = ChunkedSlab::<u32, u64>::default();
        for value in 0..(2 * CHUNK as u32 + 3) {
            let index = slab.push_with_side(value, u64::from(value) << 32);
            assert_eq!(index, value);
        }
        for index in [0, 1, CHUNK as u32 - 1, CHUNK as u32, 2 * CHUNK as u32 + 2] {
            assert_eq!(*slab.get(index), index);
            assert_eq!(slab.side(index), u64::from(index) << 32);
        }
        *slab.side_mut(CHUNK as u32) = 9;
        assert_eq!(slab.side(CHUNK as u32), 9);
        assert_eq!(
            *slab.get(CHUNK as u32),
            CHUNK as u32,
            "the entry beside it is untouched"
        );
        assert_eq!(slab.side(CHUNK as u32 + 1), (CHUNK as u64 + 1) << 32);
        assert_eq!(slab.push(5), 2 * CHUNK as u32 + 3);
        assert_eq!(
            slab.side(2 * CHUNK as u32 + 3),
            0,
            "push leaves the default side value"
        );
    }

    #[test]
    fn a_run_ends_at_its_chunk_or_at_the_last_entry_in_use() {
        let mut slab = ChunkedSlab::<u32, u64>::default();
        let len = 2 * CHUNK as u32 + 10;
        for value in 0..len {
            slab.push_with_side(value, u64::from(value) + 100);
        }
        let chunk = CHUNK as u32;
        for (from, expected_len) in [
            (0, CHUNK),
            (chunk - 1, 1),
            (chunk, CHUNK),
            (chunk + 7, CHUNK - 7),
            (2 * chunk, 10),
            (len - 1, 1),
            (len, 0),
            (u32::MAX, 0),
        ] {
            let (entries, sides) = slab.run_from(from);
            assert_eq!(
                (entries.len(), sides.len()),
                (expected_len, expected_len),
                "{from}"
            );
            for (offset, (entry, side)) in entries.iter().zip(sides).enumerate() {
                let index = from + offset as u32;
                assert_eq!((*entry, *side), (index, u64::from(index) + 100), "{from}");
            }
        }
    }
}
