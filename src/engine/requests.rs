//! Requests from the embedder: commands, tools, events, panels, and
//! the interception chain (docs/PROTOCOL.md#interception). Each exchange with an
//! extension is here whole: the request frame, its answer, its timeout.

use super::chains::{ChainState, Then};
use super::ext::Ext;
use super::jobs::Origin;
use super::later::later;
use super::pending::{Owed, Waiter};
use super::state::HostState;
use super::Engine;
use crate::intercept::{answer_from, Answer, Chain, GuardReply, InterceptEvent, Step};
use crate::log::human;
use crate::types::{
    Action, CommandOutcome, HostError, Level, Reply, Request, Ticket, ToolOutcome, ToolRequest,
    ToolResult,
};
use crate::wire::protocol::{CommandResponse, EventPayload, HostFrame};
#[cfg(feature = "tool-extras")]
use crate::wire::tooldef;
use crate::wire::toolresult::{has_invalid_image, map_content, Block};
use serde_json::json;
#[cfg(any(feature = "tool-extras", feature = "journal"))]
use serde_json::Value;
use std::ops::Range;
use std::time::{Duration, Instant};

/// Whether a command or tool with an unknown name may wait for an
/// extension still starting to register it (docs/PROTOCOL.md#readiness).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Lookup {
    /// It may wait (parked), at most the hello timeout.
    MayWait,
    /// It is looked up now: it waited already, or cannot.
    Now,
}

impl Engine {
    /// Admits a request from the embedder at `now`: held during
    /// startup, refused once a shutdown began, else run.
    pub(super) fn request(&mut self, req: Request, now: Instant) {
        match req {
            _ if matches!(self.state, HostState::Done) => {
                return self.refuse(req, HostError::Stopped)
            }
            Request::ShutdownNow { reply } => return self.shutdown_now(reply, now),
            Request::Reload { .. } if self.state.reloading() => {
                return self.refuse(req, HostError::ReloadRunning)
            }
            _ => {}
        }
        // Until (re)started extensions are ready their registries are
        // incomplete: hold every request, in order, rather than fail it
        // or answer from half a registry. Startup is bounded by its
        // grace, so a held shutdown waits little. Later requests queue
        // behind the held ones: a `shutdown` must not overtake them.
        let stop = matches!(req, Request::Shutdown { .. } | Request::Reload { .. });
        if let Some(held) = self.state.held_mut() {
            held.push(req);
            // A held stop still cancels pending restarts at once (docs/PROTOCOL.md#supervision).
            if stop {
                self.cancel_restarts();
            }
            return;
        }
        match (&mut self.state, req) {
            (
                HostState::Draining { replies, .. } | HostState::Stopping { replies },
                Request::Shutdown { reply },
            ) => replies.push(reply),
            (state, req) if state.shutting_down() => self.refuse(req, HostError::ShuttingDown),
            (_, req) => self.execute(req, Lookup::MayWait, now),
        }
    }

