//! An answer too long to read (over the 16 MiB frame limit of docs/PROTOCOL.md#wire-format):
//! its request fails at once, saying so, instead of at its timeout.

use super::pending::Waiter;
use super::Engine;
use crate::types::{Action, CommandOutcome, ToolOutcome, ToolResult};
use crate::wire::protocol::MAX_LINE;
use crate::wire::toolresult::text_block;
use std::time::Instant;

impl Engine {
    /// Extension `idx` wrote a `kind` frame for request `id` that was
    /// `len` bytes long; it was dropped unread.
    pub(super) fn too_long(&mut self, idx: usize, kind: &str, id: &str, len: usize, now: Instant) {
        if !matches!(kind, "tool_result" | "command_response") {
            return; // logged already, and answers nothing the host waits for
        }
        let Some(waiter) = self.take_answer(idx, id, kind) else {
            return;
        };
        let extension = self.exts[idx].name.clone();
        let why = |what: &str| {
            format!(
                "{what} from extension {extension} was {len} bytes, over the {} MiB frame limit: dropped",
                MAX_LINE >> 20
            )
        };
        match waiter {
            Waiter::Tool { job } => {
                let name = self.jobs.get_mut(job).map(|j| j.name.clone());
                let text = why(&format!("the result of tool {}", name.unwrap_or_default()));
                let outcome = ToolOutcome::Ran(ToolResult {
                    extension,
                    content: vec![text_block(&text)],
                    is_error: true,
                    ..Default::default()
                });
                self.finish_job(job, Ok(outcome), now)
            }
            Waiter::Command { name, reply } => {
                let error = why(&format!("the response to /{name}"));
                let outcome = CommandOutcome {
                    extension,
                    action: Action::Noop,
                    error: Some(error),
                    ..Default::default()
                };
                self.answer(reply, Ok(outcome))
            }
            // `take_answer` matched the kind: a guard answers neither.
            Waiter::Guard { .. } => {}
        }
    }
}
