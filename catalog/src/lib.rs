//! The built-in policies. Linking this crate registers them.
