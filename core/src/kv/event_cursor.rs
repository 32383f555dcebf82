//! Where one worker rank's numbered event stream stands: the last event applied, and whether
//! events were lost and await a replay.
//!
//! Rules (upstream's cursor, plus engine restarts):
//! - the next event is `last + 1` (0 for a worker that has sent nothing yet);
//! - an event at or before `last` is a duplicate, except `0`: the engine restarted, so its cache
//!   is empty and its numbering starts over (a duplicate of event 0 while `last` is 0 re-applies
//!   it onto an empty cache, which changes nothing);
//! - an event past the next one means events were lost: the worker awaits the replay of the
//!   range from the next id, is not trusted meanwhile, and applies the replayed events in order
//!   until it has caught up with the newest id it saw; a `cleared` past a gap makes the lost
//!   events moot;
//! - after a replay that cannot be had, the caller resets the worker: its next event, whatever
//!   its id, starts the stream again.

/// One worker rank's position in its event stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EventCursor {
    last: Option<u64>,
    /// The newest id seen while events are missing; `None` when the stream is whole.
    awaiting_until: Option<u64>,
    /// The next event starts the stream, whatever its id.
    resync: bool,
}

/// What to do with an event, by its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Apply it; `recovered` when it closed the missing range.
    Apply {
        /// The worker was awaiting a replay and no longer is.
        recovered: bool,
    },
    /// The engine restarted: clear the worker, then apply it.
    Restart,
    /// Already applied.
    Duplicate,
    /// It revealed lost events: not applied, the worker now awaits a replay.
    Gap,
    /// The worker awaits an earlier event: not applied.
    Waiting,
}

impl EventCursor {
    /// The id of the last event applied.
    pub(crate) fn last(&self) -> Option<u64> {
        self.last
    }

    /// The first event id the worker must replay, if it awaits one.
    pub(crate) fn replay_from(&self) -> Option<u64> {
        self.awaiting_until.map(|_| self.next())
    }

    /// Whether events are missing.
    pub(crate) fn awaiting(&self) -> bool {
        self.awaiting_until.is_some()
    }

    /// Starts the stream over at the next event, whatever its id.
    pub(crate) fn resync(&mut self) {
        *self = EventCursor {
            resync: true,
            ..EventCursor::default()
        };
    }

    /// Continues a stream whose events up to `last` are already in the index (restored from a
    /// checkpoint that recorded the position): the next event expected is `last + 1`, and
    /// events at or before `last` are duplicates.
    pub(crate) fn resume_after(&mut self, last: u64) {
        *self = EventCursor {
            last: Some(last),
            ..EventCursor::default()
        };
    }

    /// Decides about event `id` (`cleared` when it is a `cleared`) and moves the cursor.
    pub(crate) fn admit(&mut self, id: u64, cleared: bool) -> Admission {
        if self.resync {
            *self = EventCursor {
                last: Some(id),
                ..EventCursor::default()
            };
            return Admission::Apply { recovered: false };
        }
        if id == 0 && self.last.is_some() {
            *self = EventCursor {
                last: Some(0),
                ..EventCursor::default()
            };
            return Admission::Restart;
        }
        if self.last.is_some_and(|last| id <= last) {
            return Admission::Duplicate;
        }
        if id == self.next() || cleared {
            // A `cleared` resets everything, so whatever was lost before it is moot.
            let was_awaiting = self.awaiting();
            self.last = Some(id);
            if self.awaiting_until.is_some_and(|until| id >= until) {
                self.awaiting_until = None;
            }
            return Admission::Apply {
                recovered: was_awaiting && !self.awaiting(),
            };
        }
        match &mut self.awaiting_until {
            Some(until) => {
                *until = (*until).max(id);
                Admission::Waiting
            }
            None => {
                self.awaiting_until = Some(id);
                Admission::Gap
            }
        }
    }

    fn next(&self) -> u64 {
        self.last.map_or(0, |last| last.saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ids: &[(u64, bool)]) -> (EventCursor, Vec<Admission>) {
        let mut cursor = EventCursor::default();
        let admissions = ids.iter().map(|(id, c)| cursor.admit(*id, *c)).collect();
        (cursor, admissions)
    }

    #[test]
    fn a_resumed_cursor_rejects_what_the_checkpoint_holds_and_takes_the_next() {
        let mut cursor = EventCursor::default();
        cursor.admit(3, false);
        cursor.resume_after(41);
        assert_eq!(cursor.admit(41, false), Admission::Duplicate);
        assert_eq!(cursor.admit(7, false), Admission::Duplicate);
        assert_eq!(
            cursor.admit(42, false),
            Admission::Apply { recovered: false }
        );
        assert_eq!(cursor.admit(44, false), Admission::Gap);
    }

    #[test]
    fn contiguous_duplicate_and_gap() {
        let apply = Admission::Apply { recovered: false };
        let (cursor, admissions) =
            run(&[(0, false), (1, false), (1, false), (4, false), (5, false)]);
        assert_eq!(
            admissions,
            [
                apply,
                apply,
                Admission::Duplicate,
                Admission::Gap,
                Admission::Waiting
            ]
        );
        assert_eq!(cursor.replay_from(), Some(2));
        let mut cursor = cursor;
        assert_eq!(cursor.admit(2, false), apply);
        assert_eq!(cursor.admit(3, false), apply);
        assert_eq!(cursor.admit(4, false), apply);
        assert_eq!(cursor.admit(5, false), Admission::Apply { recovered: true });
        assert_eq!(cursor.replay_from(), None);
        assert_eq!(cursor.admit(6, false), apply);
    }

    #[test]
    fn a_first_event_past_zero_asks_for_the_stream_from_zero() {
        let (cursor, admissions) = run(&[(3, false)]);
        assert_eq!(admissions, [Admission::Gap]);
        assert_eq!(cursor.replay_from(), Some(0));
        let (cursor, admissions) = run(&[(3, true)]);
        assert_eq!(admissions, [Admission::Apply { recovered: false }]);
        assert_eq!(cursor.last(), Some(3));
    }

    #[test]
    fn restart_and_cleared_end_a_wait() {
        let (mut cursor, _) = run(&[(0, false), (1, false), (5, false)]);
        assert_eq!(cursor.admit(0, false), Admission::Restart);
        assert!(!cursor.awaiting());
        let (mut cursor, _) = run(&[(0, false), (1, false), (5, false), (8, false)]);
        assert_eq!(cursor.admit(6, true), Admission::Apply { recovered: false });
        assert_eq!(cursor.replay_from(), Some(7));
        assert_eq!(cursor.admit(9, true), Admission::Apply { recovered: true });
        assert_eq!(cursor.admit(0, false), Admission::Restart);
        assert_eq!(cursor.admit(0, false), Admission::Restart);
        assert_eq!(
            cursor.admit(1, false),
            Admission::Apply { recovered: false }
        );
        assert_eq!(cursor.admit(1, false), Admission::Duplicate);
    }

    #[test]
    fn resync_takes_any_next_id() {
        let (mut cursor, _) = run(&[(0, false), (9, false)]);
        cursor.resync();
        assert_eq!(cursor.replay_from(), None);
        assert_eq!(
            cursor.admit(12, false),
            Admission::Apply { recovered: false }
        );
        assert_eq!(
            cursor.admit(13, false),
            Admission::Apply { recovered: false }
        );
    }
}
