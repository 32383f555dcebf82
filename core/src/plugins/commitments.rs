//! What a policy promises beyond choosing a worker: for example, that the booked worker copies
//! KV blocks from a peer (`KV_COPY`).

use std::fmt;

/// A set of commitments a policy makes or carries out.
///
/// A worker-selection policy that may commit the booked worker to copy KV from a peer declares
/// [`Commitments::KV_COPY`]; a hint policy that sends such copies to the worker declares it too.
/// A role whose selection policy commits KV copies must run exactly one hint policy that sends them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Commitments(u8);

impl Commitments {
    /// No commitment.
    pub const NONE: Self = Self(0);
    /// The booked worker copies KV blocks from a peer (a committed [`KvCopy`](super::KvCopy)).
    pub const KV_COPY: Self = Self(1);

    const NAMES: [(Self, &'static str); 1] = [(Self::KV_COPY, "KV_COPY")];

    /// Whether every commitment in `other` is also in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether this set holds no commitment.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The commitments in either set.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The names of the commitments in this set, in declaration order.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, name)| *name)
            .collect()
    }
}

impl std::ops::BitOr for Commitments {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        self.union(other)
    }
}

impl fmt::Display for Commitments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        f.write_str(&self.names().join(" | "))
    }
}

impl fmt::Debug for Commitments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Commitments({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_empty_and_contained_everywhere() {
        assert!(Commitments::NONE.is_empty());
        assert!(Commitments::KV_COPY.contains(Commitments::NONE));
        assert!(!Commitments::NONE.contains(Commitments::KV_COPY));
    }

    #[test]
    fn display_names_each_flag() {
        assert_eq!(Commitments::NONE.to_string(), "NONE");
        assert_eq!(Commitments::KV_COPY.to_string(), "KV_COPY");
        assert_eq!(
            (Commitments::NONE | Commitments::KV_COPY).names(),
            ["KV_COPY"]
        );
    }
}
