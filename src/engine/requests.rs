//! Requests from the embedder: commands, tools, events, panels, and
//! the interception chain (SPEC 3.9-3.12).

use super::{later, ChainState, Engine, Ext, Goal, Pending, PendingKind, Then};
use crate::intercept::{Answer, Chain, Step, INTERCEPTABLE};
use crate::protocol::{EventPayload, HostFrame};
use crate::types::{CommandOutcome, HostError, Reply, Request, ToolOutcome, ToolRequest};
use serde_json::Value;
use std::time::Instant;

impl Engine {
    /// Admits a request from the embedder: held during startup, refused
    /// once a shutdown began, else run.
    pub(super) fn request(&mut self, req: Request) {
        let now = Instant::now();
        if let Request::ShutdownNow { reply } = req {
            return self.shutdown_now(reply);
        }
        if matches!(req, Request::Reload { .. }) && self.reloading() {
            return req.fail(HostError::ReloadRunning);
        }
        // Until (re)started extensions are ready their registries are
        // incomplete: hold every request, in order, rather than fail it
        // or answer from half a registry. Startup is bounded by its
        // grace, so a held shutdown waits little. Requests that arrive
        // after startup but before the held ones are replayed queue
        // behind them: a `shutdown` must not overtake what came first.
        if self.starting() || !self.deferred.is_empty() {
            return self.deferred.push(req);
        }
        let stopping = self.closing.is_some() || matches!(self.goal, Some(Goal::Shutdown(_)));
        match req {
            Request::Shutdown { reply } if stopping => match (&mut self.closing, &mut self.goal) {
                (Some(replies), _) | (None, Some(Goal::Shutdown(replies))) => replies.push(reply),
                _ => reply(Ok(())),
            },
            // Accepted requests finish first (check_drained).
            Request::Shutdown { reply } => {
                // At once, not when the accepted requests are done (SPEC 12).
                self.cancel_restarts();
                self.closing = Some(vec![reply]);
            }
            req if stopping => req.fail(HostError::ShuttingDown),
            req => self.execute(req, true, now),
        }
    }

    /// Runs a request. With `may_wait`, a command or tool whose name is
    /// unknown while an extension is still starting waits for it (SPEC
    /// 3.6), at most the hello timeout.
    pub(super) fn execute(&mut self, req: Request, may_wait: bool, now: Instant) {
        if may_wait && self.unknown_name(&req) && self.any_starting() {
            let deadline = later(now, self.cfg.timeouts.hello);
            return self.parked.push((deadline, req));
        }
        match req {
            Request::Command { name, args, reply } => self.invoke_command(&name, &args, reply, now),
            Request::Tool {
                call,
                pipeline,
                reply,
            } => self.call_tool(call, pipeline, reply, now),
            Request::Intercept { request, reply } => {
                if !INTERCEPTABLE.contains(&request.event.as_str()) {
                    return reply(Err(HostError::NotInterceptable(request.event)));
                }
                self.start_chain(&request.event, request.payload, Then::Reply(reply), now);
            }
            Request::Emit {
                event,
                payload,
                reply,
            } => reply(Ok(self.emit(&event, &payload))),
            Request::PanelKey {
                extension,
                panel_id,
                key,
                text,
                reply,
            } => {
                let frame = HostFrame::PanelKey {
                    panel_id: &panel_id,
                    key: &key,
                    text: text.as_deref(),
                };
                reply(self.send_to(&extension, frame.to_line()));
            }
            Request::PanelClose {
                extension,
                panel_id,
                reply,
            } => reply(
                self.send_to(
                    &extension,
                    HostFrame::PanelClose {
                        panel_id: &panel_id,
                    }
                    .to_line(),
                ),
            ),
            Request::List { reply } => reply(Ok(self.snapshot())),
            Request::Reload { reply } => self.begin_stop(Goal::Reload(reply, 0)),
            Request::Shutdown { reply } => self.begin_stop(Goal::Shutdown(vec![reply])),
            Request::ShutdownNow { reply } => self.shutdown_now(reply),
        }
    }

    /// A command or tool request for a name nobody has registered.
    fn unknown_name(&self, req: &Request) -> bool {
        match req {
            Request::Command { name, .. } => {
                !self.cfg.builtin_commands.contains(name) && self.commands.owner(name).is_none()
            }
            Request::Tool { call, .. } => {
                !self.cfg.builtin_tools.contains(&call.name)
                    && self.tools.owner(&call.name).is_none()
            }
            _ => false,
        }
    }

    /// Some extension has not said hello or is still registering.
    pub(super) fn any_starting(&self) -> bool {
        self.exts.iter().any(Ext::loading)
    }

