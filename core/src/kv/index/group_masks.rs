//! The holder masks of worker slots 64 and up: for each slot group past the first (slots
//! 64..127 are group 1, and so on), one 64-bit mask per slab entry.
//!
//! Enters: a membership added or dropped (slab index, group, bit). Leaves: a block's mask in a
//! group, whether any group past the first holds it, and the blocks a slot holds.
//!
//! The masks are dense arrays indexed by slab index, not a map keyed by (block, group): the
//! overlap pass reads the masks of a prompt's blocks one after another, and the blocks of a
//! chain sit in consecutive slab entries, so their masks sit side by side here too. An array
//! is cut in chunks of [`CHUNK`] entries (32 KiB), each allocated when a block in its range
//! first gets a holder in the group, so a group whose slots hold few blocks costs little. A
//! chunk stays allocated once made (its masks are zero again when its blocks are dropped).

use crate::kv::block_slab::CHUNK_BITS;

/// Masks per chunk: as many as slab entries per slab chunk, so that a run of slab entries
/// within one chunk finds its masks within one chunk too.
const CHUNK: usize = 1 << CHUNK_BITS;

/// The masks of slot groups 1 and up (see the module documentation).
#[derive(Default)]
pub(super) struct GroupMasks {
    /// Group `g`'s chunks at position `g - 1`; a chunk is `None` until one of its masks is set.
    groups: Vec<Vec<Option<Box<[u64]>>>>,
    /// Masks that are not 0, so that an index whose higher slots hold nothing says so at once.
    nonzero: usize,
}

impl GroupMasks {
    /// The mask of `block` in `group` (1 and up): 0 when no slot of the group holds it.
    #[inline]
    pub(super) fn get(&self, block: u32, group: u32) -> u64 {
        self.chunk_of(block, group)
            .map_or(0, |masks| masks[block as usize & (CHUNK - 1)])
    }

    /// The chunk of `group`'s masks (1 and up) that holds `block`'s, if it was ever made.
    #[inline]
    fn chunk_of(&self, block: u32, group: u32) -> Option<&[u64]> {
        let chunks = self.groups.get((group as usize).checked_sub(1)?)?;
        chunks.get(block as usize >> CHUNK_BITS)?.as_deref()
    }

    /// The masks in `group` (1 and up) from `block` to the end of its chunk; `None` when no
    /// block of that chunk ever had a holder in the group (all its masks are 0).
    #[inline]
    pub(super) fn run_from(&self, block: u32, group: u32) -> Option<&[u64]> {
        Some(&self.chunk_of(block, group)?[block as usize & (CHUNK - 1)..])
    }

    /// Sets `bit` in the mask of `block` in `group` (1 and up).
    pub(super) fn insert(&mut self, block: u32, group: u32, bit: u64) {
        debug_assert!(group >= 1, "group 0's masks live in the slab entries");
        let at = group as usize - 1;
        if self.groups.len() <= at {
            self.groups.resize_with(at + 1, Vec::new);
        }
        let chunks = &mut self.groups[at];
        let chunk = block as usize >> CHUNK_BITS;
        if chunks.len() <= chunk {
            chunks.resize_with(chunk + 1, || None);
        }
        let masks = chunks[chunk].get_or_insert_with(|| vec![0; CHUNK].into_boxed_slice());
        let mask = &mut masks[block as usize & (CHUNK - 1)];
        if *mask == 0 {
            self.nonzero += 1;
        }
        *mask |= bit;
    }

    /// Clears `bit` in the mask of `block` in `group` (1 and up).
    pub(super) fn remove(&mut self, block: u32, group: u32, bit: u64) {
        let Some(Some(masks)) = (group as usize)
            .checked_sub(1)
            .and_then(|at| self.groups.get_mut(at))
            .and_then(|chunks| chunks.get_mut(block as usize >> CHUNK_BITS))
        else {
            return;
        };
        let mask = &mut masks[block as usize & (CHUNK - 1)];
        if *mask & bit != 0 {
            *mask &= !bit;
            if *mask == 0 {
                self.nonzero -= 1;
            }
        }
    }

    /// Whether any slot of group 1 and up holds `block`.
    pub(super) fn holds_any(&self, block: u32) -> bool {
        self.nonzero > 0 && (1..=self.groups.len()).any(|group| self.get(block, group as u32) != 0)
    }

    /// The blocks whose mask in `group` (1 and up) has `bit`, ascending.
    pub(super) fn blocks_with(&self, group: u32, bit: u64) -> Vec<u32> {
        let Some(chunks) = (group as usize)
            .checked_sub(1)
            .and_then(|at| self.groups.get(at))
        else {
            return Vec::new();
        };
        let mut blocks = Vec::new();
        for (chunk, masks) in chunks.iter().enumerate() {
            let Some(masks) = masks else {
                continue;
            };
            let base = (chunk << CHUNK_BITS) as u32;
            blocks.extend(
                masks
                    .iter()
                    .enumerate()
                    .filter(|(_, mask)| **mask & bit != 0)
                    .map(|(offset, _)| base + offset as u32),
            );
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_kept_per_block_and_group_across_chunks() {
        let mut masks = GroupMasks::default();
        assert_eq!(masks.get(7, 1), 0);
        assert!(!masks.holds_any(7));
        let far = 3 * CHUNK as u32 + 5;
        masks.insert(7, 1, 0b01);
        masks.insert(7, 1, 0b10);
        masks.insert(far, 2, 0b100);
        assert_eq!(
            (masks.get(7, 1), masks.get(7, 2), masks.get(far, 2)),
            (0b11, 0, 0b100)
        );
        assert_eq!(
            masks.get(far, 1),
            0,
            "a chunk of another group is not shared"
        );
        assert_eq!(masks.get(7, 0), 0, "group 0 is not kept here");
        assert!(masks.holds_any(7) && masks.holds_any(far) && !masks.holds_any(8));
        assert_eq!(masks.blocks_with(1, 0b10), [7]);
        assert_eq!(masks.blocks_with(2, 0b100), [far]);
        assert_eq!(masks.blocks_with(3, 0b1), Vec::<u32>::new());

        masks.remove(7, 1, 0b01);
        assert_eq!(masks.get(7, 1), 0b10);
        masks.remove(7, 1, 0b10);
        masks.remove(7, 1, 0b10);
        masks.remove(far, 5, 0b1);
        assert!(!masks.holds_any(7));
        assert_eq!(masks.nonzero, 1, "only `far` still has a holder");
        masks.remove(far, 2, 0b100);
        assert_eq!(masks.nonzero, 0);
        assert!(!masks.holds_any(far));
    }
}