    /// Runs a request. With [`Lookup::MayWait`], a command or tool whose
    /// name is unknown while an extension is still starting waits for it
    /// (docs/PROTOCOL.md#readiness), at most the hello timeout.
    pub(super) fn execute(&mut self, req: Request, lookup: Lookup, now: Instant) {
        // The name first: only a command or tool call can wait, and an
        // event (most requests) is not one, while names_may_come walks
        // every extension.
        if lookup == Lookup::MayWait && self.unknown_name(&req) && self.names_may_come() {
            let deadline = later(now, self.cfg.timeouts.hello);
            if let Some(parked) = self.state.parked_mut() {
                return parked.push((deadline, req));
            }
        }
        match req {
            Request::Command { name, args, reply } => self.invoke_command(name, &args, reply, now),
            Request::Tool {
                call,
                pipeline,
                reply,
            } => self.call_tool(call, pipeline, reply, None, now),
            Request::Cancellable { ticket, request } => match *request {
                Request::Tool {
                    call,
                    pipeline,
                    reply,
                } => self.call_tool(call, pipeline, reply, Some(ticket), now),
                // Only tool calls can be cancelled.
                other => self.execute(other, Lookup::Now, now),
            },
            Request::Cancel { ticket, reply } => {
                let found = self.cancel_ticket(ticket, now);
                self.answer(reply, Ok(found))
            }
            #[cfg(feature = "ext-calls")]
            Request::BuiltinResult {
                call_id,
                content,
                is_error,
                reply,
            } => {
                let waited = self.builtin_result(&call_id, content, is_error, now);
                self.answer(reply, Ok(waited))
            }
            Request::Intercept { request, reply } => {
                if let Some(field) = request.payload.reserved_field() {
                    return self.answer(reply, Err(HostError::ReservedField(field.into())));
                }
                let mut payload = request.payload;
                if request.event == InterceptEvent::BeforeAgentStart {
                    self.agent_start_fields(&mut payload);
                }
                self.start_chain(request.event.as_str(), payload, Then::Reply(reply), now);
            }
            Request::Emit {
                event,
                payload,
                reply,
            } => match payload.reserved_field() {
                Some(field) => self.answer(reply, Err(HostError::ReservedField(field.into()))),
                None => {
                    let delivered = self.emit(&event, &payload);
                    self.answer(reply, Ok(delivered))
                }
            },
            #[cfg(feature = "panels")]
            req @ (Request::PanelKey { .. }
            | Request::PanelResize { .. }
            | Request::PanelClose { .. }) => self.panel_request(req, now),
            Request::List { reply } => {
                let snapshot = self.snapshot();
                self.answer(reply, Ok(snapshot))
            }
            // Like a shutdown, accepted requests finish first
            // (advance); those waiting for a starting extension are
            // looked up again after the reload.
            Request::Reload { reply } => {
                self.cancel_restarts();
                let parked = self.state.parked_mut().map(std::mem::take);
                let held = parked.into_iter().flatten().map(|(_, req)| req).collect();
                self.state = HostState::Reloading {
                    reply,
                    stopped: None,
                    held,
                };
                // An interactive call would hold the reload up for ever.
                #[cfg(any(feature = "panels", feature = "ext-calls"))]
                self.end_open_ended(&HostError::Reloaded, now);
            }
            // Accepted requests finish first (advance); restarts are
            // cancelled at once (docs/PROTOCOL.md#supervision).
            Request::Shutdown { reply } => {
                self.cancel_restarts();
                let parked = self.state.parked_mut().map(std::mem::take);
                self.state = HostState::Draining {
                    replies: vec![reply],
                    parked: parked.unwrap_or_default(),
                };
                #[cfg(any(feature = "panels", feature = "ext-calls"))]
                self.end_open_ended(&HostError::ShuttingDown, now);
            }
            Request::ShutdownNow { reply } => self.shutdown_now(reply, now),
        }
    }

    /// A `before_agent_start` request carries the prompt (empty when the
    /// embedder gave none) and the run's identity (docs/PROTOCOL.md#system-prompt); the
    /// embedder's own values win.
    fn agent_start_fields(&mut self, payload: &mut EventPayload) {
        payload.system_prompt.get_or_insert_with(String::new);
        let fields = [
            ("session_id", self.session.id.clone()),
            ("agent_run_id", self.session.next_run()),
            ("cwd", self.session.cwd.clone()),
            ("provider", self.cfg.provider.clone()),
            ("model", self.cfg.model.clone()),
        ];
        for (key, value) in fields {
            payload.extra.entry(key).or_insert(value.into());
        }
    }

    /// A command or tool request for a name nobody has registered.
    fn unknown_name(&self, req: &Request) -> bool {
        if let Request::Cancellable { request, .. } = req {
            return self.unknown_name(request);
        }
        match req {
            Request::Command { name, .. } => {
                !self.host_command(name) && self.commands.owner(name).is_none()
            }
            Request::Tool { call, .. } => {
                !self.cfg.builtin_tools.contains(&call.name)
                    && self.tools.owner(&call.name).is_none()
            }
            _ => false,
        }
    }

    /// Whether `name` is one of the embedder's own commands, in any case.
    fn host_command(&self, name: &str) -> bool {
        (self.cfg.builtin_commands.iter()).any(|b| crate::wire::registry::same_command(b, name))
    }

    /// Some extension has not said hello or is still registering.
    pub(super) fn any_starting(&self) -> bool {
        self.exts.iter().any(Ext::loading)
    }

    /// Some extension may still register names: it is starting, or it
    /// has never been ready and a restart may follow
    /// (docs/PROTOCOL.md#readiness, docs/PROTOCOL.md#supervision).
    fn names_may_come(&self) -> bool {
        (self.exts.iter()).any(|e| e.loading() || e.restarting_before_ready())
    }

