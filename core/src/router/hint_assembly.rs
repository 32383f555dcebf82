//! Hint assembly: run a role's hint policies in order, each isolated from the others' errors and
//! panics, then number their actions `a1`, `a2`, … and cap them, never dropping the action that
//! carries the committed KV copy.

use super::MAX_HINT_ACTIONS;
use crate::identity::Role;
use crate::metrics::PolicyFailureCounter;
use crate::plugins::{Commitments, HintAction, HintContext, PolicyError};
use crate::setup::{RoleHint, RouterSetup};
use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A hint policy a role runs, with the counter of its failures.
pub(crate) struct CountedHint {
    /// The policy and its place in the role.
    pub(crate) hint: RoleHint,
    /// Its errors and panics so far (shared with the set that replaced this one's, when the
    /// policy kept its place).
    pub(crate) failures: Arc<PolicyFailureCounter>,
}

impl CountedHint {
    /// `hint` as `role` runs it, counting on `previous`'s counter when the role ran a policy of
    /// the same type and label before, else on a new one.
    fn new(role: Role, hint: &RoleHint, previous: Option<&[CountedHint]>) -> Self {
        let kept = previous.into_iter().flatten().find(|counted| {
            counted.hint.policy_type == hint.policy_type && counted.hint.label() == hint.label()
        });
        let failures = match kept {
            Some(counted) => Arc::clone(&counted.failures),
            None => Arc::new(PolicyFailureCounter::new(
                role.to_string(),
                hint.policy_type.clone(),
                hint.label().to_owned(),
            )),
        };
        Self {
            failures,
            hint: hint.clone(),
        }
    }
}

/// Each configured role's hint policies, in the order they run, with their failure counters;
/// those `previous` also ran keep theirs.
pub(crate) fn counted_hints(
    setup: &RouterSetup,
    previous: Option<&BTreeMap<Role, Vec<CountedHint>>>,
) -> BTreeMap<Role, Vec<CountedHint>> {
    setup
        .roles
        .iter()
        .map(|(role, policies)| {
            let before = previous
                .and_then(|previous| previous.get(role))
                .map(Vec::as_slice);
            (*role, counted_list(*role, &policies.hints, before))
        })
        .collect()
}

/// `hints` as `role` runs them, with their failure counters; those `previous` also ran keep
/// theirs.
pub(crate) fn counted_list(
    role: Role,
    hints: &[RoleHint],
    previous: Option<&[CountedHint]>,
) -> Vec<CountedHint> {
    hints
        .iter()
        .map(|hint| CountedHint::new(role, hint, previous))
        .collect()
}

/// The actions of one booking's hint policies, after isolation and the cap.
#[derive(Debug, Default)]
pub(crate) struct AssembledActions {
    /// The kept actions, in order.
    pub(crate) actions: Vec<HintAction>,
    /// Hint policies run.
    pub(crate) policies_run: usize,
    /// Actions dropped by the cap.
    pub(crate) dropped: usize,
    /// Policies that failed (error or panic).
    pub(crate) failures: usize,
}

/// Runs `hints` for `context` in order, counting each one's failures on it.
pub(crate) fn assemble(hints: &[CountedHint], context: &HintContext<'_>) -> AssembledActions {
    let mut assembled = AssembledActions::default();
    let mut all = Vec::new();
    // The committed copy's action: the first action of the first policy that sends KV copies.
    let mut protected: Option<usize> = None;
    let mut copy_sender_seen = false;
    for CountedHint { hint, failures } in hints {
        assembled.policies_run += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            hint.constructed.instance.build_hints(context)
        }))
        .map(|result| result.and_then(object_payloads));
        let sends_copy = hint.constructed.commitments.contains(Commitments::KV_COPY);
        let actions = match outcome {
            Ok(Ok(actions)) => actions,
            Ok(Err(error)) => {
                tracing::warn!(
                    role = %context.role(),
                    policy_type = %hint.policy_type,
                    name = hint.label(),
                    request_id = context.request_id(),
                    %error,
                    "hint policy failed; its actions are dropped"
                );
                failures.count_error();
                assembled.failures += 1;
                Vec::new()
            }
            Err(panic) => {
                tracing::error!(
                    role = %context.role(),
                    policy_type = %hint.policy_type,
                    name = hint.label(),
                    request_id = context.request_id(),
                    panic = panic_message(panic.as_ref()),
                    "hint policy panicked; its actions are dropped"
                );
                failures.count_panic();
                assembled.failures += 1;
                Vec::new()
            }
        };
        if sends_copy && !copy_sender_seen {
            copy_sender_seen = true;
            if context.committed_kv_copy().is_some() && !actions.is_empty() {
                protected = Some(all.len());
            }
        }
        // The first policy's actions become the list (one policy is the common case).
        if all.is_empty() {
            all = actions;
        } else {
            all.extend(actions);
        }
    }
    let (kept, dropped) = cap(all, protected, MAX_HINT_ACTIONS);
    assembled.actions = kept;
    assembled.dropped = dropped;
    assembled
}

