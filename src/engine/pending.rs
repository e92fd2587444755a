//! The requests sent to extensions and not answered yet, in the spirit
//! of lsp-server's `req_queue.rs`: each is registered under a fresh id
//! with who waits for it and until when, and leaves the table once:
//! answered, expired, or failed with its extension.

use crate::intercept::InterceptOutcome;
use crate::types::{CommandOutcome, HostError, Reply, ToolOutcome};
use std::collections::hash_map::{Entry as Slot, HashMap};
use std::time::Instant;

/// Who waits for the end of an exchange.
pub(super) enum Waiter {
    /// The embedder, for a command's answer.
    Command {
        name: String,
        reply: Reply<CommandOutcome>,
    },
    /// The embedder, for a tool's result (a built-in tool's: the verdict).
    Tool {
        name: String,
        reply: Reply<ToolOutcome>,
    },
    /// The embedder, for the outcome of an interception chain.
    Intercept(Reply<InterceptOutcome>),
    /// Interception chain `chain`, for the answer of its guard at `pos`.
    Guard { chain: u64, pos: usize },
}

impl Waiter {
    /// The one way an exchange fails. A guard's chain is settled by the
    /// engine, which knows what an unavailable guard means.
    pub(super) fn fail(self, error: HostError) {
        match self {
            Waiter::Command { reply, .. } => reply(Err(error)),
            Waiter::Tool { reply, .. } => reply(Err(error)),
            Waiter::Intercept(reply) => reply(Err(error)),
            Waiter::Guard { .. } => {}
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Waiter::Command { .. } => Kind::Command,
            Waiter::Tool { .. } => Kind::Tool,
            Waiter::Intercept(_) | Waiter::Guard { .. } => Kind::Intercept,
        }
    }
}

/// What a request is, by the frame that must answer it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Command,
    Tool,
    Intercept,
}

impl Kind {
    pub(super) fn answer(self) -> &'static str {
        match self {
            Kind::Command => "command_response",
            Kind::Tool => "tool_result",
            Kind::Intercept => "event_intercept_response",
        }
    }
}

struct Entry {
    ext: usize,
    deadline: Instant,
    waiter: Waiter,
}

/// Requests in flight, by id.
#[derive(Default)]
pub(super) struct Pending {
    last_id: u64,
    entries: HashMap<String, Entry>,
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

    pub(super) fn register(&mut self, id: String, ext: usize, deadline: Instant, waiter: Waiter) {
        let entry = Entry {
            ext,
            deadline,
            waiter,
        };
        self.entries.insert(id, entry);
    }

    /// Takes request `id` when extension `ext` owes it an answer of
    /// `kind`; else leaves the table as it was and says why not.
    pub(super) fn take(&mut self, ext: usize, id: &str, kind: Kind) -> Result<Waiter, String> {
        match self.entries.entry(id.to_string()) {
            Slot::Occupied(e) if e.get().ext == ext && e.get().waiter.kind() == kind => {
                Ok(e.remove().waiter)
            }
            Slot::Occupied(e) if e.get().ext == ext => Err(format!(
                "id {id:?} expects a {}",
                e.get().waiter.kind().answer()
            )),
            _ => Err(format!("id {id:?} is unknown, expired or already answered")),
        }
    }

    /// Forgets request `id` without answering it: a guard asked again,
    /// or its chain decided.
    pub(super) fn cancel(&mut self, id: &str) {
        self.entries.remove(id);
    }

    /// Takes the requests whose deadline passed, with their extension.
    pub(super) fn expired(&mut self, now: Instant) -> Vec<(usize, Waiter)> {
        self.take_where(|e| e.deadline <= now)
            .map(|e| (e.ext, e.waiter))
            .collect()
    }

    /// Fails every command and tool call extension `ext` owes with
    /// `error`; returns the guard answers it owes, for their chains.
    pub(super) fn fail_ext(&mut self, ext: usize, error: &HostError) -> Vec<(u64, usize)> {
        let mut guards = Vec::new();
        for e in self.take_where(|e| e.ext == ext) {
            match e.waiter {
                Waiter::Guard { chain, pos } => guards.push((chain, pos)),
                other => other.fail(error.clone()),
            }
        }
        guards
    }

    /// Takes the guard answers extension `ext` owes.
    pub(super) fn take_guards(&mut self, ext: usize) -> Vec<(u64, usize)> {
        self.take_where(|e| e.ext == ext && matches!(e.waiter, Waiter::Guard { .. }))
            .filter_map(|e| match e.waiter {
                Waiter::Guard { chain, pos } => Some((chain, pos)),
                _ => None,
            })
            .collect()
    }

    /// Fails every request (a reload, a shutdown that does not wait).
    pub(super) fn fail_all(&mut self, error: &HostError) {
        for (_, e) in self.entries.drain() {
            e.waiter.fail(error.clone());
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.deadline).min()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn take_where(&mut self, pick: impl Fn(&Entry) -> bool) -> impl Iterator<Item = Entry> + '_ {
        let ids: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| pick(e))
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter().filter_map(|id| self.entries.remove(&id))
    }
}