    /// Runs parked requests once no extension may register names any
    /// more, or at their deadline; a pending restart of an extension not
    /// yet ready holds them (its start extends their deadline). A name
    /// still unknown then fails with why such an extension failed.
    pub(super) fn run_parked(&mut self, now: Instant) {
        let Some(parked) = self.state.parked_mut().filter(|p| !p.is_empty()) else {
            return;
        };
        let parked = std::mem::take(parked);
        let waiting = self.names_may_come();
        let restarting = self.exts.iter().any(Ext::restarting_before_ready);
        for (deadline, req) in parked {
            if waiting && (deadline > now || restarting) {
                if let Some(parked) = self.state.parked_mut() {
                    parked.push((deadline, req));
                }
                continue;
            }
            let failed = (self.exts.iter())
                .find_map(|e| e.failed_before_ready().map(|why| (e, why)))
                .filter(|_| self.unknown_name(&req));
            let failed = failed.map(|(ext, why)| HostError::StartFailed {
                extension: ext.name.clone(),
                reason: why.clone(),
            });
            match failed {
                Some(error) => self.refuse(req, error),
                None => self.execute(req, Lookup::Now, now),
            }
        }
    }

    /// Registers `waiter` for the answer to request `id`, within `limit`,
    /// once it was `sent` to extension `idx` (the caller sends it: the
    /// frame borrows what the engine holds). When it could not be sent,
    /// the waiter fails at once.
    pub(super) fn track_request(
        &mut self,
        idx: usize,
        id: String,
        sent: bool,
        waiter: Waiter,
        limit: Duration,
        now: Instant,
    ) {
        if sent {
            return self.pending.register(id, idx, limit, waiter, now);
        }
        let ext = &self.exts[idx];
        match waiter.fail(HostError::NotServing(ext.name.clone()), &mut self.actions) {
            Some(Owed::Guard(chain, pos)) => {
                let answer = ext.unavailable(&ext.why_unavailable());
                if let Some(state) = self.chains.get_mut(chain) {
                    state.chain.answer(pos, answer);
                }
            }
            Some(Owed::Tool(job, error)) => self.finish_job(job, Err(error), now),
            None => {}
        }
    }

    /// Takes the request an `answer` frame names, or logs why it is dropped.
    pub(super) fn take_answer(&mut self, idx: usize, id: &str, answer: &str) -> Option<Waiter> {
        let log = &self.exts[idx].log;
        let dropped = |why| log.line(&format!("dropped {answer}: {why}"));
        self.pending.take(idx, id, answer).map_err(dropped).ok()
    }

    // ----- command_invoked / command_response ----------------------

    fn invoke_command(
        &mut self,
        name: String,
        args: &str,
        reply: Reply<CommandOutcome>,
        now: Instant,
    ) {
        if self.host_command(&name) {
            return self.answer(reply, Err(HostError::HostCommand(name)));
        }
        // Case-insensitive; the extension gets its own spelling
        // (docs/PROTOCOL.md#names-and-precedence).
        let Some((idx, name)) = (self.commands.owner(&name)).map(|c| (c.rank, c.name.clone()))
        else {
            return self.answer(reply, Err(HostError::UnknownCommand(name)));
        };
        let id = self.pending.new_id();
        let args = args.trim();
        let frame = HostFrame::CommandInvoked {
            id: &id,
            name: &name,
            args,
        };
        let ext = &mut self.exts[idx];
        let sent = ext.serving() && ext.send(&frame, now);
        let limit = self.cfg.timeouts.command;
        self.track_request(idx, id, sent, Waiter::Command { name, reply }, limit, now);
    }

