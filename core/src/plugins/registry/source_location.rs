//! Where a policy was registered, for messages about duplicates and bad names.

use std::fmt;
use std::panic::Location;

/// Where a policy was registered: its crate (unknown for manual registrations) and `file:line`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLocation {
    /// The crate that registered the policy, when known.
    pub crate_name: Option<String>,
    /// The source file.
    pub file: String,
    /// The source line.
    pub line: u32,
}

impl SourceLocation {
    pub(super) fn caller(location: &Location<'_>) -> Self {
        Self {
            crate_name: None,
            file: location.file().to_owned(),
            line: location.line(),
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.crate_name {
            Some(krate) => write!(f, "crate `{krate}` at {}:{}", self.file, self.line),
            None => write!(f, "a manual registration at {}:{}", self.file, self.line),
        }
    }
}
