//! Frames from extensions: handshake, registrations, answers, notes.

use super::action::Probe;
use super::exit::Handshake;
use super::ext::{Claims, Phase, Stage};
#[cfg(feature = "ext-calls")]
use super::extcalls::CallTool;
use super::later::later;
use super::{Engine, MAX_NAMES, MAX_NAME_BYTES};
use crate::intercept::{GuardReply, InterceptEvent, INTERCEPTABLE};
use crate::log::ExtLog;
use crate::process::{Inbound, InboundMsg};
use crate::types::{HostEvent, Level, NameKind, ReadyVia, ToolInfo};
use crate::wire::protocol::{
    ExtFrame, HostFrame, EVENT_NAMES, HOST_CAPABILITIES, PROTOCOL_VERSION,
};
use crate::wire::registry::{self, footprint, Registry};
use crate::wire::tooldef::tool_info;
use std::time::Instant;

impl Engine {
    /// The extension a process key stands for, while it is that
    /// extension's current run.
    pub(super) fn ext_of(&self, key: u64) -> Option<usize> {
        self.keys.idx(key)
    }

    /// A message from extension process `msg.key`'s threads, at `now`;
    /// with the end of its stdout and with its exit, what the driver then
    /// saw of the process (`probe`).
    pub(super) fn inbound(&mut self, msg: InboundMsg, probe: Option<Probe>, now: Instant) {
        let Some(idx) = self.ext_of(msg.key) else {
            return; // from an extension of before a reload
        };
        match msg.msg {
            Inbound::Frame(frame) => self.frame(idx, frame, now),
            Inbound::Eof => {
                if let Phase::Running(run) = &mut self.exts[idx].phase {
                    let handshake = match run.stage {
                        Stage::AwaitingHello { .. } => Some(Handshake::Before),
                        Stage::Registering { .. } | Stage::Ready => Some(Handshake::After),
                        // Being killed or stopped: on their own deadlines.
                        Stage::Killed(_) | Stage::Stopping { .. } => None,
                    };
                    run.exit.stdout_closed(now, handshake, &self.cfg.timeouts);
                }
                // Exited already: every frame it wrote has come. Else its
                // exit comes as its own message.
                let known = self.exts[idx].run().and_then(|r| r.exit.exit_status());
                if let Some(status) = probe.and_then(|p| p.exited).or(known) {
                    self.exited(idx, status, now);
                }
            }
            // Its status is there (std keeps it once reaped, whoever
            // reaped it); were the look to fail, nothing is known.
            Inbound::Exited => {
                if let Some(status) = probe.and_then(|p| p.exited) {
                    self.exit_found(idx, status, now);
                }
            }
            #[cfg(feature = "mcp")]
            Inbound::Line(line) => self.mcp_line(idx, &line, now),
            #[cfg(feature = "mcp")]
            Inbound::LineTooLong { len, head } => self.mcp_too_long(idx, len, &head, now),
            Inbound::WriteFailed(e) => {
                let ext = &mut self.exts[idx];
                ext.log.line(&format!("cannot write to stdin: {e}"));
                ext.out.clear();
                self.close_stdin(idx);
                self.release(idx, None, "stdin closed", now);
                // Its commands and tools may still be answered (it read
                // them, or it is exiting): not at once, not at their timeout.
                if let Phase::Running(run) = &mut self.exts[idx].phase {
                    run.exit.write_failed(now, &self.cfg.timeouts);
                }
            }
        }
    }

