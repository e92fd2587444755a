//! Who the host is to its extensions: the session and directory every
//! event and `hello_ack` names, and the counters events and agent runs
//! take their numbers from (docs/PROTOCOL.md#events).

use crate::config::HostConfig;

/// The session's identity and its counters.
pub(super) struct Session {
    /// `session_id` of every event: the embedder's, else made at start.
    pub(super) id: String,
    /// The working directory, as extensions are told it.
    pub(super) cwd: String,
    /// Events numbered so far, over the host's life.
    sequence: u64,
    /// `before_agent_start` passes so far.
    agent_runs: u64,
}

impl Session {
    pub(super) fn new(cfg: &HostConfig) -> Session {
        let id = match cfg.session_id.as_str() {
            "" => crate::config::new_session_id(),
            given => given.to_string(),
        };
        let cwd = cfg.cwd.to_string_lossy().into_owned();
        Session {
            id,
            cwd,
            sequence: 0,
            agent_runs: 0,
        }
    }

    /// The next event's `sequence` (a tool call nobody subscribes to
    /// takes one too: docs/PROTOCOL.md#events).
    pub(super) fn next_sequence(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    /// The next agent run's `agent_run_id`.
    pub(super) fn next_run(&mut self) -> String {
        self.agent_runs += 1;
        format!("run-{}", self.agent_runs)
    }
}
