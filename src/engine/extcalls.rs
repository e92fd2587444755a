//! Tool calls made by extensions (docs/PROTOCOL.md#calls-from-extensions),
//! the `ext-calls` feature: the `call_tool` and `call_tool_cancel`
//! frames, their chains through `parent_id`, the per-extension limit,
//! the `call_tool` deadline, and the built-in tools the embedder runs
//! for them ([`HostEvent::BuiltinCall`]). Each call is a job
//! (`jobs.rs`, [`Origin::Ext`]) run through the same pipeline as the
//! embedder's (`pipeline.rs`). Without the feature an extension's
//! `call_tool` is refused at once (`pipeline.rs`).

use super::jobs::{At, Job, Origin};
use super::later::later;
use super::pipeline::blocks_of;
use super::Engine;
use crate::types::{BuiltinReply, HostError, HostEvent, ToolOutcome, ToolResult};
use crate::wire::protocol::{EventPayload, HostFrame};
use crate::wire::toolresult::{bounded, map_content, text_block, Block, RESULT_BUDGET};
use serde_json::{json, Value};
use std::time::Instant;

/// Tool calls in one chain at most, the first included (upstream's rule).
pub(crate) const MAX_CHAIN: usize = 4;

/// `call_tool` requests one extension may have in flight at once.
pub(crate) const MAX_CALLS_PER_EXT: usize = 64;

/// A `call_tool` request from an extension, as read.
pub(super) struct CallTool {
    pub(super) id: Option<Value>,
    pub(super) name: Option<Value>,
    pub(super) args: Option<Value>,
    pub(super) parent_id: Option<String>,
}

impl Engine {
    /// Marks what a `call_tool` started with the name of the extension
    /// that made it.
    pub(super) fn mark_origin(&self, payload: &mut EventPayload, job: &Job) {
        if let Origin::Ext { ext, .. } = job.origin {
            let name = self.exts[ext].name.clone();
            payload.extra.insert("origin_extension".into(), name.into());
        }
    }

    /// Answers extension `ext`'s `call_tool` `id` of tool `name` with
    /// `result`, its content bounded to [`RESULT_BUDGET`].
    pub(super) fn answer_ext(
        &mut self,
        ext: usize,
        id: &str,
        name: &str,
        result: &Result<ToolOutcome, HostError>,
        now: Instant,
    ) {
        let (content, is_error) = blocks_of(result);
        let (content, truncated) = bounded(&content, RESULT_BUDGET, usize::MAX);
        let frame = HostFrame::ToolResult {
            id,
            name,
            content: &content,
            is_error,
            truncated,
        };
        if self.exts[ext].serving() {
            self.exts[ext].send(&frame, now);
        }
    }

    /// Extension `ext` called built-in tool `job`, its guards passed with
    /// `args`: the embedder runs it ([`HostEvent::BuiltinCall`]), or,
    /// when this host runs no built-ins, the call fails saying so.
    pub(super) fn run_builtin(&mut self, job: u64, ext: usize, args: Value, now: Instant) {
        let caller = self.exts[ext].name.clone();
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if !self.cfg.runs_builtins {
            let why = format!(
                "tool {} is built in, and this host runs no built-in tools",
                j.name
            );
            let result = ToolOutcome::Ran(ToolResult {
                content: vec![text_block(&why)],
                is_error: true,
                ..Default::default()
            });
            return self.finish_job(job, Ok(result), now);
        }
        j.at = At::Builtin;
        j.executed = true;
        let (call_id, name) = (job.to_string(), j.name.clone());
        let reply = BuiltinReply {
            call_id: call_id.clone(),
            tx: Some(self.builtin_tx.clone()),
            drive: self.builtin_drive.clone(),
        };
        self.event(HostEvent::BuiltinCall {
            call_id,
            extension: caller,
            name,
            args,
            reply,
        });
    }

    /// Calls made while serving `job`, which ended, lose their context
    /// with it.
    pub(super) fn cancel_children(&mut self, job: u64, now: Instant) {
        for child in self.jobs.all(|c| c.parent == Some(job)) {
            self.abort_job(child, HostError::CallCancelled, now);
        }
    }

    /// The extension that made `job` gave up on it: it is abandoned,
    /// unanswered.
    fn give_up(&mut self, job: u64, now: Instant) {
        if let Some(Job {
            origin: Origin::Ext { listening, .. },
            ..
        }) = self.jobs.get_mut(job)
        {
            *listening = false;
        }
        self.abort_job(job, HostError::CallCancelled, now);
    }

    /// Ends the jobs past their `call_tool` deadline.
    pub(super) fn expire_jobs(&mut self, now: Instant) {
        let limit = self.cfg.timeouts.tool;
        for job in self.jobs.all(|j| j.deadline.is_some_and(|d| d <= now)) {
            let Some(j) = self.jobs.get(job) else {
                continue;
            };
            let error = HostError::CallTimedOut {
                name: j.name.clone(),
                limit,
            };
            self.abort_job(job, error, now);
        }
    }

    /// Extension `ext` can take no more answers: the calls it made are
    /// abandoned (their tools get `tool_cancel`), unanswered.
    pub(super) fn drop_calls_of(&mut self, ext: usize, now: Instant) {
        for job in self
            .jobs
            .all(|j| matches!(j.origin, Origin::Ext { ext: e, .. } if e == ext))
        {
            self.give_up(job, now);
        }
    }