    pub(super) fn frame(&mut self, idx: usize, frame: ExtFrame, now: Instant) {
        let ext = &mut self.exts[idx];
        let Phase::Running(run) = &mut ext.phase else {
            return;
        };
        // It exited and its pipe is still draining: wait on.
        run.exit.frame_came(now, &self.cfg.timeouts);
        match &mut run.stage {
            Stage::AwaitingHello { .. } => {
                return match frame {
                    ExtFrame::Unreadable { kind, why, .. } if kind == "hello" => {
                        self.fail(idx, format!("first frame {why}"), now)
                    }
                    // Logged already; like a line that is no frame, it
                    // does not fail the handshake.
                    ExtFrame::Unreadable { .. } => {}
                    ExtFrame::Hello { name, .. } if name.trim().is_empty() => {
                        self.fail(idx, "hello has an empty name".into(), now)
                    }
                    ExtFrame::Hello {
                        name,
                        version,
                        capabilities,
                    } => self.hello(idx, &name, version, capabilities.unwrap_or_default(), now),
                    other => self.fail(
                        idx,
                        format!("first frame was `{}`, expected `hello`", other.kind()),
                        now,
                    ),
                };
            }
            // Failed already, or being stopped before it said hello: its
            // hello would only get an ack after the shutdown frame.
            Stage::Killed(_) | Stage::Stopping { hello: false, .. } => return,
            Stage::Registering { ready_at } => {
                *ready_at = later(now, self.cfg.timeouts.ready_idle);
            }
            Stage::Ready | Stage::Stopping { hello: true, .. } => {}
        }
        match frame {
            ExtFrame::Hello { .. } => ext.log.line("ignored a second hello"),
            ExtFrame::RegisterCommand { name, description } => {
                self.register(idx, &name, Entry::Command(description.unwrap_or_default()))
            }
            ExtFrame::RegisterTool {
                name,
                description,
                schema,
                extra,
            } => {
                let description = description.unwrap_or_default();
                #[cfg(feature = "journal")]
                if let Some(why) = crate::wire::tooldef::replay_warning(&extra) {
                    ext.log.line(&format!("tool {name:?}: {why}"));
                }
                // No panel shows here for the user to answer through:
                // the tool keeps the normal deadline (docs/PROTOCOL.md#interactive-tools).
                #[cfg(not(feature = "panels"))]
                if extra.interactive == Some(true) {
                    let why = crate::build::needs_feature("`interactive: true`", "panels");
                    ext.log.line(&format!(
                        "tool {name:?}: {why}: registered as an ordinary tool, with the tool deadline"
                    ));
                }
                let tool = tool_info(&name, description, schema, extra, &ext.name);
                match tool {
                    Ok(tool) => self.register(idx, &name, Entry::Tool(Box::new(tool))),
                    Err(why) => ext.log.line(&format!("rejected tool {name:?}: {why}")),
                }
            }
            ExtFrame::Subscribe { events, intercept } => self.subscribe(
                idx,
                events.unwrap_or_default(),
                intercept.unwrap_or_default(),
            ),
            ExtFrame::Ready => self.mark_ready(idx, ReadyVia::Ready, now),
            ExtFrame::CommandResponse(r) => self.command_response(idx, r),
            ExtFrame::ToolResult {
                id,
                content,
                is_error,
                #[cfg(any(feature = "tool-extras", feature = "journal"))]
                structured_content,
                #[cfg(feature = "tool-extras")]
                activate_tools,
            } => self.tool_result(
                idx,
                &id,
                (content, is_error.unwrap_or(false)),
                #[cfg(any(feature = "tool-extras", feature = "journal"))]
                structured_content,
                #[cfg(feature = "tool-extras")]
                activate_tools.unwrap_or_default(),
                now,
            ),
            ExtFrame::EventInterceptResponse {
                id,
                block,
                reason,
                modified_args,
                replace_text,
                system_prompt,
            } => {
                let reply = GuardReply {
                    block,
                    reason,
                    modified_args,
                    replace_text,
                    system_prompt,
                };
                self.guard_response(idx, &id, reply, now);
            }
            #[cfg(feature = "ext-calls")]
            ExtFrame::CallTool {
                id,
                name,
                args,
                parent_id,
            } => {
                let call = CallTool {
                    id,
                    name,
                    args,
                    parent_id,
                };
                self.call_tool_frame(idx, call, now)
            }
            #[cfg(feature = "ext-calls")]
            ExtFrame::CallToolCancel { id } => self.call_tool_cancel(idx, &id, now),
            #[cfg(not(feature = "ext-calls"))]
            ExtFrame::CallTool { id, name, .. } => self.call_tool_unbuilt(idx, id, name, now),
            #[cfg(not(feature = "ext-calls"))]
            ExtFrame::CallToolCancel { id } => ext.log.line(&format!(
                "ignored call_tool_cancel {id:?}: {}",
                super::pipeline::no_ext_calls()
            )),
            ExtFrame::Notify { level, message } => {
                let level = match level.as_deref().map(Level::parse) {
                    Some(Some(level)) => level,
                    None => Level::Info,
                    Some(None) => {
                        ext.log.line(&format!(
                            "notify level {:?} is not info/success/warn/error; shown as info",
                            level.unwrap_or_default()
                        ));
                        Level::Info
                    }
                };
                self.offer_event(idx, |extension| HostEvent::Notify {
                    extension,
                    level,
                    message,
                });
            }
            ExtFrame::ClearNotes => {
                self.offer_event(idx, |extension| HostEvent::ClearNotes { extension })
            }
            #[cfg(feature = "panels")]
            frame @ (ExtFrame::PanelRender(_)
            | ExtFrame::PanelClose { .. }
            | ExtFrame::OpenPanel(_)) => self.panel_frame(idx, frame),
            #[cfg(feature = "panels")]
            frame @ (ExtFrame::Submit { .. } | ExtFrame::SubmitSlash { .. }) => {
                self.submit_frame(idx, frame)
            }
            ExtFrame::ShutdownAck if matches!(ext.stage(), Some(Stage::Stopping { .. })) => {
                self.close_stdin(idx)
            }
            ExtFrame::ShutdownAck => ext.log.line("ignored shutdown_ack: no shutdown was sent"),
            ExtFrame::UnregisterCommand { name } => self.unregister(idx, NameKind::Command, &name),
            ExtFrame::UnregisterTool { name } => self.unregister(idx, NameKind::Tool, &name),
            ExtFrame::Unreadable { kind, id, why } => self.unreadable(idx, &kind, &id, &why, now),
        }
    }

