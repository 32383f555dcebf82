//! The `session-affinity` policy and its parameters.

use crate::session_table::SessionTable;
use dynamo_kv_router::plugins::prelude::*;
use std::sync::{Mutex, PoisonError};

/// Default of `max_active_blocks`.
pub const DEFAULT_MAX_ACTIVE_BLOCKS: u64 = 4_096;
/// Default of `max_sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 65_536;

/// The parameters of `session-affinity`; every field is optional.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(crate = "dynamo_kv_router::schemars")]
pub struct SessionAffinityConfig {
    /// A session stays on its worker while the worker has at most this many active KV blocks
    /// (default 4096).
    pub max_active_blocks: u64,
    /// Sessions remembered per router; the one remembered longest is forgotten first (default
    /// 65536, at least 1).
    #[schemars(range(min = 1))]
    pub max_sessions: usize,
}

impl Default for SessionAffinityConfig {
    fn default() -> Self {
        Self {
            max_active_blocks: DEFAULT_MAX_ACTIVE_BLOCKS,
            max_sessions: DEFAULT_MAX_SESSIONS,
        }
    }
}

/// Parameters `session-affinity` cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionAffinityError {
    /// `max_sessions` is 0, so no session could ever stick.
    #[error(
        "`max_sessions` must be at least 1, got 0; use a bound such as 65536 (the default) or choose a least-loaded policy"
    )]
    NoSessions,
}

/// Keeps each session on the worker that served its previous request while that worker has at
/// most `max_active_blocks` active KV blocks; otherwise, and for requests without a session id,
/// books the least-loaded worker (fewest active blocks, then fewest active requests, then the
/// smaller worker id). Commits nothing.
///
/// The session's worker is remembered per role when it is chosen. A session whose worker left
/// the role or got too busy moves to the least-loaded worker and sticks there. At most
/// `max_sessions` sessions are remembered; beyond that the one remembered longest is forgotten.
///
/// Parameters: `max_active_blocks` (default 4096), `max_sessions` (default 65536).
#[worker_selection_policy("session-affinity", parameters = SessionAffinityConfig)]
#[derive(Debug)]
pub struct SessionAffinity {
    max_active_blocks: u64,
    sessions: Mutex<SessionTable>,
}

impl TryFrom<SessionAffinityConfig> for SessionAffinity {
    type Error = SessionAffinityError;

    fn try_from(config: SessionAffinityConfig) -> Result<Self, Self::Error> {
        if config.max_sessions == 0 {
            return Err(SessionAffinityError::NoSessions);
        }
        Ok(Self {
            max_active_blocks: config.max_active_blocks,
            sessions: Mutex::new(SessionTable::new(config.max_sessions)),
        })
    }
}

impl SessionAffinity {
    fn sessions(&self) -> std::sync::MutexGuard<'_, SessionTable> {
        // The table stays consistent even if a holder panicked: every update is one insert.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WorkerSelectionPolicy for SessionAffinity {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let candidates = context.candidates();
        let request = context.request();
        let Some(session) = request.session.session_id.as_deref() else {
            return least_loaded(candidates).map(Selection::worker);
        };
        let mut sessions = self.sessions();
        let sticky = sessions.get(request.role, session).and_then(|worker| {
            candidates
                .iter()
                .find(|c| c.worker == worker && c.load.active_blocks <= self.max_active_blocks)
        });
        let worker = match sticky {
            Some(candidate) => candidate.worker,
            None => least_loaded(candidates)?,
        };
        sessions.record(request.role, session, worker);
        Ok(Selection::worker(worker))
    }
}

