//! An answer that cannot be read (over the 16 MiB frame limit of
//! docs/PROTOCOL.md#wire-format, too deep, not a valid frame): its request
//! fails at once, saying why, instead of at its timeout; a guard's counts
//! as its failure (its `guard_failure`).

use super::pending::Waiter;
use super::Engine;
use crate::types::{Action, CommandOutcome, ToolOutcome, ToolResult};
use crate::wire::toolresult::text_block;
use std::time::Instant;

impl Engine {
    /// Extension `idx` wrote a `kind` frame for request `id` that could
    /// not be read: it `why`.
    pub(super) fn unreadable(&mut self, idx: usize, kind: &str, id: &str, why: &str, now: Instant) {
        if !matches!(
            kind,
            "tool_result" | "command_response" | "event_intercept_response"
        ) {
            return; // logged already, and answers nothing the host waits for
        }
        let Some(waiter) = self.take_answer(idx, id, kind) else {
            return;
        };
        let extension = self.exts[idx].name.clone();
        let dropped = |what: &str| format!("{what} from extension {extension} {why}: dropped");
        match waiter {
            Waiter::Tool { job } => {
                let name = self.jobs.get_mut(job).map(|j| j.name.clone());
                let text = dropped(&format!("the result of tool {}", name.unwrap_or_default()));
                let outcome = ToolOutcome::Ran(ToolResult {
                    extension,
                    content: vec![text_block(&text)],
                    is_error: true,
                    ..Default::default()
                });
                self.finish_job(job, Ok(outcome), now)
            }
            Waiter::Command { name, reply } => {
                let error = dropped(&format!("the response to /{name}"));
                let outcome = CommandOutcome {
                    extension,
                    action: Action::Noop,
                    error: Some(error),
                    ..Default::default()
                };
                self.answer(reply, Ok(outcome))
            }
            // As if it had not answered, at once: by its `guard_failure`.
            Waiter::Guard { chain, pos } => {
                let answer = self.exts[idx].unavailable(&format!("its answer {why}"));
                self.answer_guard(chain, pos, answer, now)
            }
        }
    }
}