    /// Offers a note or panel update of extension `idx` to the embedder;
    /// what the budget refuses is counted in that extension's log.
    pub(super) fn offer_event(&mut self, idx: usize, event: impl FnOnce(String) -> HostEvent) {
        let ext = &mut self.exts[idx];
        let taken = (self.events).offer(event(ext.name.clone()), &mut self.actions);
        if !taken {
            if ext.dropped_notes.count() {
                ext.log.line(&format!(
                    "the embedder is not taking events: dropping notes and panel updates (over {} bytes wait)",
                    self.cfg.event_budget
                ));
            }
        } else if let Some(total) = ext.dropped_notes.end() {
            ext.log.line(&format!(
                "the embedder takes events again; {total} notes and panel updates dropped so far"
            ));
        }
    }

    fn hello(
        &mut self,
        idx: usize,
        name: &str,
        version: Option<String>,
        capabilities: Vec<String>,
        now: Instant,
    ) {
        let ext = &mut self.exts[idx];
        // Exact names only; the others are ignored (docs/PROTOCOL.md#capabilities).
        ext.tool_cancel = capabilities.iter().any(|c| c == "tool_cancel");
        #[cfg(feature = "ext-calls")]
        {
            ext.call_tool = capabilities.iter().any(|c| c == "call_tool");
        }
        if name != ext.name {
            ext.log.line(&format!(
                "hello says name {name:?}, manifest says {:?}; using the manifest's",
                ext.name
            ));
        }
        let mut data_dir = None;
        if let Phase::Running(run) = &mut ext.phase {
            let ready_at = later(now, self.cfg.timeouts.ready_idle);
            run.stage = Stage::Registering { ready_at };
            data_dir = run
                .data_dir
                .as_ref()
                .map(|d| d.to_string_lossy().into_owned());
        }
        if ext.version.is_none() {
            ext.version = version;
        }
        let dir = ext.dir.to_string_lossy().into_owned();
        // Confined, its data directory is its own, outside `dir`.
        let data_dir = data_dir.unwrap_or_else(|| dir.clone());
        let frame = HostFrame::HelloAck {
            protocol_version: PROTOCOL_VERSION,
            zot_version: &self.cfg.zot_version,
            provider: &self.cfg.provider,
            model: &self.cfg.model,
            cwd: &self.session.cwd,
            extension_dir: &dir,
            data_dir: &data_dir,
            capabilities: HOST_CAPABILITIES,
        };
        ext.send(&frame, now);
    }

