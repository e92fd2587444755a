//! The tool pipeline (docs/PROTOCOL.md#tool-pipeline): the engine runs
//! each job (`jobs.rs`) from its `tool_call` event through its guards
//! to its extension or the embedder, and to its result. A job can be
//! cancelled: by its ticket, and with the `ext-calls` feature by
//! `call_tool_cancel`, at its deadline, when its caller or its parent
//! call goes away (`extcalls.rs`). It ends exactly once,
//! in [`Engine::finish_job`], which emits the `tool_result` event and
//! answers the caller.

use super::chains::Then;
use super::jobs::{status, At, Job, Origin, ToolId};
use super::pending::Waiter;
use super::Engine;
use crate::intercept::InterceptOutcome;
use crate::types::{BuiltinVerdict, HostError, Request, Ticket, ToolOutcome, ToolResult};
use crate::wire::protocol::{EventPayload, HostFrame};
use crate::wire::toolresult::{bounded, text_block, Content, EVENT_BLOCKS, RESULT_BUDGET};
use serde_json::{json, Value};
use std::time::Instant;

/// A result's blocks and error flag, an error's as one text block.
pub(super) fn blocks_of(result: &Result<ToolOutcome, HostError>) -> (Vec<Content>, bool) {
    match result {
        Ok(ToolOutcome::Ran(o)) => (o.content.clone(), o.is_error),
        Ok(ToolOutcome::Builtin(BuiltinVerdict::Blocked { reason, .. })) => {
            (vec![text_block(reason)], true)
        }
        Ok(ToolOutcome::Builtin(BuiltinVerdict::Run { .. })) => (Vec::new(), false),
        Err(e) => (vec![text_block(&e.to_string())], true),
    }
}

/// Why a build without the `ext-calls` feature refuses `call_tool`.
#[cfg(not(feature = "ext-calls"))]
pub(super) fn no_ext_calls() -> String {
    crate::build::needs_feature("a tool call from an extension", "ext-calls")
}

impl Engine {
    /// Opens a job for the call of `name` with `args`.
    pub(super) fn new_job(
        &mut self,
        name: String,
        args: Value,
        tool_id: Option<String>,
        origin: Origin,
        ticket: Option<Ticket>,
    ) -> u64 {
        let tool_id = tool_id.map_or(ToolId::Made(self.pending.upcoming()), ToolId::Given);
        let job = Job {
            name,
            tool_id,
            args,
            origin,
            at: At::Starting,
            #[cfg(feature = "ext-calls")]
            chain: Vec::new(),
            #[cfg(feature = "ext-calls")]
            parent: None,
            executed: false,
            ticket,
            #[cfg(feature = "ext-calls")]
            deadline: None,
            #[cfg(feature = "journal")]
            operation_key: None,
            #[cfg(feature = "journal")]
            reconcile: false,
            #[cfg(feature = "journal")]
            journaled: false,
        };
        self.jobs.open(job)
    }

    /// The `tool_call` event, then the guards; `guards_done` goes on.
    pub(super) fn run_pipeline(&mut self, job: u64, now: Instant) {
        let guarded = self.exts.iter().any(|e| e.guards("tool_call"));
        if !guarded {
            return self.unguarded(job, now);
        }
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        #[cfg_attr(not(feature = "ext-calls"), allow(unused_mut))]
        let mut payload = EventPayload {
            tool_id: Some(j.tool_id.text()),
            tool_name: Some(j.name.clone()),
            // A copy: should the call end during its guards, its
            // `tool_result` event carries the args as proposed.
            tool_args: Some(j.args.clone()),
            ..Default::default()
        };
        #[cfg(feature = "ext-calls")]
        self.mark_origin(&mut payload, j);
        self.emit("tool_call", &payload);
        if let Some(j) = self.jobs.get_mut(job) {
            j.at = At::Guards(self.chains.next_id());
        }
        // One pipeline for every surface (docs/PROTOCOL.md#tool-pipeline): a built-in tool
        // gets the same event and guards; the embedder then runs it.
        self.start_chain("tool_call", payload, Then::RunTool { job }, now);
    }

