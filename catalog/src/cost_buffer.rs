//! A per-thread buffer for a booking's costs, so the selection policies allocate none: the
//! policies are shared by every booking thread, so the buffer cannot live in them.

use std::cell::Cell;

/// Buffers larger than this many costs are dropped after use rather than kept.
const KEEP_AT_MOST: usize = 1 << 16;

thread_local! {
    static COSTS: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` with this thread's cost buffer (empty or holding the last use's costs: clear it).
/// A nested call on the same thread gets a fresh buffer.
pub(crate) fn with_cost_buffer<R>(f: impl FnOnce(&mut Vec<f64>) -> R) -> R {
    let mut buffer = COSTS.try_with(Cell::take).unwrap_or_default();
    let result = f(&mut buffer);
    if buffer.capacity() <= KEEP_AT_MOST {
        let _ = COSTS.try_with(|cell| cell.set(buffer));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_is_reused_and_nested_calls_get_their_own() {
        let first = with_cost_buffer(|costs| {
            costs.clear();
            costs.extend([1.0, 2.0]);
            with_cost_buffer(|inner| {
                inner.clear();
                inner.push(9.0);
                assert_eq!(inner.as_slice(), [9.0]);
            });
            costs.as_ptr()
        });
        let again = with_cost_buffer(|costs| {
            // The outer buffer went back last, so it is the one kept.
            assert_eq!(costs.as_slice(), [1.0, 2.0]);
            costs.as_ptr()
        });
        assert_eq!(first, again);
    }
}