    /// A `register_command` or a (validated) `register_tool`.
    fn register(&mut self, idx: usize, name: &str, entry: Entry) {
        let tool = matches!(entry, Entry::Tool(_));
        let (kind, shown, builtin) = match tool {
            true => (NameKind::Tool, name.to_string(), &self.cfg.builtin_tools),
            false => (
                NameKind::Command,
                format!("/{name}"),
                &self.cfg.builtin_commands,
            ),
        };
        let ext = &mut self.exts[idx];
        if !registry::valid_name(name) {
            return ext.log.line(&format!(
                "rejected {kind} {name:?}: names must be non-empty without whitespace"
            ));
        }
        let same = |b: &String| match tool {
            true => b == name,
            false => registry::same_command(b, name),
        };
        if builtin.iter().any(same) {
            // Built-in names are few: each is recorded once at most.
            if !ext
                .lost_to_builtin
                .iter()
                .any(|(k, n)| *k == kind && n == name)
            {
                ext.lost_to_builtin.push((kind, name.to_string()));
            }
            return ext.log.line(&format!(
                "{kind} {shown} is shadowed by the built-in {kind}"
            ));
        }
        // Command names differ only in case: the first spelling stays
        // (docs/PROTOCOL.md#names-and-precedence).
        if let Some(first) = (self.commands.spelling_of(name, idx)).filter(|s| !tool && *s != name)
        {
            return ext.log.line(&format!(
                "command {shown} ignored: /{first} is registered already, and command \
                 names are case-insensitive"
            ));
        }
        let shadow = match entry {
            Entry::Tool(info) => {
                let claims = &mut ext.tools_claimed;
                claim(
                    &mut self.tools,
                    claims,
                    &ext.log,
                    (kind.as_str(), name, idx),
                    *info,
                )
            }
            Entry::Command(d) => {
                let claims = &mut ext.commands_claimed;
                claim(
                    &mut self.commands,
                    claims,
                    &ext.log,
                    (kind.as_str(), name, idx),
                    d,
                )
            }
        };
        let Some((shadowed, by)) = shadow else {
            return;
        };
        let now = if shadowed == idx { "" } else { "now " };
        // Each side as it spelled the name (commands differ in case).
        let spelled = |rank| match tool {
            true => name,
            false => self.commands.spelling_of(name, rank).unwrap_or(name),
        };
        let (loser, winner) = (spelled(shadowed), spelled(by));
        let (shown, winner) = match tool {
            true => (loser.to_string(), String::new()),
            false if loser == winner => (format!("/{loser}"), String::new()),
            false => (format!("/{loser}"), format!("'s /{winner}")),
        };
        self.exts[shadowed].log.line(&format!(
            "{kind} {shown} is {now}shadowed by extension {}{winner} (higher precedence)",
            self.exts[by].name
        ));
    }

    /// An MCP server's prompt or tool left its list: its claim goes, and
    /// with it what the claim counted against the caps.
    fn unregister(&mut self, idx: usize, kind: NameKind, name: &str) {
        let ext = &mut self.exts[idx];
        let (claims, bytes) = match kind {
            NameKind::Tool => (
                &mut ext.tools_claimed,
                self.tools.release(name, idx).map(|t| t.footprint(name)),
            ),
            NameKind::Command => (
                &mut ext.commands_claimed,
                self.commands.release(name, idx).map(|c| c.footprint(name)),
            ),
        };
        if let Some(bytes) = bytes {
            claims.count -= 1;
            claims.bytes -= bytes;
        }
    }