    /// The embedder's result for a [`HostEvent::BuiltinCall`].
    pub(super) fn builtin_result(
        &mut self,
        call_id: &str,
        content: Vec<Value>,
        is_error: bool,
        now: Instant,
    ) -> bool {
        let job = call_id.parse().ok();
        let waiting = job
            .and_then(|job| self.jobs.get(job))
            .is_some_and(|j| j.at == At::Builtin);
        let Some(job) = job.filter(|_| waiting) else {
            return false;
        };
        let outcome = ToolOutcome::Ran(ToolResult {
            content: map_content(content.into_iter().map(Block::from).collect()),
            is_error,
            ..Default::default()
        });
        self.finish_job(job, Ok(outcome), now);
        true
    }

    /// An extension's `call_tool` (docs/PROTOCOL.md#calls-from-extensions): refused with an error
    /// result that says why, or run through the pipeline.
    pub(super) fn call_tool_frame(&mut self, idx: usize, call: CallTool, now: Instant) {
        let ext = &self.exts[idx];
        let id = match call.id {
            Some(Value::String(id)) if !id.is_empty() => id,
            other => {
                let shown = other.map_or_else(|| "none".into(), |v| v.to_string());
                let why = format!("call_tool needs a non-empty string `id` (got {shown})");
                return self.refuse_call(idx, "", "", why, now);
            }
        };
        let name = match call.name {
            Some(Value::String(name)) if !name.is_empty() => name,
            _ => {
                let why = "call_tool needs a non-empty string `name`".to_string();
                return self.refuse_call(idx, &id, "", why, now);
            }
        };
        let refuse = |why: String| format!("call_tool {name}: {why}");
        let mine = |j: &Job| matches!(j.origin, Origin::Ext { ext, .. } if ext == idx);
        let in_flight = self.jobs.all(mine);
        let why = if !ext.call_tool {
            Some("this extension did not list `call_tool` in hello.capabilities".to_string())
        } else if in_flight
            .iter()
            .any(|k| matches!(&self.jobs[*k].origin, Origin::Ext { id: i, .. } if *i == id))
        {
            Some(format!("id {id:?} is already in flight"))
        } else if in_flight.len() >= MAX_CALLS_PER_EXT {
            Some(format!(
                "{MAX_CALLS_PER_EXT} calls of this extension are in flight already (at most {MAX_CALLS_PER_EXT})"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return self.refuse_call(idx, &id, &name, refuse(why), now);
        }
        let args = match call.args {
            None | Some(Value::Null) => json!({}),
            Some(args @ Value::Object(_)) => args,
            Some(_) => {
                let why = "`args` must be a JSON object".to_string();
                return self.refuse_call(idx, &id, &name, refuse(why), now);
            }
        };
        let (chain, parent) = match call.parent_id {
            Some(pid) => {
                let Some(parent) = self.jobs.serving(idx, &pid) else {
                    let why = format!(
                        "parent_id {pid:?} is not a tool_call this extension is serving (unknown or finished)"
                    );
                    return self.refuse_call(idx, &id, &name, refuse(why), now);
                };
                let above = &self.jobs[parent];
                let mut chain = above.chain.clone();
                chain.push(above.name.clone());
                let repeated = chain.contains(&name);
                let shown = format!("{} -> {name}", chain.join(" -> "));
                if repeated {
                    let why = format!("a tool may not repeat in a chain ({shown})");
                    return self.refuse_call(idx, &id, &name, refuse(why), now);
                }
                if chain.len() + 1 > MAX_CHAIN {
                    let why = format!("at most {MAX_CHAIN} tool calls in one chain ({shown})");
                    return self.refuse_call(idx, &id, &name, refuse(why), now);
                }
                (chain, Some(parent))
            }
            None => {
                let serving = |j: &Job| matches!(j.at, At::Running { ext, .. } if ext == idx);
                if let Some(served) = self.jobs.find(serving) {
                    let served = &self.jobs[served];
                    let why = format!(
                        "this extension is serving tool_call {} ({}): set `parent_id`",
                        match &served.at {
                            At::Running { id, .. } => id.as_str(),
                            _ => "",
                        },
                        served.name
                    );
                    return self.refuse_call(idx, &id, &name, refuse(why), now);
                }
                (Vec::new(), None)
            }
        };
        if !self.cfg.builtin_tools.contains(&name) {
            let why = match self.tools.owner(&name) {
                None => Some("unknown tool"),
                // Upstream calls active tools only.
                #[cfg(feature = "tool-extras")]
                Some(c) if !c.info.active => Some("the tool is deferred and not activated"),
                Some(_) => None,
            };
            if let Some(why) = why {
                return self.refuse_call(idx, &id, &name, refuse(why.to_string()), now);
            }
        }
        let origin = Origin::Ext {
            ext: idx,
            id,
            listening: true,
        };
        let job = self.new_job(name, args, None, origin, None);
        if let Some(j) = self.jobs.get_mut(job) {
            (j.chain, j.parent) = (chain, parent);
            j.deadline = Some(later(now, self.cfg.timeouts.tool));
        }
        // Journaled like the embedder's, its origin the extension.
        #[cfg(feature = "journal")]
        if let Err(e) = self.journal_accepted(job) {
            return self.finish_job(job, Err(e), now);
        }
        self.run_pipeline(job, now);
    }

    /// `call_tool_cancel`: the caller gave up; it gets no answer.
    pub(super) fn call_tool_cancel(&mut self, idx: usize, id: &str, now: Instant) {
        let job = self.jobs.find(
            |j| matches!(&j.origin, Origin::Ext { ext, id: i, .. } if *ext == idx && i == id),
        );
        match job {
            Some(job) => self.give_up(job, now),
            None => self.exts[idx].log.line(&format!(
                "ignored call_tool_cancel: id {id:?} is not in flight"
            )),
        }
    }
}
