//! One extension run the way the host runs it, step by step, each step
//! adding its findings to the report.

use super::child::{Child, Seen};
use super::opts::{Opts, Probe};
use super::report::{human, Report};
use super::schema::schema_problem;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};
use zot_host::internal::confine::Confinement;
use zot_host::internal::manifest::Manifest;
use zot_host::internal::process::{describe_status, group_alive};
use zot_host::internal::protocol::{CommandResponse, ExtFrame, HostFrame, PROTOCOL_VERSION};
use zot_host::internal::registry::{self, footprint, MAX_NAMES, MAX_NAME_BYTES};
use zot_host::internal::tooldef;
use zot_host::internal::toolresult::{is_empty_text, map_content, Block};
use zot_host::{Content, HostConfig, Timeouts};
use zot_host::{EventPayload, InterceptEvent};
#[cfg(feature = "tool-extras")]
use zot_host::{Exposure, ToolInfo};

/// Lifecycle events zot knows (docs/PROTOCOL.md#events), each sent with a harmless payload.
use zot_host::internal::protocol::EVENT_NAMES as EVENTS;

/// After a dropped stdout line, how long an awaited answer still gets:
/// the dropped line was most likely that answer, malformed.
const AFTER_DROPPED: Duration = Duration::from_secs(1);

/// Dropped stdout lines named one by one; the rest are counted.
const DROPPED_SHOWN: usize = 5;

pub(super) fn run(
    opts: &Opts,
    manifest: &Manifest,
    dir: &Path,
    exe: &Path,
    log: &Path,
    confine: Option<&Confinement>,
    report: &mut Report,
) {
    let t = Instant::now();
    let proc = match Child::spawn(exe, &manifest.args, dir, log, confine) {
        Ok(p) => p,
        Err(e) => {
            let f = report.fail(
                "spawn",
                t.elapsed(),
                format!("cannot start {}: {e}", exe.display()),
            );
            if e.kind() == std::io::ErrorKind::NotFound {
                f.hint("the file exists, so the interpreter on its #! line was not found");
            }
            return;
        }
    };
    let mut trial = Trial {
        proc,
        report,
        config: opts.config.clone(),
        name: manifest.name.clone(),
        spawned: t,
        dropped: Vec::new(),
        frames: 0,
        eof: false,
        status: None,
        next_id: 0,
        commands: Names::default(),
        tools: Names::default(),
        upstream: String::new(),
        events: Vec::new(),
        intercept: Vec::new(),
        acked_at: None,
        registered_at: None,
        ready: false,
    };
    let dir = dir.to_string_lossy();
    // Confined, it has a data directory of its own, as in the host.
    let data_dir = confine.map(|c| c.data_dir.to_string_lossy());
    let data_dir = data_dir.as_deref().unwrap_or(&dir);
    if trial.handshake(&opts.cwd.to_string_lossy(), &dir, data_dir) {
        trial.registration();
        trial.events();
        trial.intercepts();
        for probe in &opts.probes {
            trial.probe(probe);
        }
        trial.shutdown();
    } else {
        trial.kill();
    }
    trial.stdout_rule();
}

/// What the reader said next. Nearly always a frame, so boxing it would
/// only add an allocation per frame.
#[allow(clippy::large_enum_variant)]
enum Next {
    Frame(ExtFrame),
    /// A stdout line that is not a frame (recorded for the stdout rule);
    /// true when it starts like a `hello`.
    Dropped(bool),
    /// Nothing before the deadline.
    Quiet,
    /// stdout ended.
    Closed,
}

/// One extension being checked.
struct Trial<'a> {
    proc: Child,
    report: &'a mut Report,
    /// The host's defaults: limits, built-in names, `hello_ack` fields.
    config: HostConfig,
    name: String,
    spawned: Instant,
    /// Why each dropped stdout line was dropped, and when.
    dropped: Vec<(String, Instant)>,
    frames: usize,
    eof: bool,
    status: Option<ExitStatus>,
    next_id: u64,
    commands: Names,
    tools: Names,
    /// What the tool being registered declares of upstream's optional fields
    /// (docs/PROTOCOL.md#structured-and-deferred-tools), for its line.
    upstream: String,
    events: Vec<String>,
    intercept: Vec<String>,
    acked_at: Option<Instant>,
    /// When the last registration frame came.
    registered_at: Option<Instant>,
    ready: bool,
}

