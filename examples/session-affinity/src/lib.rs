//! An example catalog: the `session-affinity` worker-selection policy.
//!
//! It keeps each session on the worker that served its previous request — where the session's
//! KV cache already is — until that worker gets too busy, and otherwise picks the least-loaded
//! worker. Linking the crate registers the policy; a router build that names nothing from it
//! links it with `use session_affinity as _;`. Configure it per role:
//!
//! ```yaml
//! worker_selection:
//!   decode:
//!     type: session-affinity
//!     parameters: {max_active_blocks: 2048, max_sessions: 100000}
//! ```

pub mod session_affinity;
pub mod session_table;

pub use session_affinity::{SessionAffinity, SessionAffinityConfig, SessionAffinityError};
pub use session_table::SessionTable;
