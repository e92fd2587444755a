//! The requests sent to extensions and not answered yet, in the spirit
//! of lsp-server's `req_queue.rs`: each waits under a fresh id with its
//! extension and deadline, and leaves the table once: answered, expired,
//! or failed with its extension.

use super::action::Action;
use super::idmap::IdMap;
use crate::types::{CommandOutcome, HostError, Reply};
use std::time::{Duration, Instant};

/// Who waits for an extension's answer.
pub(super) enum Waiter {
    /// The embedder, for a command's answer.
    Command {
        name: String,
        reply: Reply<CommandOutcome>,
    },
    /// Tool pipeline run `job` (`super::jobs`), for the tool's result.
    Tool { job: u64 },
    /// Interception chain `chain`, for the answer of its guard at `pos`.
    Guard { chain: u64, pos: usize },
}

impl Waiter {
    /// The frame that answers the request.
    fn answer(&self) -> &'static str {
        match self {
            Waiter::Command { .. } => "command_response",
            Waiter::Tool { .. } => "tool_result",
            Waiter::Guard { .. } => "event_intercept_response",
        }
    }

    /// The one way an exchange fails: the embedder gets `error` (a reply
    /// queued in `actions`). A guard is handed back instead, for its
    /// chain to count it as unavailable, and a tool call for its
    /// pipeline run to end with `error`.
    pub(super) fn fail(self, error: HostError, actions: &mut Vec<Action>) -> Option<Owed> {
        match self {
            Waiter::Command { reply, .. } => {
                actions.push(Action::Reply(Box::new(move || reply(Err(error)))))
            }
            Waiter::Tool { job } => return Some(Owed::Tool(job, error)),
            Waiter::Guard { chain, pos } => return Some(Owed::Guard(chain, pos)),
        }
        None
    }
}

/// What a failed exchange leaves for the loop to settle.
pub(super) enum Owed {
    /// The guard at `pos` of chain `.0` counts as unavailable.
    Guard(u64, usize),
    /// Tool pipeline run `.0` ends with the error.
    Tool(u64, HostError),
}

struct Entry {
    ext: usize,
    deadline: Instant,
    /// The time it was given, for the timeout's message.
    limit: Duration,
    waiter: Waiter,
}

/// Requests in flight, by id.
#[derive(Default)]
pub(super) struct Pending {
    last_id: u64,
    entries: IdMap<String, Entry>,
    /// No deadline is earlier: the entries are scanned once it passes,
    /// not every loop iteration.
    earliest: Option<Instant>,
}

impl Pending {
    /// A fresh id for a request frame.
    pub(super) fn new_id(&mut self) -> String {
        self.last_id += 1;
        self.last_id.to_string()
    }

    /// The number the next id will carry.
    pub(super) fn upcoming(&self) -> u64 {
        self.last_id + 1
    }

    /// Registers request `id` sent to `ext` at `now`, due within `limit`.
    pub(super) fn register(
        &mut self,
        id: String,
        ext: usize,
        limit: Duration,
        waiter: Waiter,
        now: Instant,
    ) {
        let deadline = super::later::later(now, limit);
        self.earliest = Some(self.earliest.map_or(deadline, |e| e.min(deadline)));
        let entry = Entry {
            ext,
            deadline,
            limit,
            waiter,
        };
        self.entries.insert(id, entry);
    }

    /// Takes request `id` when extension `ext` owes it an `answer` frame;
    /// else leaves the table as it was and says why not.
    pub(super) fn take(&mut self, ext: usize, id: &str, answer: &str) -> Result<Waiter, String> {
        let unknown = || format!("id {id:?} is unknown, expired or already answered");
        // One lookup for the answer expected; a wrong one goes back
        // under the key it had (nothing allocated either way).
        let (key, e) = self.entries.remove_entry(id).ok_or_else(unknown)?;
        let wrong = if e.ext != ext {
            unknown()
        } else if e.waiter.answer() != answer {
            format!("id {id:?} expects a {}", e.waiter.answer())
        } else {
            return Ok(e.waiter);
        };
        self.entries.insert(key, e);
        Err(wrong)
    }

    /// Forgets request `id` without answering it: a guard asked again,
    /// or its chain decided.
    pub(super) fn cancel(&mut self, id: &str) {
        self.entries.remove(id);
    }

    /// Takes the requests whose deadline passed, with their id,
    /// extension and the time they were given.
    pub(super) fn expired(&mut self, now: Instant) -> Vec<(String, usize, Duration, Waiter)> {
        if self.earliest.is_none_or(|at| at > now) {
            return Vec::new();
        }
        let entries = std::mem::take(&mut self.entries).into_iter();
        let (due, kept): (IdMap<_, _>, _) = entries.partition(|(_, e)| e.deadline <= now);
        self.entries = kept;
        self.earliest = self.entries.values().map(|e| e.deadline).min();
        let due = due.into_iter();
        due.map(|(id, e)| (id, e.ext, e.limit, e.waiter)).collect()
    }

    /// Takes the guard answers extension `ext` owes, for their chains;
    /// with an `error`, also fails every command and tool call it owes.
    pub(super) fn fail_ext(
        &mut self,
        ext: usize,
        error: Option<&HostError>,
        actions: &mut Vec<Action>,
    ) -> Vec<Owed> {
        let owed = |e: &Entry| {
            e.ext == ext && (error.is_some() || matches!(e.waiter, Waiter::Guard { .. }))
        };
        let owed = self.take_where(owed);
        owed.filter_map(|e| match e.waiter {
            Waiter::Guard { chain, pos } => Some(Owed::Guard(chain, pos)),
            other => other.fail(error?.clone(), actions),
        })
        .collect()
    }

    /// The number of requests in flight (shown by `list`).
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Takes every request.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Waiter> + '_ {
        self.entries.drain().map(|(_, e)| e.waiter)
    }

    /// When the loop must next look for expired requests: never after the
    /// first deadline, but possibly before it (once that one was answered).
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.earliest
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn take_where(&mut self, pick: impl Fn(&Entry) -> bool) -> impl Iterator<Item = Entry> {
        let entries = std::mem::take(&mut self.entries).into_iter();
        let (taken, kept): (IdMap<_, _>, _) = entries.partition(|(_, e)| pick(e));
        self.entries = kept;
        taken.into_values()
    }
}