impl Trial<'_> {
    fn limits(&self) -> &Timeouts {
        &self.config.timeouts
    }

    fn next(&mut self, deadline: Instant) -> Next {
        while !self.eof {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(seen) = self.proc.seen.recv_timeout(left) else {
                return Next::Quiet;
            };
            match seen {
                Seen::Frame(frame) => {
                    self.frames += 1;
                    return Next::Frame(frame);
                }
                Seen::Dropped(why, hello) => {
                    self.dropped.push((why, Instant::now()));
                    return Next::Dropped(hello);
                }
                Seen::Eof => self.eof = true,
                Seen::WriteFailed(e) => {
                    self.report.fail(
                        "stdin",
                        Duration::ZERO,
                        format!("writing to its stdin failed: {e}"),
                    );
                }
            }
        }
        Next::Closed
    }

    fn send(&mut self, frame: HostFrame) -> bool {
        self.proc.send(frame.to_line())
    }

    fn id(&mut self) -> String {
        self.next_id += 1;
        format!("check-{}", self.next_id)
    }

    /// ` (exit code 3)` once the process has exited, else empty.
    fn exit_note(&mut self) -> String {
        // Stdout closes as the process exits, so the exit is normally a
        // moment away; a loaded machine can take far longer than 100 ms
        // to reap it, and the report would then lack the exit status.
        let deadline = Instant::now() + Duration::from_secs(2);
        match self.wait_exit(deadline) {
            Some(status) => format!(" ({})", describe_status(status)),
            None => String::new(),
        }
    }

    /// Waits until the process exits or `deadline`; frames that arrive
    /// meanwhile are handled as usual. The exit has no event of its own
    /// to wait for, so it is polled, more rarely as time goes by.
    fn wait_exit(&mut self, deadline: Instant) -> Option<ExitStatus> {
        let mut pause = Duration::from_millis(1);
        loop {
            if self.status.is_none() {
                self.status = self.proc.try_wait();
            }
            let now = Instant::now();
            if self.status.is_some() || now >= deadline {
                return self.status;
            }
            let until = deadline.min(now + pause);
            if self.eof {
                std::thread::sleep(until - now);
            } else if let Next::Frame(frame) = self.next(until) {
                self.observe(frame);
            }
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        self.proc.signal_group(libc::SIGKILL);
        let deadline = Instant::now() + self.limits().term_grace;
        self.wait_exit(deadline);
    }

    /// `hello` first, then `hello_ack`. False when the host would fail it.
    fn handshake(&mut self, cwd: &str, dir: &str, data_dir: &str) -> bool {
        let mut deadline = self.spawned + self.limits().hello;
        let frame = loop {
            match self.next(deadline) {
                Next::Frame(frame) => break frame,
                Next::Dropped(true) => {
                    let took = self.spawned.elapsed();
                    let why = self.dropped.last().map_or("", |(why, _)| why.as_str());
                    let msg =
                        format!("its hello cannot be read, so the host fails the extension: {why}");
                    self.report.fail("hello", took, msg).hint(
                        "fix that line: hello has `name`, and optionally `version` (a string) \
                         and `capabilities` (a list of strings)",
                    );
                    return false;
                }
                Next::Dropped(false) => deadline = deadline.min(Instant::now() + AFTER_DROPPED),
                Next::Quiet => {
                    let msg = if self.dropped.is_empty() {
                        format!("no hello within {}", human(self.limits().hello))
                    } else {
                        "no valid hello: a stdout line was dropped (see stdout)".into()
                    };
                    self.report.fail("hello", self.spawned.elapsed(), msg).hint(
                        "send {\"type\":\"hello\",\"name\":...} as the very first stdout line, \
                         and flush",
                    );
                    return false;
                }
                Next::Closed => {
                    let took = self.spawned.elapsed();
                    let note = self.exit_note();
                    self.report
                        .fail("hello", took, format!("stdout closed before hello{note}"));
                    return false;
                }
            }
        };
        let took = self.spawned.elapsed();
        let name = match frame {
            ExtFrame::Hello { name, .. } if !name.trim().is_empty() => name,
            ExtFrame::Hello { .. } => {
                self.report.fail("hello", took, "hello has an empty name");
                return false;
            }
            other => {
                self.report
                    .fail(
                        "hello",
                        took,
                        format!(
                            "first frame was `{}`, expected `hello`: the host fails the extension",
                            other.kind()
                        ),
                    )
                    .hint("send hello first, register only after hello_ack");
                return false;
            }
        };
        self.report.pass(
            "hello",
            took,
            format!(
                "hello {name:?} within the {} limit",
                human(self.limits().hello)
            ),
        );
        if name != self.name {
            self.report
                .warn(
                    "hello",
                    Duration::ZERO,
                    format!(
                        "hello says {name:?}, the manifest {:?}: the host uses the manifest's",
                        self.name
                    ),
                )
                .hint("use the manifest's name in hello");
        }
        let cfg = &self.config;
        let line = HostFrame::HelloAck {
            protocol_version: PROTOCOL_VERSION,
            zot_version: &cfg.zot_version,
            provider: &cfg.provider,
            model: &cfg.model,
            cwd,
            extension_dir: dir,
            data_dir,
            capabilities: zot_host::internal::protocol::HOST_CAPABILITIES,
        }
        .to_line();
        self.proc.send(line);
        self.acked_at = Some(Instant::now());
        true
    }

    /// Frames after `hello_ack` until `ready`, or the startup grace.
    /// After the host's idle watchdog would have fired it keeps waiting
    /// for a late `ready`: on a starved machine a template that does
    /// send one must not be reported as relying on the watchdog.
    fn registration(&mut self) {
        let acked = self.acked_at.unwrap_or_else(Instant::now);
        let cap = acked + self.limits().startup;
        let mut last = acked;
        let mut went_quiet = false;
        loop {
            let until = if went_quiet {
                cap
            } else {
                (last + self.limits().ready_idle).min(cap)
            };
            match self.next(until) {
                Next::Frame(ExtFrame::Ready) => {
                    self.ready = true;
                    self.ready_in_time(acked.elapsed());
                    return;
                }
                Next::Frame(frame) => {
                    last = Instant::now();
                    self.observe(frame);
                }
                Next::Dropped(_) => last = Instant::now(),
                Next::Closed => return, // reported by shutdown
                Next::Quiet if Instant::now() < cap => went_quiet = true,
                Next::Quiet if !went_quiet => {
                    self.report.warn(
                        "ready",
                        acked.elapsed(),
                        format!(
                            "no ready, still sending frames after {}: the host stops waiting",
                            human(self.limits().startup)
                        ),
                    );
                    return;
                }
                Next::Quiet => {
                    self.report
                        .warn(
                            "ready",
                            acked.elapsed(),
                            format!(
                                "no ready frame: the host relies on its {} idle watchdog",
                                human(self.limits().ready_idle)
                            ),
                        )
                        .hint(
                        "send {\"type\":\"ready\"} after the registrations: every start gets faster",
                    );
                    return;
                }
            }
        }
    }

    /// Reports the `ready` that came. The host's startup waits at most
    /// its grace from the start: only names that came later are missing
    /// from it, so a `ready` alone after the grace (a loaded machine) is
    /// no warning. The measured times are said either way.
    fn ready_in_time(&mut self, took: Duration) {
        let grace = self.limits().startup;
        let since_spawn = self.spawned.elapsed();
        let mut msg = format!("ready {} after it was started", human(since_spawn));
        let last = self.registered_at.map(|t| t.duration_since(self.spawned));
        if since_spawn > grace && last.is_none_or(|l| l <= grace) {
            msg += &format!(
                " (after the {} startup grace, but every name came within it)",
                human(grace)
            );
        }
        self.report.pass("ready", took, msg);
        if let Some(last) = last.filter(|l| *l > grace) {
            let msg = format!(
                "registered names until {} after it was started, later than the host's {} \
                 startup grace: the host's startup goes on without them",
                human(last),
                human(grace)
            );
            self.report.warn("ready", Duration::ZERO, msg);
        }
    }

    /// Handles a frame that is not the one a step waits for.
    fn observe(&mut self, frame: ExtFrame) {
        if self.acked_at.is_none() {
            return; // the handshake failed: the host reads no further
        }
        let since = self.acked_at.map_or(Duration::ZERO, |t| t.elapsed());
        if matches!(
            frame,
            ExtFrame::RegisterCommand { .. }
                | ExtFrame::RegisterTool { .. }
                | ExtFrame::Subscribe { .. }
        ) {
            self.registered_at = Some(Instant::now());
        }
        match frame {
            ExtFrame::Hello { .. } => {
                self.report
                    .warn("hello", since, "a second hello: the host ignores it");
            }
            ExtFrame::RegisterCommand { name, description } => {
                self.register(Kind::Command, name, description, None, since)
            }
            ExtFrame::RegisterTool {
                name,
                description,
                schema,
                extra,
            } => match tooldef::tool_info(&name, String::new(), None, extra, "") {
                #[cfg(feature = "tool-extras")]
                Ok(info) => {
                    self.upstream = upstream_fields(&info);
                    self.register(Kind::Tool, name, description, Some(schema), since)
                }
                #[cfg(not(feature = "tool-extras"))]
                Ok(_) => self.register(Kind::Tool, name, description, Some(schema), since),
                Err(why) => {
                    let why = format!("{why}: the host rejects the registration");
                    self.report.fail(&format!("tool {name}"), since, why);
                }
            },
            ExtFrame::Subscribe { events, intercept } => self.subscribe(
                events.unwrap_or_default(),
                intercept.unwrap_or_default(),
                since,
            ),
            ExtFrame::Ready if self.ready => {
                self.report
                    .warn("ready", since, "a second ready: the host ignores it");
            }
            ExtFrame::Ready => self.ready = true,
            ExtFrame::Notify { level, .. } => {
                if let Some(level) =
                    level.filter(|l| !["info", "success", "warn", "error"].contains(&l.as_str()))
                {
                    self.report.warn(
                        "notify",
                        since,
                        format!("level {level:?} is not info/success/warn/error: shown as info"),
                    );
                }
            }
            ExtFrame::CommandResponse(CommandResponse { id, .. })
            | ExtFrame::ToolResult { id, .. }
            | ExtFrame::EventInterceptResponse { id, .. } => {
                self.report.fail(
                    "answers",
                    since,
                    format!("an answer to id {id:?}, which nobody asked: the host drops it"),
                );
            }
            ExtFrame::ShutdownAck => {
                self.report.warn(
                    "shutdown",
                    since,
                    "shutdown_ack before any shutdown: the host ignores it",
                );
            }
            // Notes and panels are for the user; the unregister frames
            // come only from the MCP adapter, never from a zot extension.
            ExtFrame::ClearNotes
            | ExtFrame::UnregisterCommand { .. }
            | ExtFrame::UnregisterTool { .. }
            | ExtFrame::Unreadable { .. }
            | ExtFrame::CallTool { .. }
            | ExtFrame::CallToolCancel { .. } => {}
            #[cfg(feature = "panels")]
            ExtFrame::OpenPanel(_)
            | ExtFrame::PanelRender(_)
            | ExtFrame::PanelClose { .. }
            | ExtFrame::Submit { .. }
            | ExtFrame::SubmitSlash { .. } => {}
        }
    }

    fn register(
        &mut self,
        kind: Kind,
        name: String,
        description: Option<String>,
        schema: Option<Option<Value>>,
        since: Duration,
    ) {
        let (what, builtins, seen) = match kind {
            Kind::Command => ("command", &self.config.builtin_commands, &mut self.commands),
            Kind::Tool => ("tool", &self.config.builtin_tools, &mut self.tools),
        };
        let rule = match kind {
            Kind::Command => format!("command /{name}"),
            Kind::Tool => format!("tool {name}"),
        };
        if !registry::valid_name(&name) {
            let msg = format!("name {name:?} is empty or has whitespace: the host rejects it");
            self.report.fail(&rule, since, msg);
            return;
        }
        if seen.set.contains(&name) {
            self.report
                .fail(&rule, since, format!("{what} {name} is registered twice"));
            return;
        }
        // Command names are case-insensitive
        // (docs/PROTOCOL.md#names-and-precedence): the host keeps the first.
        let folded = name.to_lowercase();
        let first = match kind {
            Kind::Command => seen.by_folded.get(&folded),
            Kind::Tool => None,
        };
        if let Some(first) = first {
            let msg = format!(
                "command /{name} differs from /{first} only in case: command names are \
                 case-insensitive, so the host keeps /{first} and ignores this one"
            );
            self.report.fail(&rule, since, msg);
            return;
        }
        // The host's caps: past them it ignores the rest (logged once).
        let bytes = seen.bytes
            + footprint(
                &name,
                description.as_deref().unwrap_or(""),
                &schema.clone().flatten(),
            );
        if seen.list.len() >= MAX_NAMES || bytes > MAX_NAME_BYTES {
            if !std::mem::replace(&mut seen.capped, true) {
                let msg = format!(
                    "more than {MAX_NAMES} {what}s or {} MiB of them: the host ignores the rest",
                    MAX_NAME_BYTES >> 20
                );
                self.report.warn("registrations", since, msg);
            }
            return;
        }
        seen.bytes = bytes;
        seen.set.insert(name.clone());
        seen.by_folded.entry(folded).or_insert_with(|| name.clone());
        seen.list.push(name.clone());
        if builtins.iter().any(|b| match kind {
            Kind::Command => registry::same_command(b, &name),
            Kind::Tool => *b == name,
        }) {
            self.report.warn(
                &rule,
                since,
                format!("the built-in {what} {name} shadows it: the host ignores it"),
            );
            return;
        }
        let mut problems = 0;
        if description.as_deref().is_none_or(|d| d.trim().is_empty()) {
            problems += 1;
            let who = match kind {
                Kind::Command => "/help shows nothing for it",
                Kind::Tool => "the model cannot tell when to use it",
            };
            self.report
                .fail(&rule, since, format!("no description: {who}"));
        }
        match schema {
            Some(None) => {
                problems += 1;
                self.report
                    .warn(
                        &rule,
                        since,
                        "no schema: the model is told nothing of its arguments",
                    )
                    .hint(
                    "add \"schema\": {\"type\":\"object\",\"properties\":{...},\"required\":[...]}",
                );
            }
            Some(Some(schema)) => {
                if let Some(problem) = schema_problem(&schema) {
                    problems += 1;
                    self.report.fail(&rule, since, format!("schema: {problem}"));
                }
            }
            None => {}
        }
        let upstream = std::mem::take(&mut self.upstream);
        if problems == 0 {
            let msg = match kind {
                Kind::Command => "registered with a description".to_string(),
                Kind::Tool => {
                    format!("registered with a description and a JSON Schema object{upstream}")
                }
            };
            self.report.pass(&rule, since, msg);
        }
    }

    fn subscribe(&mut self, events: Vec<String>, intercept: Vec<String>, since: Duration) {
        let mut clean = true;
        for e in events {
            if !EVENTS.contains(&e.as_str()) {
                clean = false;
                let msg = format!("unknown event {e:?}: zot emits {}", EVENTS.join(", "));
                self.report.warn("subscribe", since, msg);
            } else if !self.events.contains(&e) {
                self.events.push(e);
            }
        }
        for e in intercept {
            if InterceptEvent::parse(&e).is_none() {
                clean = false;
                let msg = format!(
                    "cannot intercept {e:?}: only {}; the host ignores it",
                    InterceptEvent::NAMES.join(", ")
                );
                self.report.warn("subscribe", since, msg);
            } else if !self.intercept.contains(&e) {
                self.intercept.push(e);
            }
        }
        if clean {
            let list = |l: &[String]| {
                if l.is_empty() {
                    "-".to_string()
                } else {
                    l.join(", ")
                }
            };
            let msg = format!(
                "events: {}; intercept: {}",
                list(&self.events),
                list(&self.intercept)
            );
            self.report.pass("subscribe", since, msg);
        }
    }

    /// Sends each subscribed event once.
    fn events(&mut self) {
        for event in self.events.clone() {
            let t = Instant::now();
            let payload = harmless(&event);
            let cwd = self.config.cwd.to_string_lossy().into_owned();
            self.next_id += 1;
            let sent = self.send(HostFrame::Event {
                event: &event,
                sequence: self.next_id,
                session_id: Some("zot-ext-check"),
                cwd: Some(&cwd),
                payload: &payload,
            });
            let rule = format!("event {event}");
            if sent {
                self.report.pass(&rule, t.elapsed(), "sent once");
            } else {
                self.report
                    .fail(&rule, t.elapsed(), "cannot be sent: its stdin is closed");
            }
        }
    }

    /// Asks each subscribed intercept once, with a harmless payload.
    fn intercepts(&mut self) {
        for event in self.intercept.clone() {
            let id = self.id();
            let payload = harmless(&event);
            let rule = format!("intercept {event}");
            let t = Instant::now();
            self.send(HostFrame::EventIntercept {
                id: &id,
                event: &event,
                payload: &payload,
            });
            let limit = self.limits().intercept;
            match self.answer(&id, "event_intercept_response", limit) {
                Ok(ExtFrame::EventInterceptResponse {
                    block,
                    reason,
                    modified_args,
                    replace_text,
                    ..
                }) => {
                    let verdict = match (block.unwrap_or(false), reason) {
                        (true, Some(r)) => format!("block ({r})"),
                        (true, None) => "block".to_string(),
                        (false, _) if modified_args.is_some() => "allow, rewriting the args".into(),
                        (false, _) if replace_text.is_some() => "allow, replacing the text".into(),
                        (false, _) => "allow".to_string(),
                    };
                    let msg = format!("answered within the {} limit: {verdict}", human(limit));
                    self.report.pass(&rule, t.elapsed(), msg);
                }
                Ok(_) => {}
                Err(why) => {
                    self.report
                        .fail(
                            &rule,
                            t.elapsed(),
                            format!("{why}: the host counts it as allow"),
                        )
                        .hint(
                        "answer every event_intercept with an event_intercept_response carrying \
                         its id",
                    );
                }
            }
        }
    }

    /// Waits for the answer to `id`, handling other frames meanwhile.
    fn answer(&mut self, id: &str, kind: &str, limit: Duration) -> Result<ExtFrame, String> {
        let mut deadline = Instant::now() + limit;
        let mut dropped = false;
        loop {
            match self.next(deadline) {
                Next::Frame(frame) => match answer_id(&frame) {
                    Some(got) if got == id && frame.kind() == kind => return Ok(frame),
                    Some(got) if got == id => {
                        return Err(format!(
                            "answered with `{}`, expected `{kind}`",
                            frame.kind()
                        ))
                    }
                    _ => self.observe(frame),
                },
                Next::Dropped(_) => {
                    // The dropped line was probably the answer, malformed.
                    dropped = true;
                    deadline = deadline.min(Instant::now() + AFTER_DROPPED);
                }
                Next::Quiet if dropped => {
                    return Err("no valid answer: a stdout line was dropped (see stdout)".into())
                }
                Next::Quiet => return Err(format!("no answer within {}", human(limit))),
                Next::Closed => return Err(format!("exited before answering{}", self.exit_note())),
            }
        }
    }

    fn probe(&mut self, probe: &Probe) {
        match probe {
            Probe::Call { tool, args } => self.call(tool, args),
            Probe::Command { name, args } => self.command(name, args),
        }
    }

    fn call(&mut self, tool: &str, args: &Value) {
        let rule = format!("call {tool}");
        if !self.tools.set.contains(tool) {
            let msg = format!(
                "it registered no tool {tool} (tools: {})",
                or_none(&self.tools.list)
            );
            self.report.fail(&rule, Duration::ZERO, msg);
            return;
        }
        let id = self.id();
        let t = Instant::now();
        self.send(HostFrame::ToolCall {
            id: &id,
            name: tool,
            args,
            #[cfg(feature = "journal")]
            operation_key: None,
            #[cfg(feature = "journal")]
            reconcile: false,
        });
        let limit = self.limits().tool;
        let (content, is_error) = match self.answer(&id, "tool_result", limit) {
            Ok(ExtFrame::ToolResult {
                content, is_error, ..
            }) => (content, is_error.unwrap_or(false)),
            Ok(_) => return,
            Err(why) => {
                self.report.fail(&rule, t.elapsed(), why);
                return;
            }
        };
        let took = t.elapsed();
        let content = content.map(|c| c.into_iter().filter(|b| !is_empty_text(b)).collect());
        let Some(blocks) = content.filter(|c: &Vec<Block>| !c.is_empty()) else {
            let msg = "tool_result without content: the model sees \"(extension returned no \
                       content)\""
                .to_string();
            self.report.warn(&rule, took, msg);
            return;
        };
        let mut texts = Vec::new();
        for block in blocks {
            // Kept when the model is given it as it came.
            let kept = match map_content(vec![block.clone()]).remove(0) {
                Content::Text(text) if block.kind() == "text" && block.text() == Some(&text) => {
                    Ok(text)
                }
                // The display hint is reported with the text it marks.
                Content::Formatted { text, format }
                    if block.kind() == "text" && block.text() == Some(&text) =>
                {
                    Ok(format!("[{format}] {text}"))
                }
                Content::Image { .. } if block.kind() == "image" => Ok("[image]".to_string()),
                Content::Text(text) | Content::Formatted { text, .. } => Err(text),
                Content::Image { .. } => Err(String::new()),
            };
            match kept {
                Ok(text) => texts.push(text),
                Err(text) => {
                    let why = format!("content block {block}: {text}");
                    self.report.fail(&rule, took, why);
                    return;
                }
            }
        }
        let error = if is_error { " (is_error)" } else { "" };
        let msg = format!("tool_result{error}: {}", clip(&texts.join(" ")));
        self.report.pass(&rule, took, msg);
    }

    fn command(&mut self, name: &str, args: &str) {
        let rule = format!("run /{name}");
        // As the host does: any case, sent with the registered spelling.
        let registered = self.commands.by_folded.get(&name.to_lowercase());
        let Some(name) = registered.cloned() else {
            let msg = format!(
                "it registered no command /{name} (commands: {})",
                or_none(&self.commands.list)
            );
            self.report.fail(&rule, Duration::ZERO, msg);
            return;
        };
        let name = name.as_str();
        let id = self.id();
        let t = Instant::now();
        self.send(HostFrame::CommandInvoked {
            id: &id,
            name,
            args,
        });
        let limit = self.limits().command;
        let r = match self.answer(&id, "command_response", limit) {
            Ok(ExtFrame::CommandResponse(r)) => r,
            Ok(_) => return,
            Err(why) => {
                self.report.fail(&rule, t.elapsed(), why);
                return;
            }
        };
        let took = t.elapsed();
        let action = r.action.as_deref().unwrap_or("");
        let text = match action {
            "prompt" => r.prompt.as_deref(),
            "insert" => r.insert.as_deref(),
            "display" => r.display.as_deref(),
            "noop" | "open_panel" => Some(""),
            #[cfg(feature = "tool-extras")]
            "tool_prompt" => {
                let (name, args) = (r.tool_name.clone(), r.tool_args.clone());
                if let Err(why) = tooldef::tool_prompt_fields(name, args) {
                    self.report.fail(&rule, took, why);
                    return;
                }
                Some(r.prompt.as_deref().unwrap_or(""))
            }
            // This build refuses the action, as the host does.
            #[cfg(not(feature = "tool-extras"))]
            "tool_prompt" => {
                let why =
                    zot_host::internal::build::needs_feature("action `tool_prompt`", "tool-extras");
                self.report.fail(&rule, took, why);
                return;
            }
            _ => {
                let msg = format!(
                    "action {action:?} is not prompt, insert, display, noop, open_panel or tool_prompt"
                );
                self.report.fail(&rule, took, msg);
                return;
            }
        };
        let error = r.error.filter(|e| !e.is_empty());
        match (text, error) {
            (_, Some(error)) => {
                let msg = format!("command_response {action} with error: {}", clip(&error));
                self.report.pass(&rule, took, msg);
            }
            (None, None) if action == "open_panel" => {}
            (None, None) => {
                let msg = format!("action {action:?} without a `{action}` text");
                self.report.fail(&rule, took, msg);
            }
            #[cfg(feature = "panels")]
            (Some(_), None) if action == "open_panel" && r.open_panel.is_none() => {
                self.report
                    .fail(&rule, took, "action open_panel without `open_panel`");
            }
            (Some(text), None) => {
                let msg = format!("command_response {action}: {}", clip(text));
                self.report.pass(&rule, took, msg);
            }
        }
    }

    /// `shutdown`: `shutdown_ack` and exit within the grace, and nothing
    /// of its process group left. Stops it as the host would otherwise.
    fn shutdown(&mut self) {
        let t = Instant::now();
        if self.eof || self.proc.try_wait().is_some() {
            let note = self.exit_note();
            self.report
                .fail(
                    "shutdown",
                    Duration::ZERO,
                    format!("it exited before shutdown{note}: the host drops its names"),
                )
                .hint("keep reading stdin until shutdown (or EOF)");
            self.kill();
            return;
        }
        let grace = self.limits().shutdown_grace;
        let deadline = t + grace;
        self.send(HostFrame::Shutdown);
        let mut acked = None;
        while acked.is_none() {
            match self.next(deadline) {
                Next::Frame(ExtFrame::ShutdownAck) => acked = Some(t.elapsed()),
                Next::Frame(frame) => self.observe(frame),
                Next::Dropped(_) => {}
                Next::Quiet | Next::Closed => break,
            }
        }
        if acked.is_some() {
            self.proc.close_stdin(); // as the host does after the ack
        }
        let status = self.wait_exit(deadline);
        let took = t.elapsed();
        let limit = human(grace);
        match (acked, status) {
            (Some(ack), Some(status)) => {
                let msg = format!(
                    "shutdown_ack after {}, exited ({}) within the {limit} grace",
                    human(ack),
                    describe_status(status)
                );
                self.report.pass("shutdown", took, msg);
            }
            (None, Some(status)) => {
                let msg = format!("exited ({}) without shutdown_ack", describe_status(status));
                self.report
                    .warn("shutdown", took, msg)
                    .hint("answer shutdown with {\"type\":\"shutdown_ack\"}, then exit");
            }
            (ack, None) => {
                let what = match ack {
                    Some(_) => "acknowledged, but",
                    None => "no shutdown_ack, and",
                };
                let msg = format!(
                    "{what} still running {limit} after shutdown: the host sends SIGTERM, then \
                     SIGKILL"
                );
                self.report
                    .fail("shutdown", took, msg)
                    .hint("on shutdown: send shutdown_ack, stop your work and exit");
                self.proc.signal_group(libc::SIGTERM);
                let term = Instant::now() + self.limits().term_grace;
                if self.wait_exit(term).is_none() {
                    self.kill();
                }
            }
        }
        self.process_group(deadline);
    }

    /// Nothing of the extension's process group may outlive it.
    fn process_group(&mut self, deadline: Instant) {
        let t = Instant::now();
        let mut pause = Duration::from_millis(1);
        while group_alive(self.proc.pid) && Instant::now() < deadline {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        if group_alive(self.proc.pid) {
            let msg = format!(
                "processes of its group (pgid {}) still run after it exited",
                self.proc.pid
            );
            self.report
                .fail("process group", t.elapsed(), msg)
                .hint("stop the processes you started before exiting; the host kills the group");
            self.proc.signal_group(libc::SIGKILL);
        } else {
            let msg = "nothing of its process group is left".to_string();
            self.report.pass("process group", t.elapsed(), msg);
        }
    }

    fn stdout_rule(&mut self) {
        // Lines written just before the exit may still be in the reader:
        // read to the end of stdout (bounded: a survivor may hold it open).
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match self.next(deadline) {
                Next::Frame(frame) => self.observe(frame),
                Next::Dropped(_) => {}
                Next::Quiet | Next::Closed => break,
            }
        }
        if self.dropped.is_empty() {
            let msg = match self.frames {
                0 => "nothing on stdout".to_string(),
                n => format!("all {n} stdout lines were frames"),
            };
            self.report.pass("stdout", Duration::ZERO, msg);
            return;
        }
        let shown = self.dropped.len().min(DROPPED_SHOWN);
        for (why, at) in &self.dropped[..shown] {
            let took = at.saturating_duration_since(self.spawned);
            let msg = match why.strip_prefix("dropped frame ") {
                Some(rest) => format!("not a frame {rest}"),
                None => format!("not a frame: {why}"),
            };
            self.report.fail("stdout", took, msg).hint(
                "stdout carries only protocol frames, one JSON object per line: write logs and \
                 prints to stderr instead",
            );
        }
        if self.dropped.len() > shown {
            let msg = format!(
                "and {} more lines that are not frames",
                self.dropped.len() - shown
            );
            self.report.fail("stdout", Duration::ZERO, msg);
        }
    }
}

