//! The error a policy returns at run time (from `build_hints` or `select`).

use std::fmt;

/// A run-time failure of one policy for one booking.
///
/// Any error type converts into it with `?`, and [`PolicyError::new`] makes one from a message.
/// The router logs it with the policy's type and name, counts it, and drops only that policy's
/// actions.
pub struct PolicyError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl PolicyError {
    /// A policy error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into().into())
    }
}

impl<E> From<E> for PolicyError
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        Self(Box::new(error))
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}
