//! Where an entry sits in the configuration file: a 1-based line and column.

use std::fmt;

/// A 1-based line and column in the configuration file; `0:0` when unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The 1-based line (0: unknown).
    pub line: u32,
    /// The 1-based column, in characters (0: unknown).
    pub column: u32,
}

impl Position {
    /// No known position (file-level problems such as an unreadable file).
    pub const UNKNOWN: Position = Position { line: 0, column: 0 };

    /// The position at `line`, `column` (both 1-based).
    pub const fn new(line: u32, column: u32) -> Self {
        Self { line, column }
    }

    /// Whether the position points into the file.
    pub const fn is_known(self) -> bool {
        self.line > 0
    }

    /// The position of a YAML node as the parser reported it.
    pub fn of(location: &serde_saphyr::Location) -> Self {
        let clamp = |value: u64| u32::try_from(value).unwrap_or(u32::MAX);
        Self::new(clamp(location.line()), clamp(location.column()))
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}