/// The names of one kind it registered, in order and as a set, with
/// the bytes they take as the host counts them.
#[derive(Default)]
struct Names {
    list: Vec<String>,
    set: HashSet<String>,
    /// Each name lowercased, to the first one registered so: a lookup,
    /// not a scan, for the case-insensitive duplicate (docs/PROTOCOL.md#names-and-precedence).
    by_folded: HashMap<String, String>,
    bytes: usize,
    /// The host's cap was reached (reported once).
    capped: bool,
}

#[derive(Clone, Copy)]
enum Kind {
    Command,
    Tool,
}

/// A payload for `event` that no sane extension refuses.
fn harmless(event: &str) -> EventPayload {
    let mut payload = EventPayload::default();
    match event {
        "turn_start" => payload.step = Some(1),
        "turn_end" => payload.stop = Some("end_turn".into()),
        "tool_call" => {
            payload.tool_id = Some("check-tool-1".into());
            payload.tool_name = Some("read".into());
            payload.tool_args = Some(json!({"path": "README.md"}));
        }
        "assistant_message" => payload.text = Some("Hello from zot ext check.".into()),
        "session_end" => {
            payload.extra.insert("reason".into(), json!("shutdown"));
        }
        "user_prompt_submit" => payload.text = Some("Hello from zot ext check.".into()),
        "tool_result" => {
            payload.tool_id = Some("check-tool-1".into());
            payload.tool_name = Some("read".into());
            payload.tool_args = Some(json!({"path": "README.md"}));
            let result = json!({"content": [{"type": "text", "text": "ok"}], "is_error": false});
            let fields = [("status", json!("completed")), ("executed", json!(true))];
            payload
                .extra
                .extend(fields.map(|(k, v)| (k.to_string(), v)));
            payload.extra.insert("result".into(), result);
        }
        _ => {}
    }
    payload
}