    pub(super) fn command_response(&mut self, idx: usize, r: CommandResponse) {
        let Some(Waiter::Command { reply, .. }) = self.take_answer(idx, &r.id, "command_response")
        else {
            return;
        };
        let extension = self.exts[idx].name.clone();
        let action = r.action.unwrap_or_default();
        // An error is shown and the action skipped, on every surface, as
        // upstream does: the outcome carries the error alone.
        let error = match r.error.filter(|e| !e.is_empty()) {
            Some(error) => error,
            #[cfg(feature = "tool-extras")]
            None if action == "tool_prompt" => {
                match tooldef::tool_prompt_fields(r.tool_name, r.tool_args) {
                    Ok((name, args)) => {
                        let outcome = CommandOutcome {
                            extension,
                            action: Action::ToolPrompt,
                            prompt: r.prompt,
                            tool_name: Some(name),
                            tool_args: Some(args),
                            ..Default::default()
                        };
                        return self.answer(reply, Ok(outcome));
                    }
                    Err(why) => {
                        self.exts[idx].log.line(&format!("command_response: {why}"));
                        why
                    }
                }
            }
            None if Action::parse(&action).is_some() => {
                let outcome = CommandOutcome {
                    extension,
                    action: Action::parse(&action).unwrap_or_default(),
                    prompt: r.prompt,
                    insert: r.insert,
                    display: r.display,
                    #[cfg(feature = "panels")]
                    open_panel: r.open_panel,
                    ..Default::default()
                };
                return self.answer(reply, Ok(outcome));
            }
            // A panel this build cannot show: the command is still
            // answered, with its `display` text if it has one.
            #[cfg(not(feature = "panels"))]
            None if action == "open_panel" => {
                self.exts[idx].log.line(
                    "command_response: `open_panel`: this build has no panels \
                     (the `panels` feature): not opened",
                );
                let outcome = CommandOutcome {
                    extension,
                    action: match r.display {
                        Some(_) => Action::Display,
                        None => Action::Noop,
                    },
                    display: r.display,
                    ..Default::default()
                };
                return self.answer(reply, Ok(outcome));
            }
            None => {
                // An action this build leaves out is refused as an
                // unknown one is, naming the feature it needs.
                let why = match action.as_str() {
                    #[cfg(not(feature = "tool-extras"))]
                    "tool_prompt" => {
                        crate::build::needs_feature("action `tool_prompt`", "tool-extras")
                    }
                    _ => format!("unknown action {action:?}"),
                };
                self.exts[idx].log.line(&format!("command_response: {why}"));
                why
            }
        };
        let outcome = CommandOutcome {
            extension,
            action: Action::Noop,
            error: Some(error),
            ..Default::default()
        };
        self.answer(reply, Ok(outcome));
    }

    // ----- tool_call / tool_result ----------------------------------

    fn call_tool(
        &mut self,
        call: ToolRequest,
        pipeline: bool,
        reply: Reply<ToolOutcome>,
        ticket: Option<Ticket>,
        now: Instant,
    ) {
        let name = call.name;
        let builtin = self.cfg.builtin_tools.contains(&name);
        if builtin && !pipeline {
            return self.answer(reply, Err(HostError::BuiltInTool(name)));
        }
        let owner = self.tools.owner(&name);
        if owner.is_none() && !builtin {
            return self.answer(reply, Err(HostError::UnknownTool(name)));
        }
        // Upstream offers a deferred tool once it is activated only.
        #[cfg(feature = "tool-extras")]
        if owner.is_some_and(|c| !c.info.active) && !builtin {
            return self.answer(reply, Err(HostError::InactiveTool(name)));
        }
        // The owner, if the tool is interactive.
        #[cfg(feature = "panels")]
        let interactive = owner.and_then(|c| c.info.interactive.then_some(c.rank));
        #[cfg(feature = "panels")]
        if let Some(rank) = interactive.filter(|_| !self.cfg.interactive_tools) {
            let text = format!("tool {name} is interactive and needs an interactive host");
            let outcome = ToolOutcome::Ran(ToolResult {
                extension: self.exts[rank].name.clone(),
                content: vec![crate::wire::toolresult::text_block(&text)],
                is_error: true,
                ..Default::default()
            });
            return self.answer(reply, Ok(outcome));
        }
        let args = Some(call.args).filter(|a| !a.is_null());
        let args = args.unwrap_or_else(|| json!({}));
        let origin = Origin::Embedder(reply);
        let job = self.new_job(name, args, call.tool_id, origin, ticket);
        #[cfg(feature = "journal")]
        if let Some(j) = self.jobs.get_mut(job) {
            j.operation_key = call.operation_key;
            j.reconcile = call.reconcile;
        }
        #[cfg(feature = "journal")]
        if let Err(e) = self.journal_accepted(job) {
            return self.finish_job(job, Err(e), now);
        }
        match pipeline {
            true => self.run_pipeline(job, now),
            false => self.dispatch_tool(job, now),
        }
    }

