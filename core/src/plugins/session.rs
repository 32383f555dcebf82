//! The session context a caller attaches to a request.

use std::collections::BTreeMap;

/// The session a request belongs to, supplied by the caller: an optional session id and free-form
/// string attributes (for example the conversation's previous turn count).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionContext {
    /// The caller's session id, if the request belongs to one.
    pub session_id: Option<String>,
    /// Free-form attributes, sorted by key.
    pub attributes: BTreeMap<String, String>,
}

impl SessionContext {
    /// A context for the given session id with no attributes.
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: Some(session_id.into()),
            attributes: BTreeMap::new(),
        }
    }

    /// Adds an attribute, replacing any previous value for that key.
    pub fn with_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }

    /// The attribute stored under `key`.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}