    /// Linear in the names given, whatever their number.
    fn subscribe(&mut self, idx: usize, events: Vec<String>, intercept: Vec<String>) {
        let ext = &mut self.exts[idx];
        if !intercept.is_empty() {
            // A restarted guard's own subscriptions replace its last run's.
            ext.forget_remembered_intercept();
        }
        let mut over = 0usize;
        let mut unknown = Vec::new();
        for e in events {
            if ext.event_set.contains(&e) {
                continue;
            }
            if !EVENT_NAMES.contains(&e.as_str()) && unknown.len() < 3 {
                unknown.push(e.clone());
            }
            if ext.events.len() >= MAX_NAMES || ext.event_bytes + e.len() > MAX_NAME_BYTES {
                over += 1;
            } else {
                ext.event_bytes += e.len();
                ext.event_set.insert(e.clone());
                ext.events.push(e);
            }
        }
        if over > 0 {
            ext.log.line(&format!(
                "subscribe: {over} event names beyond the cap ({MAX_NAMES} names, {} MiB) ignored",
                MAX_NAME_BYTES >> 20
            ));
        }
        if !unknown.is_empty() {
            // Kept: an embedder may emit any name (docs/PROTOCOL.md#events).
            ext.log.line(&format!(
                "subscribe: {} not among the known events ({}); only an embedder emits it",
                unknown.join(", "),
                EVENT_NAMES.join(", ")
            ));
        }
        let mut refused = Vec::new();
        for e in intercept {
            match InterceptEvent::parse(&e) {
                None => refused.push(e),
                Some(event) if !ext.intercept.contains(&event) => ext.intercept.push(event),
                Some(_) => {}
            }
        }
        if let Some(first) = refused.first() {
            let more = match refused.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            let why = match EVENT_NAMES.contains(&first.as_str()) {
                true => "an observational event",
                false => "not an event zot knows",
            };
            ext.log.line(&format!(
                "cannot intercept {first:?}{more}: {why}; only {} can be intercepted",
                INTERCEPTABLE.join(", ")
            ));
        }
    }
}

/// What a registration frame asks to claim.
enum Entry {
    /// A command's description.
    Command(String),
    Tool(Box<ToolInfo>),
}

/// Claims `name` (`kind` `command` or `tool`) for extension `idx` in
/// `names`, within the caps of its `claims`; returns who is shadowed
/// by whom.
fn claim<T: Footprint>(
    names: &mut Registry<T>,
    claims: &mut Claims,
    log: &ExtLog,
    (kind, name, idx): (&str, &str, usize),
    info: T,
) -> Option<(usize, usize)> {
    let old = names.claim_of(name, idx).map(|o| o.footprint(name));
    let bytes = claims.bytes - old.unwrap_or(0) + info.footprint(name);
    let over = match (old, claims.count) {
        (None, n) if n >= MAX_NAMES => format!("more than {MAX_NAMES} {kind}s"),
        _ if bytes > MAX_NAME_BYTES => {
            format!("more than {} MiB of {kind}s", MAX_NAME_BYTES >> 20)
        }
        _ => String::new(),
    };
    if !over.is_empty() {
        if !std::mem::replace(&mut claims.capped, true) {
            log.line(&format!("{over} registered: the rest are ignored"));
        }
        return None;
    }
    claims.count += usize::from(old.is_none());
    claims.bytes = bytes;
    names.claim(name, idx, info)
}

/// About the bytes a registration holds in memory, against
/// [`MAX_NAME_BYTES`].
pub(super) trait Footprint {
    fn footprint(&self, name: &str) -> usize;
}

impl Footprint for String {
    fn footprint(&self, name: &str) -> usize {
        footprint(name, self, &None)
    }
}

impl Footprint for ToolInfo {
    #[cfg(not(feature = "tool-extras"))]
    fn footprint(&self, name: &str) -> usize {
        footprint(name, &self.description, &self.schema)
    }

    #[cfg(feature = "tool-extras")]
    fn footprint(&self, name: &str) -> usize {
        let texts = [
            &self.namespace,
            &self.namespace_description,
            &self.namespace_instructions,
        ];
        let texts: usize = texts
            .iter()
            .filter_map(|t| t.as_ref())
            .map(String::len)
            .sum();
        footprint(name, &self.description, &self.schema)
            + footprint("", "", &self.output_schema)
            + texts
    }
}