    /// A `tool_result`: `content`, `is_error`, and with the `tool-extras`
    /// feature `structured_content` and the tools it activates, before its
    /// caller hears of it (so that the caller may call them next). A
    /// dropped one activates nothing. With the `journal` feature
    /// `structured_content` is also a reconcile answer's state; without
    /// either it is not read.
    pub(super) fn tool_result(
        &mut self,
        idx: usize,
        id: &str,
        (content, is_error): (Option<Vec<Block>>, bool),
        #[cfg(any(feature = "tool-extras", feature = "journal"))] structured: Option<Value>,
        #[cfg(feature = "tool-extras")] activate: Vec<String>,
        now: Instant,
    ) {
        let Some(Waiter::Tool { job }) = self.take_answer(idx, id, "tool_result") else {
            return;
        };
        let content = content.unwrap_or_default();
        // An image the model cannot be given makes the result an error.
        let is_error = is_error || has_invalid_image(&content);
        #[cfg(feature = "tool-extras")]
        let declares_output = self.answered_extras(idx, job, activate);
        let content = map_content(content);
        #[cfg(feature = "journal")]
        let (content, reconciled) = self.reconciled(job, content, structured.as_ref());
        let outcome = ToolOutcome::Ran(ToolResult {
            extension: self.exts[idx].name.clone(),
            content,
            is_error,
            #[cfg(feature = "tool-extras")]
            structured_content: structured,
            #[cfg(feature = "tool-extras")]
            declares_output,
            #[cfg(feature = "journal")]
            reconciled,
            ..Default::default()
        });
        self.finish_job(job, Ok(outcome), now);
    }

    /// Fails the requests whose time is up; a guard counts as unavailable.
    pub(super) fn expire(&mut self, now: Instant) {
        for (id, idx, limit, waiter) in self.pending.expired(now) {
            let ext = &self.exts[idx];
            let within = format!("within {}", human(limit));
            // The log names the frame the extension owes, for its author.
            let (request, owed) = match &waiter {
                Waiter::Command { name, .. } => {
                    (format!("/{name}"), format!("command_response for /{name}"))
                }
                Waiter::Tool { job } => {
                    let name = self.jobs.get_mut(*job).map(|j| j.name.clone());
                    let name = name.unwrap_or_default();
                    ext.log.line(&format!("no tool_result for {name} {within}"));
                    let error = HostError::TimedOut {
                        extension: ext.name.clone(),
                        request: format!("tool {name}"),
                        limit,
                    };
                    let job = *job;
                    if let Some(j) = self.jobs.get_mut(job) {
                        j.at = super::jobs::At::Starting;
                    }
                    self.tool_cancel(idx, &id, &format!("no tool_result {within}"), now);
                    self.finish_job(job, Err(error), now);
                    continue;
                }
                Waiter::Guard { chain, pos } => {
                    let answer = ext.unavailable(&format!("no answer {within}"));
                    self.answer_guard(*chain, *pos, answer, now);
                    continue;
                }
            };
            let extension = ext.name.clone();
            ext.log.line(&format!("no {owed} {within}"));
            let error = HostError::TimedOut {
                extension,
                request,
                limit,
            };
            waiter.fail(error, &mut self.actions);
        }
    }

    // ----- events ----------------------------------------------------

    /// Whether an extension would be sent `event` now ([`Engine::emit`]'s
    /// test): a caller can skip building a payload nobody gets.
    pub(super) fn subscribed(&self, event: &str) -> bool {
        (self.exts.iter()).any(|e| e.serving() && e.event_set.contains(event))
    }

    /// Queues `event` to every subscriber; returns their names.
    pub(super) fn emit(&mut self, event: &str, payload: &EventPayload) -> Vec<String> {
        let sequence = self.session.next_sequence();
        // The embedder's own `session_id` or `cwd` (say, a subagent's) wins.
        let given = |key: &str| payload.extra.contains_key(key);
        let frame = HostFrame::Event {
            event,
            sequence,
            session_id: Some(self.session.id.as_str()).filter(|_| !given("session_id")),
            cwd: Some(self.session.cwd.as_str()).filter(|_| !given("cwd")),
            payload,
        };
        // Written once, and only when someone subscribes: most events
        // (a tool call's, say) have no subscriber.
        let mut line = None;
        let limit = self.cfg.event_queue_limit;
        let mut delivered = Vec::new();
        for ext in &mut self.exts {
            if !ext.serving() || !ext.event_set.contains(event) {
                continue;
            }
            if ext.backlog() > limit {
                if ext.dropped_events.count() {
                    ext.log.line(&format!(
                        "not reading its stdin: dropping events (queue over {limit} bytes)"
                    ));
                }
                continue;
            }
            if let Some(total) = ext.dropped_events.end() {
                ext.log
                    .line(&format!("reading again; {total} events dropped so far"));
            }
            if ext.send_line(line.get_or_insert_with(|| frame.to_line())) {
                delivered.push(ext.name.clone());
            }
        }
        delivered
    }