/// The candidate with the fewest active blocks, then active requests, then the smaller id.
fn least_loaded(candidates: &[Candidate]) -> Result<WorkerId, PolicyError> {
    candidates
        .iter()
        .min_by_key(|c| (c.load.active_blocks, c.load.active_requests, c.worker))
        .map(|c| c.worker)
        .ok_or_else(|| {
            PolicyError::new("no candidate workers to choose from; register a worker for the role")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynamo_kv_router::plugins::request_view::NoBlockLookup;
    use dynamo_kv_router::plugins::{PolicyParameters, WorkerLoad};

    fn policy(max_active_blocks: u64, max_sessions: usize) -> SessionAffinity {
        SessionAffinity::try_from(SessionAffinityConfig {
            max_active_blocks,
            max_sessions,
        })
        .unwrap()
    }

    fn candidate(id: u64, active_blocks: u64, active_requests: u64) -> Candidate {
        Candidate {
            worker: WorkerId::new(id, 0),
            cached_blocks: 0,
            load: WorkerLoad {
                active_prefill_tokens: 0,
                active_blocks,
                active_requests,
                additional_active_blocks: 0,
            },
            router_hint: false,
            source_endpoint: None,
        }
    }

    fn book(
        policy: &SessionAffinity,
        role: Role,
        session: Option<&str>,
        candidates: &[Candidate],
    ) -> u64 {
        let session = SessionContext {
            session_id: session.map(str::to_owned),
            ..SessionContext::default()
        };
        let view = RequestView {
            request_id: "r",
            role,
            prompt_tokens: 64,
            block_size: 16,
            session: &session,
            sequence_hashes: &[],
            candidates,
            blocks: &NoBlockLookup,
        };
        let selection = policy.select(&WorkerSelectionContext::new(view)).unwrap();
        assert_eq!(selection.kv_copy, None);
        selection.worker.worker_id
    }

    #[test]
    fn a_session_sticks_to_its_worker_while_it_is_not_too_busy() {
        let policy = policy(10, 100);
        let idle = [candidate(1, 5, 1), candidate(2, 0, 0)];
        assert_eq!(book(&policy, Role::Decode, Some("s"), &idle), 2);
        // w2 is now busier than w1 but under the threshold: the session stays.
        let busier = [candidate(1, 5, 1), candidate(2, 10, 3)];
        assert_eq!(book(&policy, Role::Decode, Some("s"), &busier), 2);
        // Past the threshold it moves to the least-loaded worker and sticks there.
        let overloaded = [candidate(1, 5, 1), candidate(2, 11, 3)];
        assert_eq!(book(&policy, Role::Decode, Some("s"), &overloaded), 1);
        let recovered = [candidate(1, 7, 2), candidate(2, 0, 0)];
        assert_eq!(book(&policy, Role::Decode, Some("s"), &recovered), 1);
    }

    #[test]
    fn without_a_session_it_is_least_loaded() {
        let policy = policy(10, 100);
        let cluster = [candidate(3, 4, 1), candidate(1, 4, 2), candidate(2, 4, 1)];
        // Equal blocks: fewer requests, then the smaller id.
        assert_eq!(book(&policy, Role::Decode, None, &cluster), 2);
        assert!(policy.sessions().is_empty());
    }

    #[test]
    fn a_departed_worker_releases_its_sessions() {
        let policy = policy(10, 100);
        assert_eq!(
            book(
                &policy,
                Role::Decode,
                Some("s"),
                &[candidate(1, 0, 0), candidate(2, 1, 0)]
            ),
            1
        );
        assert_eq!(
            book(
                &policy,
                Role::Decode,
                Some("s"),
                &[candidate(2, 1, 0), candidate(3, 2, 0)]
            ),
            2
        );
    }

    #[test]
    fn roles_keep_separate_affinities() {
        let policy = policy(10, 100);
        assert_eq!(
            book(
                &policy,
                Role::Prefill,
                Some("s"),
                &[candidate(1, 0, 0), candidate(2, 1, 0)]
            ),
            1
        );
        assert_eq!(
            book(
                &policy,
                Role::Decode,
                Some("s"),
                &[candidate(1, 3, 0), candidate(2, 1, 0)]
            ),
            2
        );
        assert_eq!(
            book(
                &policy,
                Role::Prefill,
                Some("s"),
                &[candidate(1, 3, 0), candidate(2, 1, 0)]
            ),
            1
        );
    }

    #[test]
    fn the_session_table_is_bounded() {
        let policy = policy(10, 2);
        let cluster = [candidate(1, 0, 0), candidate(2, 0, 0)];
        for session in ["a", "b", "c"] {
            book(&policy, Role::Decode, Some(session), &cluster);
        }
        assert_eq!(policy.sessions().len(), 2);
    }

    #[test]
    fn parameters_are_parsed_and_validated() {
        let config: SessionAffinityConfig = PolicyParameters::empty().deserialize().unwrap();
        assert_eq!(config, SessionAffinityConfig::default());
        let error = SessionAffinity::try_from(SessionAffinityConfig {
            max_active_blocks: 1,
            max_sessions: 0,
        })
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("`max_sessions` must be at least 1")
        );
        let parameters = PolicyParameters::new(serde_json::json!({"max_active_block": 3}));
        let error = parameters
            .deserialize::<SessionAffinityConfig>()
            .unwrap_err();
        assert_eq!(error.path(), "max_active_block");
        let parameters = PolicyParameters::new(serde_json::json!({"max_active_blocks": -3}));
        let error = parameters
            .deserialize::<SessionAffinityConfig>()
            .unwrap_err();
        assert_eq!(error.path(), "max_active_blocks");
    }

    #[test]
    fn the_registered_provider_builds_it() {
        let parameters = PolicyParameters::new(serde_json::json!({"max_active_blocks": 3}));
        let constructor = dynamo_kv_router::__private::build_selection_via::<
            SessionAffinity,
            SessionAffinityConfig,
        >(parameters)
        .unwrap();
        let partition = Partition {
            role: Role::Decode,
            block_size: 16,
        };
        let built = constructor.construct(&partition).unwrap();
        assert_eq!(built.commitments(), Commitments::NONE);
        let error = dynamo_kv_router::__private::build_selection_via::<
            SessionAffinity,
            SessionAffinityConfig,
        >(PolicyParameters::new(
            serde_json::json!({"max_sessions": 0}),
        ))
        .err()
        .unwrap();
        assert!(error.to_string().contains("max_sessions"), "{error}");
    }
}