fn answer_id(frame: &ExtFrame) -> Option<&str> {
    match frame {
        ExtFrame::CommandResponse(r) => Some(&r.id),
        ExtFrame::ToolResult { id, .. } | ExtFrame::EventInterceptResponse { id, .. } => Some(id),
        _ => None,
    }
}

fn or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The first 200 characters of `text`, on one line.
fn clip(text: &str) -> String {
    let one_line = text.replace('\n', " ");
    match one_line.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &one_line[..at]),
        None => one_line,
    }
}

/// `; exposure deferred, namespace weather, an output schema`: what a
/// tool declares beyond the basics, or nothing.
#[cfg(feature = "tool-extras")]
fn upstream_fields(tool: &ToolInfo) -> String {
    let mut parts = Vec::new();
    if tool.exposure != Exposure::Direct {
        parts.push(format!("exposure {}", tool.exposure.as_str()));
    }
    if let Some(ns) = &tool.namespace {
        parts.push(format!("namespace {ns}"));
    }
    if tool.output_schema.is_some() {
        parts.push("an output schema".to_string());
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!("; {}", parts.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_is_char_safe() {
        let long = "é".repeat(300);
        assert_eq!(clip(&long).chars().count(), 203);
        assert_eq!(clip("a\nb"), "a b");
    }
}