    // ----- event_intercept / event_intercept_response ---------------

    pub(super) fn start_chain(
        &mut self,
        event: &str,
        payload: EventPayload,
        then: Then,
        now: Instant,
    ) {
        let guards: Vec<usize> = (0..self.exts.len())
            .filter(|&i| self.exts[i].guards(event))
            .collect();
        let n = guards.len();
        let state = ChainState {
            chain: Chain::new(event, payload, n),
            guards,
            ids: vec![None; n],
            then,
        };
        let first = state.chain.first_round();
        let id = self.chains.start(state);
        self.ask(id, first, now);
        self.drive(id, now);
    }

    /// Sends `event_intercept` to the guards at `positions` with the
    /// chain's current value; one deadline for the whole round.
    fn ask(&mut self, chain: u64, positions: Range<usize>, now: Instant) {
        for pos in positions {
            let Some(state) = self.chains.get_mut(chain) else {
                return;
            };
            let id = self.pending.new_id();
            if let Some(old) = state.ids[pos].replace(id.clone()) {
                self.pending.cancel(&old);
            }
            let frame = HostFrame::EventIntercept {
                id: &id,
                event: &state.chain.event,
                payload: &state.chain.payload,
            };
            let idx = state.guards[pos];
            let ext = &mut self.exts[idx];
            let sent = ext.answers_guard() && ext.send(&frame, now);
            let limit = self.cfg.timeouts.intercept;
            self.track_request(idx, id, sent, Waiter::Guard { chain, pos }, limit, now);
        }
    }

    /// A guard's `event_intercept_response`.
    pub(super) fn guard_response(&mut self, idx: usize, id: &str, reply: GuardReply, now: Instant) {
        let answer_frame = "event_intercept_response";
        if let Some(Waiter::Guard { chain, pos }) = self.take_answer(idx, id, answer_frame) {
            let Some(state) = self.chains.get(chain) else {
                return;
            };
            let ext = &self.exts[idx];
            let answer = answer_from(&state.chain.event, reply, &ext.name);
            if let Answer::Unusable(why) = &answer {
                ext.log.line(why);
            }
            self.answer_guard(chain, pos, answer, now);
        }
    }

    /// Records the answer of the guard at `pos` and walks the chain on.
    pub(super) fn answer_guard(&mut self, chain: u64, pos: usize, answer: Answer, now: Instant) {
        // A tool call's guard verdicts are journaled one by one.
        #[cfg(feature = "journal")]
        if let Some(ChainState {
            then: Then::RunTool { job },
            guards,
            ..
        }) = self.chains.get(chain)
        {
            let (job, guard) = (*job, self.exts[guards[pos]].name.clone());
            if let Err(e) = self.journal_guard(job, &guard, &answer) {
                return self.finish_job(job, Err(e), now);
            }
        }
        if let Some(state) = self.chains.get_mut(chain) {
            state.chain.answer(pos, answer);
            self.drive(chain, now);
        }
    }

    fn drive(&mut self, chain: u64, now: Instant) {
        let outcome = loop {
            let Some(state) = self.chains.get_mut(chain) else {
                return;
            };
            match state.chain.advance() {
                Step::Wait => return,
                Step::Ask(range) => self.ask(chain, range, now),
                Step::Done(outcome) => break outcome,
            }
        };
        let Some(mut state) = self.chains.remove(chain) else {
            return;
        };
        for id in state.ids.iter().flatten() {
            self.pending.cancel(id);
        }
        // Before the reply, so the embedder hears why first (docs/PROTOCOL.md#ordering).
        for message in &outcome.warnings {
            let (level, message) = (Level::Warn, message.clone());
            self.event(crate::types::HostEvent::HostNote { level, message });
        }
        let job = match state.then {
            Then::Reply(reply) => return self.answer(reply, Ok(outcome)),
            Then::RunTool { job } => job,
        };
        let args = state.chain.payload.tool_args.take().unwrap_or(json!({}));
        self.guards_done(job, outcome, args, now);
    }
}