    /// [`Engine::run_pipeline`] when no extension guards `tool_call`: the
    /// chain would allow at once, the args as they are. The event is
    /// built only for its subscribers (a call usually has none); its
    /// sequence number is taken all the same (docs/PROTOCOL.md#events).
    fn unguarded(&mut self, job: u64, now: Instant) {
        let subscribed = self.subscribed("tool_call");
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        let mut args = std::mem::take(&mut j.args);
        if subscribed {
            let mut payload = EventPayload {
                tool_id: Some(j.tool_id.text()),
                tool_name: Some(j.name.clone()),
                tool_args: Some(args),
                ..Default::default()
            };
            #[cfg(feature = "ext-calls")]
            self.mark_origin(&mut payload, &self.jobs[job]);
            self.emit("tool_call", &payload);
            args = payload.tool_args.take().unwrap_or_default();
        } else {
            self.session.next_sequence();
        }
        self.guards_done(job, InterceptOutcome::default(), args, now);
    }

    /// The guards decided on `job`, whose args are now `args`.
    pub(super) fn guards_done(
        &mut self,
        job: u64,
        outcome: InterceptOutcome,
        args: Value,
        now: Instant,
    ) {
        #[cfg(feature = "journal")]
        if let Err(e) = self.journal_verdict(job, &outcome, &args) {
            return self.finish_job(job, Err(e), now);
        }
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        j.at = At::Starting;
        let builtin = self.cfg.builtin_tools.contains(&j.name);
        if !outcome.block && !builtin {
            j.args = args;
            return self.dispatch_tool(job, now);
        }
        j.args = args.clone();
        if outcome.block {
            return self.blocked(job, outcome.reason.unwrap_or_default(), builtin, args, now);
        }
        #[cfg(feature = "ext-calls")]
        if let Some(&Origin::Ext { ext, .. }) = self.jobs.get(job).map(|j| &j.origin) {
            return self.run_builtin(job, ext, args, now);
        }
        // The verdict and the final args go back: the embedder runs it.
        let verdict = ToolOutcome::Builtin(BuiltinVerdict::Run { args });
        self.finish_job(job, Ok(verdict), now);
    }