/// The actions, if every payload is a JSON object (upstream's envelope holds payloads as maps;
/// a worker could not read anything else); else the policy's error.
fn object_payloads(actions: Vec<HintAction>) -> Result<Vec<HintAction>, PolicyError> {
    match actions
        .iter()
        .position(|action| !action.payload.is_object())
    {
        None => Ok(actions),
        Some(index) => {
            let action = &actions[index];
            let kind = match &action.payload {
                serde_json::Value::Null => "null",
                serde_json::Value::Bool(_) => "boolean",
                serde_json::Value::Number(_) => "number",
                serde_json::Value::String(_) => "string",
                serde_json::Value::Array(_) => "array",
                serde_json::Value::Object(_) => "object",
            };
            Err(PolicyError::new(format!(
                "action {} (`{}@{}`) has a {kind} payload; an action's payload must be a JSON object",
                index + 1,
                action.action_type,
                action.action_version
            )))
        }
    }
}

/// Keeps at most `limit` actions, dropping from the end but never the one at `protected`.
pub(crate) fn cap(
    actions: Vec<HintAction>,
    protected: Option<usize>,
    limit: usize,
) -> (Vec<HintAction>, usize) {
    let total = actions.len();
    if total <= limit {
        return (actions, 0);
    }
    let others_allowed = limit.saturating_sub(usize::from(protected.is_some() && limit > 0));
    let mut others = 0;
    let kept: Vec<HintAction> = actions
        .into_iter()
        .enumerate()
        .filter(|(position, _)| {
            if Some(*position) == protected && limit > 0 {
                return true;
            }
            others += 1;
            others <= others_allowed
        })
        .map(|(_, action)| action)
        .collect();
    let dropped = total - kept.len();
    (kept, dropped)
}

/// The message of a panic payload, when it is a string.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        String::from("(non-string panic payload)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(n: usize) -> Vec<HintAction> {
        (0..n)
            .map(|i| HintAction::new("t", "1.0", serde_json::json!(i)))
            .collect()
    }

    fn ids(actions: &[HintAction]) -> Vec<u64> {
        actions.iter().filter_map(|a| a.payload.as_u64()).collect()
    }

    #[test]
    fn under_the_cap_nothing_is_dropped() {
        let (kept, dropped) = cap(actions(32), None, 32);
        assert_eq!((kept.len(), dropped), (32, 0));
    }

    #[test]
    fn over_the_cap_the_end_is_dropped() {
        let (kept, dropped) = cap(actions(40), None, 32);
        assert_eq!(ids(&kept), (0..32).collect::<Vec<_>>());
        assert_eq!(dropped, 8);
    }

    #[test]
    fn the_protected_action_survives_past_the_cap() {
        let (kept, dropped) = cap(actions(40), Some(35), 32);
        let mut expected: Vec<u64> = (0..31).collect();
        expected.push(35);
        assert_eq!(ids(&kept), expected);
        assert_eq!(dropped, 8);
        let (kept, _) = cap(actions(40), Some(3), 32);
        assert_eq!(ids(&kept), (0..32).collect::<Vec<_>>());
    }
}
