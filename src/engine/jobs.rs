//! The tool calls in flight (docs/PROTOCOL.md#tool-pipeline): each
//! tool call, the embedder's or (with the `ext-calls` feature) an
//! extension's `call_tool`, is one
//! [`Job`] from its `tool_call` event to its result, and knows where it
//! is (guards, running, with the embedder), so it can be cancelled from
//! anywhere. The engine runs them through the pipeline in `pipeline.rs`.

use crate::types::{HostError, Reply, Ticket, ToolOutcome};
use serde_json::Value;
#[cfg(feature = "ext-calls")]
use std::time::Instant;

/// Who asked for a tool call, and gets its result.
pub(super) enum Origin {
    /// The embedder (library, rpc, MCP, the session).
    Embedder(Reply<ToolOutcome>),
    /// Extension `ext`'s `call_tool` with this `id`; `listening`: it
    /// still takes the answer (false once it cancelled the call or can
    /// take no more answers).
    #[cfg(feature = "ext-calls")]
    Ext {
        ext: usize,
        id: String,
        listening: bool,
    },
}

/// Where a job is now.
#[derive(Clone, PartialEq)]
pub(super) enum At {
    /// Before its guards are asked.
    Starting,
    /// Its interception chain runs.
    Guards(u64),
    /// Sent to extension `ext` as `tool_call` `id`; `interactive`: no deadline.
    Running {
        ext: usize,
        id: String,
        #[cfg(feature = "panels")]
        interactive: bool,
    },
    /// A built-in tool the embedder runs ([`crate::types::HostEvent::BuiltinCall`]).
    #[cfg(feature = "ext-calls")]
    Builtin,
}

pub(super) struct Job {
    pub(super) name: String,
    pub(super) tool_id: ToolId,
    /// As proposed, then as the guards left them.
    pub(super) args: Value,
    pub(super) origin: Origin,
    pub(super) at: At,
    /// The tool names of the calls above it in its chain, the first
    /// call's first (its own, `name`, would come next).
    #[cfg(feature = "ext-calls")]
    pub(super) chain: Vec<String>,
    /// The job whose `tool_call` the caller was serving (`parent_id`).
    #[cfg(feature = "ext-calls")]
    pub(super) parent: Option<u64>,
    /// It was handed to its extension or to the embedder.
    pub(super) executed: bool,
    pub(super) ticket: Option<Ticket>,
    /// `call_tool`'s own deadline (the tool timeout), whatever the tool.
    #[cfg(feature = "ext-calls")]
    pub(super) deadline: Option<Instant>,
    /// The embedder's `operation_key`, sent with its `tool_call`.
    #[cfg(feature = "journal")]
    pub(super) operation_key: Option<String>,
    /// A reconcile call: sent with `reconcile: true`, its answer read as
    /// a [`crate::types::ReconcileState`].
    #[cfg(feature = "journal")]
    pub(super) reconcile: bool,
    /// Its steps are journaled, under `operation_key`.
    #[cfg(feature = "journal")]
    pub(super) journaled: bool,
}

/// The `tool_id` of a job's events: the embedder's, else `call-N`,
/// written out only when an event carries it (most calls have no
/// subscriber and no guard).
pub(super) enum ToolId {
    Given(String),
    Made(u64),
}

impl ToolId {
    pub(super) fn text(&self) -> String {
        match self {
            ToolId::Given(id) => id.clone(),
            ToolId::Made(n) => format!("call-{n}"),
        }
    }
}

/// A journaled call's step that waits for the turn's journal sync
/// (`journaled.rs`).
#[cfg(feature = "journal")]
pub(super) enum Wait {
    /// Its `tool_call` frame (`dispatched` is buffered).
    Dispatch(u64),
    /// Its answer (`finished` is buffered).
    Finish(Box<Job>, Result<ToolOutcome, HostError>),
}

/// The jobs in flight.
#[derive(Default)]
pub(super) struct Jobs {
    last: u64,
    runs: super::idmap::IdMap<u64, Job>,
}

impl Jobs {
    pub(super) fn len(&self) -> usize {
        self.runs.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Adds `job`: its number.
    pub(super) fn open(&mut self, job: Job) -> u64 {
        self.last += 1;
        self.runs.insert(self.last, job);
        self.last
    }

    pub(super) fn remove(&mut self, job: u64) -> Option<Job> {
        self.runs.remove(&job)
    }

    pub(super) fn get(&self, job: u64) -> Option<&Job> {
        self.runs.get(&job)
    }

    pub(super) fn get_mut(&mut self, job: u64) -> Option<&mut Job> {
        self.runs.get_mut(&job)
    }

    /// The first job `pick` accepts.
    pub(super) fn find(&self, pick: impl Fn(&Job) -> bool) -> Option<u64> {
        self.runs.iter().find(|(_, j)| pick(j)).map(|(&k, _)| k)
    }

    pub(super) fn all(&self, pick: impl Fn(&Job) -> bool) -> Vec<u64> {
        self.runs
            .iter()
            .filter(|(_, j)| pick(j))
            .map(|(&k, _)| k)
            .collect()
    }

    /// The job serving extension `ext`'s `tool_call` `id`.
    #[cfg(feature = "ext-calls")]
    pub(super) fn serving(&self, ext: usize, id: &str) -> Option<u64> {
        self.find(|j| matches!(&j.at, At::Running { ext: e, id: i, .. } if *e == ext && i == id))
    }

    /// The earliest `call_tool` deadline.
    #[cfg(feature = "ext-calls")]
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.runs.values().filter_map(|j| j.deadline).min()
    }
}

impl std::ops::Index<u64> for Jobs {
    type Output = Job;

    fn index(&self, job: u64) -> &Job {
        &self.runs[&job]
    }
}

/// What `tool_result` events say about how a call ended (docs/PROTOCOL.md#tool-pipeline).
pub(super) fn status(result: &Result<ToolOutcome, HostError>) -> &'static str {
    match result {
        Ok(o) if o.blocked() => "blocked",
        Ok(ToolOutcome::Ran(o)) if o.is_error => "failed",
        Ok(_) => "completed",
        Err(HostError::TimedOut { .. } | HostError::CallTimedOut { .. }) => "timed_out",
        Err(HostError::CallCancelled | HostError::Cancelled) => "cancelled",
        Err(_) => "failed",
    }
}
