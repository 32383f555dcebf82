//! A configuration value with the position where it was written, so that a check that fails
//! later (at startup, at a reload) names the file, line and column of the value at fault.

use super::position::Position;
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

/// A value and the position where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Located<T> {
    /// Where the value starts.
    pub position: Position,
    /// The value.
    pub value: T,
}

impl<T> Located<T> {
    fn from_spanned(spanned: Spanned<T>) -> Self {
        Self {
            position: Position::of(&spanned.referenced),
            value: spanned.value,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Located<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Spanned::<T>::deserialize(deserializer).map(Located::from_spanned)
    }
}
