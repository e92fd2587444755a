//! The tool pipeline (docs/PROTOCOL.md#tool-pipeline): the engine runs
//! each job (`jobs.rs`) from its `tool_call` event through its guards
//! to its extension or the embedder, and to its result. A job can be
//! cancelled: by its ticket, by `call_tool_cancel`, at its deadline,
//! when its caller or its parent call goes away. It ends exactly once,
//! in [`Engine::finish_job`], which emits the `tool_result` event and
//! answers the caller.

use super::chains::Then;
use super::jobs::{status, At, CallTool, Caller, Job, Origin, ToolId};
use super::later::later;
use super::pending::Waiter;
use super::Engine;
use crate::intercept::InterceptOutcome;
use crate::types::{
    BuiltinReply, BuiltinVerdict, HostError, HostEvent, Request, Ticket, ToolOutcome, ToolResult,
};
use crate::wire::protocol::{EventPayload, HostFrame};
use crate::wire::toolresult::{
    bounded, map_content, text_block, Block, Content, EVENT_BLOCKS, RESULT_BUDGET,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Tool calls in one chain at most, the first included (upstream's rule).
pub(crate) const MAX_CHAIN: usize = 4;

/// `call_tool` requests one extension may have in flight at once.
pub(crate) const MAX_CALLS_PER_EXT: usize = 64;

/// A result's blocks and error flag, an error's as one text block.
fn blocks_of(result: &Result<ToolOutcome, HostError>) -> (Vec<Content>, bool) {
    match result {
        Ok(ToolOutcome::Ran(o)) => (o.content.clone(), o.is_error),
        Ok(ToolOutcome::Builtin(BuiltinVerdict::Blocked { reason, .. })) => {
            (vec![text_block(reason)], true)
        }
        Ok(ToolOutcome::Builtin(BuiltinVerdict::Run { .. })) => (Vec::new(), false),
        Err(e) => (vec![text_block(&e.to_string())], true),
    }
}

/// Marks what a `call_tool` of extension `origin` started (docs/PROTOCOL.md#calls-from-extensions).
fn set_origin(payload: &mut EventPayload, origin: Option<String>) {
    if let Some(name) = origin {
        payload.extra.insert("origin_extension".into(), name.into());
    }
}

/// An error result for a refused `call_tool`.
fn refusal(text: String) -> Result<ToolOutcome, HostError> {
    Ok(ToolOutcome::Ran(ToolResult {
        content: vec![text_block(&text)],
        is_error: true,
        ..Default::default()
    }))
}

impl Engine {
    /// Opens a job for the call of `name` with `args`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_job(
        &mut self,
        name: String,
        args: Value,
        tool_id: Option<String>,
        origin: Origin,
        ticket: Option<Ticket>,
        chain: Vec<String>,
        parent: Option<u64>,
        deadline: Option<Instant>,
    ) -> u64 {
        let tool_id = tool_id.map_or(ToolId::Made(self.pending.upcoming()), ToolId::Given);
        let job = Job {
            name,
            tool_id,
            args,
            origin,
            at: At::Starting,
            chain,
            parent,
            executed: false,
            ticket,
            deadline,
            operation_key: None,
            reconcile: false,
            journaled: false,
        };
        self.jobs.open(job)
    }

    /// The name of the extension whose `call_tool` started `job`, if any.
    fn origin_name(&self, job: &Job) -> Option<String> {
        match job.origin {
            Origin::Ext { ext, .. } => Some(self.exts[ext].name.clone()),
            Origin::Embedder(_) => None,
        }
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
        let mut payload = EventPayload {
            tool_id: Some(j.tool_id.text()),
            tool_name: Some(j.name.clone()),
            // A copy: should the call end during its guards, its
            // `tool_result` event carries the args as proposed.
            tool_args: Some(j.args.clone()),
            ..Default::default()
        };
        set_origin(&mut payload, self.origin_name(j));
        self.emit("tool_call", &payload);
        if let Some(j) = self.jobs.get_mut(job) {
            j.at = At::Guards(self.next_chain);
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
            let j = &self.jobs[job];
            set_origin(&mut payload, self.origin_name(j));
            self.emit("tool_call", &payload);
            args = payload.tool_args.take().unwrap_or_default();
        } else {
            self.sequence += 1;
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
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        let caller = match j.origin {
            // The verdict and the final args go back: the embedder runs it.
            Origin::Embedder(_) => {
                let verdict = ToolOutcome::Builtin(BuiltinVerdict::Run { args });
                return self.finish_job(job, Ok(verdict), now);
            }
            Origin::Ext { ext, .. } => self.exts[ext].name.clone(),
        };
        if !self.cfg.runs_builtins {
            let why = format!(
                "tool {} is built in, and this host runs no built-in tools",
                j.name
            );
            return self.finish_job(job, refusal(why), now);
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

    /// A guard refused `job`: `permission_decision`, then a blocked result.
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
        set_origin(&mut payload, self.origin_name(j));
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
        let interactive = owner.info.interactive && matches!(j.origin, Origin::Embedder(_));
        let limit = match interactive {
            true => Duration::MAX,
            false => self.cfg.timeouts.tool,
        };
        let id = self.pending.new_id();
        let frame = HostFrame::ToolCall {
            id: &id,
            name: &j.name,
            args: &j.args,
            operation_key: j.operation_key.as_deref(),
            reconcile: j.reconcile,
        };
        let ext = &mut self.exts[idx];
        let sent = ext.serving() && ext.send(&frame, now);
        if let Some(j) = self.jobs.get_mut(job) {
            j.at = At::Running {
                ext: idx,
                id: id.clone(),
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
        self.end_job(job, result, Caller::Listening, now);
    }

    fn end_job(
        &mut self,
        job: u64,
        result: Result<ToolOutcome, HostError>,
        caller: Caller,
        now: Instant,
    ) {
        let Some(j) = self.jobs.remove(job) else {
            return;
        };
        // Calls made while serving it lose their context with it.
        for child in self.jobs.all(|c| c.parent == Some(job)) {
            self.abort_job(child, HostError::CallCancelled, Caller::Listening, now);
        }
        // The caller hears of no result the journal does not hold: a
        // journaled call's end waits for the turn's sync.
        #[cfg(feature = "journal")]
        let Some((j, result, caller)) = self.journal_finished(j, result, caller) else {
            return;
        };
        self.ended(j, result, caller, now);
    }

    /// What follows the end of job `j`: the `tool_result` event, the
    /// answer to its caller.
    pub(super) fn ended(
        &mut self,
        j: Job,
        result: Result<ToolOutcome, HostError>,
        caller: Caller,
        now: Instant,
    ) {
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
            set_origin(&mut payload, self.origin_name(&j));
            self.emit("tool_result", &payload);
        }
        match j.origin {
            Origin::Embedder(reply) => self.answer(reply, result),
            Origin::Ext { ext, id } if caller == Caller::Listening => {
                let (content, is_error) = blocks_of(&result);
                let (content, truncated) = bounded(&content, RESULT_BUDGET, usize::MAX);
                let frame = HostFrame::ToolResult {
                    id: &id,
                    name: &j.name,
                    content: &content,
                    is_error,
                    truncated,
                };
                if self.exts[ext].serving() {
                    self.exts[ext].send(&frame, now);
                }
            }
            Origin::Ext { .. } => {}
        }
    }

    /// Abandons `job` wherever it is: its guards are forgotten, its
    /// extension told with `tool_cancel` (when it asked for that), and
    /// the job ends with `error`, which its caller gets if it listens.
    pub(super) fn abort_job(&mut self, job: u64, error: HostError, caller: Caller, now: Instant) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        match std::mem::replace(&mut j.at, At::Starting) {
            At::Guards(chain) => {
                if let Some(state) = self.chains.remove(&chain) {
                    for id in state.ids.iter().flatten() {
                        self.pending.cancel(id);
                    }
                }
            }
            At::Running { ext, id, .. } => {
                self.pending.cancel(&id);
                self.tool_cancel(ext, &id, &error.to_string(), now);
            }
            At::Starting | At::Builtin => {}
        }
        self.end_job(job, Err(error), caller, now);
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

    /// The embedder's cancel: the job under `ticket`, or a request held
    /// until startup ends. False when none is found.
    pub(super) fn cancel_ticket(&mut self, ticket: Ticket, now: Instant) -> bool {
        if let Some(job) = self.jobs.find(|j| j.ticket == Some(ticket)) {
            self.abort_job(job, HostError::CallCancelled, Caller::Listening, now);
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
            self.abort_job(job, error, Caller::Listening, now);
        }
    }

    /// Extension `ext` can take no more answers: the calls it made are
    /// abandoned (their tools get `tool_cancel`), unanswered.
    pub(super) fn drop_calls_of(&mut self, ext: usize, now: Instant) {
        for job in self
            .jobs
            .all(|j| matches!(j.origin, Origin::Ext { ext: e, .. } if e == ext))
        {
            self.abort_job(job, HostError::CallCancelled, Caller::GaveUp, now);
        }
    }

    /// A shutdown or reload ends the calls that would wait for it: the
    /// interactive ones and those the embedder runs (docs/PROTOCOL.md#interactive-tools).
    pub(super) fn end_open_ended(&mut self, error: &HostError, now: Instant) {
        let open = |j: &Job| {
            matches!(
                j.at,
                At::Running {
                    interactive: true,
                    ..
                } | At::Builtin
            )
        };
        for job in self.jobs.all(open) {
            self.abort_job(job, error.clone(), Caller::Listening, now);
        }
    }

    /// Ends every job (a reload replaced the extensions, or a stop at once).
    pub(super) fn fail_jobs(&mut self, error: &HostError, now: Instant) {
        for job in self.jobs.all(|_| true) {
            self.finish_job(job, Err(error.clone()), now);
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
                ext.log.line(&why);
                return self.answer_call(idx, "", "", refusal(why), now);
            }
        };
        let name = match call.name {
            Some(Value::String(name)) if !name.is_empty() => name,
            _ => {
                let why = "call_tool needs a non-empty string `name`".to_string();
                return self.answer_call(idx, &id, "", refusal(why), now);
            }
        };
        let refuse = |why: String| refusal(format!("call_tool {name}: {why}"));
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
            return self.answer_call(idx, &id, &name, refuse(why), now);
        }
        let args = match call.args {
            None | Some(Value::Null) => json!({}),
            Some(args @ Value::Object(_)) => args,
            Some(_) => {
                let why = "`args` must be a JSON object".to_string();
                return self.answer_call(idx, &id, &name, refuse(why), now);
            }
        };
        let (chain, parent) = match call.parent_id {
            Some(pid) => {
                let Some(parent) = self.jobs.serving(idx, &pid) else {
                    let why = format!(
                        "parent_id {pid:?} is not a tool_call this extension is serving (unknown or finished)"
                    );
                    return self.answer_call(idx, &id, &name, refuse(why), now);
                };
                let above = &self.jobs[parent];
                let mut chain = above.chain.clone();
                chain.push(above.name.clone());
                let repeated = chain.contains(&name);
                let shown = format!("{} -> {name}", chain.join(" -> "));
                if repeated {
                    let why = format!("a tool may not repeat in a chain ({shown})");
                    return self.answer_call(idx, &id, &name, refuse(why), now);
                }
                if chain.len() + 1 > MAX_CHAIN {
                    let why = format!("at most {MAX_CHAIN} tool calls in one chain ({shown})");
                    return self.answer_call(idx, &id, &name, refuse(why), now);
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
                    return self.answer_call(idx, &id, &name, refuse(why), now);
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
                return self.answer_call(idx, &id, &name, refuse(why.to_string()), now);
            }
        }
        let deadline = Some(later(now, self.cfg.timeouts.tool));
        let origin = Origin::Ext { ext: idx, id };
        let job = self.new_job(name, args, None, origin, None, chain, parent, deadline);
        // Journaled like the embedder's, its origin the extension.
        #[cfg(feature = "journal")]
        if let Err(e) = self.journal_accepted(job) {
            return self.finish_job(job, Err(e), now);
        }
        self.run_pipeline(job, now);
    }

    /// Answers extension `idx`'s `call_tool` `id` without a job.
    fn answer_call(
        &mut self,
        idx: usize,
        id: &str,
        name: &str,
        result: Result<ToolOutcome, HostError>,
        now: Instant,
    ) {
        let (content, is_error) = blocks_of(&result);
        let frame = HostFrame::ToolResult {
            id,
            name,
            content: &content,
            is_error,
            truncated: false,
        };
        if result.is_ok() {
            let text = content.first().and_then(Content::text);
            let text = text.unwrap_or("");
            self.exts[idx].log.line(&format!("refused: {text}"));
        }
        self.exts[idx].send(&frame, now);
    }

    /// `call_tool_cancel`: the caller gave up; it gets no answer.
    pub(super) fn call_tool_cancel(&mut self, idx: usize, id: &str, now: Instant) {
        let job = self
            .jobs
            .find(|j| matches!(&j.origin, Origin::Ext { ext, id: i } if *ext == idx && i == id));
        match job {
            Some(job) => self.abort_job(job, HostError::CallCancelled, Caller::GaveUp, now),
            None => self.exts[idx].log.line(&format!(
                "ignored call_tool_cancel: id {id:?} is not in flight"
            )),
        }
    }
}