    /// Looks the names of parked requests up again once no extension is
    /// starting any more, or their wait is over.
    pub(super) fn run_parked(&mut self, now: Instant) {
        if self.parked.is_empty() {
            return;
        }
        let starting = self.any_starting();
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|(deadline, _)| !starting || *deadline <= now);
        self.parked = wait;
        for (_, req) in due {
            self.execute(req, false, now);
        }
    }

    pub(super) fn starting(&self) -> bool {
        self.startup.is_some() || matches!(self.goal, Some(Goal::Reload(..)))
    }

    /// Whether a reload is stopping or restarting the extensions.
    pub(super) fn reloading(&self) -> bool {
        matches!(self.goal, Some(Goal::Reload(..)))
            || self.startup.as_ref().is_some_and(|s| s.reload.is_some())
    }

    pub(super) fn run_deferred(&mut self) {
        if self.done {
            for req in std::mem::take(&mut self.deferred) {
                req.fail(HostError::Stopped);
            }
        }
        if self.starting() || self.deferred.is_empty() {
            return;
        }
        // In order; a held reload that starts again holds the rest anew.
        for req in std::mem::take(&mut self.deferred) {
            self.request(req);
        }
    }

    pub(super) fn send_to(&mut self, extension: &str, line: Vec<u8>) -> Result<(), HostError> {
        let ext = self
            .exts
            .iter_mut()
            .find(|e| e.name == extension && e.serving())
            .ok_or_else(|| HostError::NoSuchExtension(extension.to_string()))?;
        if ext.send(&line) {
            Ok(())
        } else {
            Err(HostError::NotServing(extension.to_string()))
        }
    }

    pub(super) fn next_id(&mut self) -> String {
        self.next_id += 1;
        self.next_id.to_string()
    }

    pub(super) fn invoke_command(
        &mut self,
        name: &str,
        args: &str,
        reply: Reply<CommandOutcome>,
        now: Instant,
    ) {
        if self.cfg.builtin_commands.iter().any(|b| b == name) {
            return reply(Err(HostError::HostCommand(name.to_string())));
        }
        let Some(idx) = self.commands.owner(name).map(|c| c.rank) else {
            return reply(Err(HostError::UnknownCommand(name.to_string())));
        };
        let id = self.next_id();
        let line = HostFrame::CommandInvoked {
            id: &id,
            name,
            args: args.trim(),
        }
        .to_line();
        let kind = PendingKind::Command {
            name: name.to_string(),
            reply,
        };
        self.send_request(idx, id, &line, later(now, self.cfg.timeouts.command), kind);
    }

    /// Sends a request frame and records it as pending until `deadline`;
    /// fails it at once when the extension cannot take it.
    pub(super) fn send_request(
        &mut self,
        idx: usize,
        id: String,
        line: &[u8],
        deadline: Instant,
        kind: PendingKind,
    ) {
        let ext = &mut self.exts[idx];
        if !ext.serving() || !ext.send(line) {
            return kind.fail(HostError::NotServing(ext.name.clone()));
        }
        self.pending.insert(
            id,
            Pending {
                ext: idx,
                deadline,
                kind,
            },
        );
    }

    pub(super) fn call_tool(
        &mut self,
        call: ToolRequest,
        pipeline: bool,
        reply: Reply<ToolOutcome>,
        now: Instant,
    ) {
        let builtin = self.cfg.builtin_tools.contains(&call.name);
        if builtin && !pipeline {
            return reply(Err(HostError::BuiltInTool(call.name)));
        }
        if !builtin && self.tools.owner(&call.name).is_none() {
            return reply(Err(HostError::UnknownTool(call.name)));
        }
        let args = if call.args.is_null() {
            Value::Object(Default::default())
        } else {
            call.args
        };
        if !pipeline {
            return self.dispatch_tool(&call.name, args, reply, now);
        }
        let tool_id = call
            .tool_id
            .unwrap_or_else(|| format!("call-{}", self.next_id + 1));
        let payload = EventPayload {
            tool_id: Some(tool_id),
            tool_name: Some(call.name.clone()),
            tool_args: Some(args),
            ..Default::default()
        };
        self.emit("tool_call", &payload);
        // One pipeline for every surface (SPEC 3.11, 7): a built-in tool
        // gets the same event and guards; the embedder then runs it.
        let then = if builtin {
            Then::Builtin(reply)
        } else {
            Then::Tool {
                name: call.name,
                reply,
            }
        };
        self.start_chain("tool_call", payload, then, now);
    }

    pub(super) fn dispatch_tool(
        &mut self,
        name: &str,
        args: Value,
        reply: Reply<ToolOutcome>,
        now: Instant,
    ) {
        let Some(idx) = self.tools.owner(name).map(|c| c.rank) else {
            return reply(Err(HostError::UnknownTool(name.to_string())));
        };
        let id = self.next_id();
        let line = HostFrame::ToolCall {
            id: &id,
            name,
            args: &args,
        }
        .to_line();
        let kind = PendingKind::Tool {
            name: name.to_string(),
            reply,
        };
        self.send_request(idx, id, &line, later(now, self.cfg.timeouts.tool), kind);
    }

    /// Queues `event` to every subscriber; returns their names.
    pub(super) fn emit(&mut self, event: &str, payload: &EventPayload) -> Vec<String> {
        let line = HostFrame::Event { event, payload }.to_line();
        let limit = self.cfg.event_queue_limit;
        let mut delivered = Vec::new();
        for ext in &mut self.exts {
            if !ext.serving() || !ext.event_set.contains(event) {
                continue;
            }
            if ext.backlog() > limit {
                ext.dropped_events += 1;
                if !ext.dropping {
                    ext.dropping = true;
                    ext.log.line(&format!(
                        "not reading its stdin: dropping events (queue over {limit} bytes)"
                    ));
                }
                continue;
            }
            if ext.dropping {
                ext.dropping = false;
                ext.log.line(&format!(
                    "reading again; {} events dropped so far",
                    ext.dropped_events
                ));
            }
            if ext.send(&line) {
                delivered.push(ext.name.clone());
            }
        }
        delivered
    }

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
        let id = self.next_chain;
        self.next_chain += 1;
        self.chains.insert(
            id,
            ChainState {
                chain: Chain::new(event, payload, n),
                guards,
                ids: vec![None; n],
                then: Some(then),
            },
        );
        self.ask(id, 0..n, now);
        self.drive(id, now);
    }

    /// Sends `event_intercept` to the guards at `positions` with the
    /// chain's current value; one deadline for the whole round.
    pub(super) fn ask(&mut self, chain: u64, positions: std::ops::Range<usize>, now: Instant) {
        let deadline = later(now, self.cfg.timeouts.intercept);
        for pos in positions {
            let id = self.next_id();
            let Some(state) = self.chains.get_mut(&chain) else {
                return;
            };
            if let Some(old) = state.ids[pos].take() {
                self.pending.remove(&old);
            }
            let idx = state.guards[pos];
            let line = HostFrame::EventIntercept {
                id: &id,
                event: &state.chain.event,
                payload: &state.chain.payload,
            }
            .to_line();
            let ext = &mut self.exts[idx];
            if ext.answers_guard() && ext.send(&line) {
                state.ids[pos] = Some(id.clone());
                self.pending.insert(
                    id,
                    Pending {
                        ext: idx,
                        deadline,
                        kind: PendingKind::Guard { chain, pos },
                    },
                );
            } else {
                state
                    .chain
                    .answer(pos, ext.unavailable(&ext.why_unavailable()));
            }
        }
    }

    /// Records the answer of the guard at `pos` (given, timed out, or
    /// gone) and walks the chain as far as it now goes.
    pub(super) fn answer_guard(&mut self, chain: u64, pos: usize, answer: Answer, now: Instant) {
        if let Some(state) = self.chains.get_mut(&chain) {
            state.ids[pos] = None;
            state.chain.answer(pos, answer);
            self.drive(chain, now);
        }
    }

    pub(super) fn drive(&mut self, chain: u64, now: Instant) {
        loop {
            let Some(state) = self.chains.get_mut(&chain) else {
                return;
            };
            match state.chain.advance() {
                Step::Wait => return,
                Step::Ask(range) => self.ask(chain, range, now),
                Step::Done(outcome) => {
                    let Some(mut state) = self.chains.remove(&chain) else {
                        return;
                    };
                    for id in state.ids.iter().flatten() {
                        self.pending.remove(id);
                    }
                    let args = state.chain.payload.tool_args.take();
                    match state.then.take() {
                        Some(Then::Reply(reply)) => reply(Ok(outcome)),
                        Some(Then::Builtin(reply)) => reply(Ok(ToolOutcome {
                            is_error: outcome.block,
                            blocked: outcome.block,
                            reason: outcome.reason.filter(|_| outcome.block),
                            builtin: true,
                            args: Some(args.unwrap_or_else(|| Value::Object(Default::default()))),
                            ..Default::default()
                        })),
                        Some(Then::Tool { name, reply }) => {
                            if outcome.block {
                                let reason = outcome.reason.unwrap_or_default();
                                let extension = self
                                    .tools
                                    .owner(&name)
                                    .map_or_else(String::new, |c| self.exts[c.rank].name.clone());
                                reply(Ok(ToolOutcome {
                                    extension,
                                    content: vec![
                                        serde_json::json!({"type": "text", "text": reason}),
                                    ],
                                    is_error: true,
                                    blocked: true,
                                    reason: Some(reason),
                                    ..Default::default()
                                }));
                            } else {
                                let args =
                                    args.unwrap_or_else(|| Value::Object(Default::default()));
                                self.dispatch_tool(&name, args, reply, now);
                            }
                        }
                        None => {}
                    }
                    return;
                }
            }
        }
    }
}