    /// A guard refused `job`: `permission_decision`, then a blocked result.
    // The struct update fills the optional features' fields of the result.
    #[cfg_attr(
        not(any(feature = "tool-extras", feature = "journal")),
        allow(clippy::needless_update)
    )]
    fn blocked(&mut self, job: u64, reason: String, builtin: bool, args: Value, now: Instant) {
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        let mut payload = EventPayload {
            tool_id: Some(j.tool_id.text()),
            tool_name: Some(j.name.clone()),
            ..Default::default()
        };
        let fields = [
            ("decision", json!("denied")),
            ("source", json!("policy")),
            ("stage", json!("pre_execution")),
            ("reason", json!(reason)),
        ];
        payload
            .extra
            .extend(fields.map(|(k, v)| (k.to_string(), v)));
        #[cfg(feature = "ext-calls")]
        self.mark_origin(&mut payload, j);
        let name = j.name.clone();
        self.emit("permission_decision", &payload);
        let outcome = match builtin {
            true => ToolOutcome::Builtin(BuiltinVerdict::Blocked { reason, args }),
            false => ToolOutcome::Ran(ToolResult {
                extension: (self.tools.owner(&name))
                    .map_or_else(String::new, |c| self.exts[c.rank].name.clone()),
                content: vec![text_block(&reason)],
                is_error: true,
                blocked: true,
                reason: Some(reason),
                ..Default::default()
            }),
        };
        self.finish_job(job, Ok(outcome), now);
    }

    /// Sends `job` to the extension that owns its tool.
    pub(super) fn dispatch_tool(&mut self, job: u64, now: Instant) {
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        if self.tools.owner(&j.name).is_none() {
            let error = HostError::UnknownTool(j.name.clone());
            return self.finish_job(job, Err(error), now);
        }
        // Journaled, it goes once `dispatched` is on disk: the turn's sync.
        #[cfg(feature = "journal")]
        match self.journal_dispatched(job) {
            Err(e) => return self.finish_job(job, Err(e), now),
            Ok(true) => return,
            Ok(false) => {}
        }
        self.send_tool(job, now);
    }

    /// Writes `job`'s `tool_call` frame to the extension that owns its tool.
    pub(super) fn send_tool(&mut self, job: u64, now: Instant) {
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        let Some(owner) = self.tools.owner(&j.name) else {
            let error = HostError::UnknownTool(j.name.clone());
            return self.finish_job(job, Err(error), now);
        };
        let idx = owner.rank;
        // Only the embedder's calls wait for the user: `call_tool` keeps
        // its deadline (docs/PROTOCOL.md#interactive-tools).
        #[cfg(feature = "panels")]
        let interactive = owner.info.interactive && matches!(j.origin, Origin::Embedder(_));
        #[cfg(feature = "panels")]
        let limit = match interactive {
            true => std::time::Duration::MAX,
            false => self.cfg.timeouts.tool,
        };
        #[cfg(not(feature = "panels"))]
        let limit = self.cfg.timeouts.tool;
        let id = self.pending.new_id();
        let frame = HostFrame::ToolCall {
            id: &id,
            name: &j.name,
            args: &j.args,
            #[cfg(feature = "journal")]
            operation_key: j.operation_key.as_deref(),
            #[cfg(feature = "journal")]
            reconcile: j.reconcile,
        };
        let ext = &mut self.exts[idx];
        let sent = ext.serving() && ext.send(&frame, now);
        if let Some(j) = self.jobs.get_mut(job) {
            j.at = At::Running {
                ext: idx,
                id: id.clone(),
                #[cfg(feature = "panels")]
                interactive,
            };
            j.executed = true;
        }
        self.track_request(idx, id, sent, Waiter::Tool { job }, limit, now);
    }

    /// Ends `job` with `result`: its children are cancelled, subscribers
    /// get `tool_result`, its caller the result.
    pub(super) fn finish_job(
        &mut self,
        job: u64,
        result: Result<ToolOutcome, HostError>,
        now: Instant,
    ) {
        let Some(j) = self.jobs.remove(job) else {
            return;
        };
        #[cfg(feature = "ext-calls")]
        self.cancel_children(job, now);
        // The caller hears of no result the journal does not hold: a
        // journaled call's end waits for the turn's sync.
        #[cfg(feature = "journal")]
        let Some((j, result)) = self.journal_finished(j, result) else {
            return;
        };
        self.ended(j, result, now);
    }

    /// What follows the end of job `j`: the `tool_result` event, the
    /// answer to its caller.
    #[cfg_attr(not(feature = "ext-calls"), allow(unused_variables))]
    pub(super) fn ended(&mut self, j: Job, result: Result<ToolOutcome, HostError>, now: Instant) {
        let verdict_only = matches!(
            &result,
            Ok(ToolOutcome::Builtin(BuiltinVerdict::Run { .. }))
        );
        let subscribed = self.subscribed("tool_result");
        if subscribed && !verdict_only {
            let (content, is_error) = blocks_of(&result);
            let (content, truncated) = bounded(&content, RESULT_BUDGET, EVENT_BLOCKS);
            let mut observed = json!({"content": content, "is_error": is_error});
            if truncated {
                observed["truncated"] = true.into();
            }
            let mut payload = EventPayload {
                tool_id: Some(j.tool_id.text()),
                tool_name: Some(j.name.clone()),
                tool_args: Some(j.args.clone()),
                ..Default::default()
            };
            let fields = [
                ("status", json!(status(&result))),
                ("executed", json!(j.executed)),
                ("result", observed),
            ];
            payload
                .extra
                .extend(fields.map(|(k, v)| (k.to_string(), v)));
            #[cfg(feature = "ext-calls")]
            self.mark_origin(&mut payload, &j);
            self.emit("tool_result", &payload);
        }
        match j.origin {
            Origin::Embedder(reply) => self.answer(reply, result),
            #[cfg(feature = "ext-calls")]
            Origin::Ext { ext, id, listening } => {
                if listening {
                    self.answer_ext(ext, &id, &j.name, &result, now);
                }
            }
        }
    }

    /// Abandons `job` wherever it is: its guards are forgotten, its
    /// extension told with `tool_cancel` (when it asked for that), and
    /// the job ends with `error`, which its caller gets if it listens.
    pub(super) fn abort_job(&mut self, job: u64, error: HostError, now: Instant) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        match std::mem::replace(&mut j.at, At::Starting) {
            At::Guards(chain) => {
                if let Some(state) = self.chains.remove(chain) {
                    for id in state.ids.iter().flatten() {
                        self.pending.cancel(id);
                    }
                }
            }
            At::Running { ext, id, .. } => {
                self.pending.cancel(&id);
                self.tool_cancel(ext, &id, &error.to_string(), now);
            }
            At::Starting => {}
            #[cfg(feature = "ext-calls")]
            At::Builtin => {}
        }
        self.finish_job(job, Err(error), now);
    }

    /// Tells extension `ext` that its `tool_call` `id` is abandoned, if
    /// it asked to be told (docs/PROTOCOL.md#cancellation); its late answer is dropped.
    pub(super) fn tool_cancel(&mut self, ext: usize, id: &str, why: &str, now: Instant) {
        let e = &mut self.exts[ext];
        let sent = e.tool_cancel && e.serving() && e.send(&HostFrame::ToolCancel { id }, now);
        let told = match sent {
            true => "tool_cancel sent",
            false => "it did not ask for tool_cancel",
        };
        e.log
            .line(&format!("tool_call {id} abandoned ({why}): {told}"));
    }

    /// Refuses extension `idx`'s `call_tool` `id` of tool `name` with an
    /// error result whose text, also logged, says why: never silence
    /// (docs/PROTOCOL.md#calls-from-extensions).
    pub(super) fn refuse_call(
        &mut self,
        idx: usize,
        id: &str,
        name: &str,
        why: String,
        now: Instant,
    ) {
        let content = [text_block(&why)];
        let frame = HostFrame::ToolResult {
            id,
            name,
            content: &content,
            is_error: true,
            truncated: false,
        };
        self.exts[idx].log.line(&format!("refused: {why}"));
        self.exts[idx].send(&frame, now);
    }

    /// An extension's `call_tool` in a build without the `ext-calls`
    /// feature: refused at once with a result naming the feature.
    #[cfg(not(feature = "ext-calls"))]
    pub(super) fn call_tool_unbuilt(
        &mut self,
        idx: usize,
        id: Option<Value>,
        name: Option<Value>,
        now: Instant,
    ) {
        let text = |v: Option<Value>| match v {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let (id, name) = (text(id), text(name));
        let why = format!("call_tool {name}: {}", no_ext_calls());
        self.refuse_call(idx, &id, &name, why, now);
    }

    /// The embedder's cancel: the job under `ticket`, or a request held
    /// until startup ends. False when none is found.
    pub(super) fn cancel_ticket(&mut self, ticket: Ticket, now: Instant) -> bool {
        if let Some(job) = self.jobs.find(|j| j.ticket == Some(ticket)) {
            self.abort_job(job, HostError::CallCancelled, now);
            return true;
        }
        let held =
            |r: &Request| matches!(r, Request::Cancellable { ticket: t, .. } if *t == ticket);
        if let Some(waiting) = self.state.held_mut() {
            if let Some(i) = waiting.iter().position(held) {
                let req = waiting.remove(i);
                self.refuse(req, HostError::CallCancelled);
                return true;
            }
        }
        if let Some(parked) = self.state.parked_mut() {
            if let Some(i) = parked.iter().position(|(_, r)| held(r)) {
                let (_, req) = parked.remove(i);
                self.refuse(req, HostError::CallCancelled);
                return true;
            }
        }
        false
    }

    /// A shutdown or reload ends the calls that would wait for it: the
    /// interactive ones and those the embedder runs (docs/PROTOCOL.md#interactive-tools);
    /// a build with neither has none.
    #[cfg(any(feature = "panels", feature = "ext-calls"))]
    pub(super) fn end_open_ended(&mut self, error: &HostError, now: Instant) {
        let open = |j: &Job| match j.at {
            #[cfg(feature = "panels")]
            At::Running { interactive, .. } => interactive,
            #[cfg(feature = "ext-calls")]
            At::Builtin => true,
            _ => false,
        };
        for job in self.jobs.all(open) {
            self.abort_job(job, error.clone(), now);
        }
    }

    /// Ends every job (a reload replaced the extensions, or a stop at once).
    pub(super) fn fail_jobs(&mut self, error: &HostError, now: Instant) {
        for job in self.jobs.all(|_| true) {
            self.finish_job(job, Err(error.clone()), now);
        }
    }
}
