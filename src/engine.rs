//! The host loop: one thread that owns every extension, every pending
//! request and every deadline, and `select!`s over the extensions'
//! inbound channel and the embedder's requests (SPEC section 3).

use crate::discovery::{self, Scope, Status};
use crate::host::{
    CommandInfo, CommandOutcome, ExtensionInfo, HostConfig, HostEvent, ReadyLatch, ReloadReport,
    Reply, Request, Snapshot, ToolInfo, ToolOutcome, ToolRequest,
};
use crate::intercept::{answer_from, Answer, Chain, InterceptOutcome, Step, INTERCEPTABLE};
use crate::log::ExtLog;
use crate::process::{describe_status, group_alive, signal_group, ExtProcess, Inbound, InboundMsg};
use crate::protocol::{CommandResponse, EventPayload, ExtFrame, HostFrame, PROTOCOL_VERSION};
use crate::registry::{self, Claimed, Registry};
use crate::toolresult::map_content;
use crossbeam_channel::{select, Receiver, Sender};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often pending requests check that their extension still lives
/// (catches an exit whose stdout a grandchild keeps open).
const LIVENESS_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, PartialEq)]
enum State {
    Starting,
    Ready,
    Failed(String),
    Exited(String),
    Disabled,
}

/// Shutdown progress of one extension.
struct Stop {
    term_at: Option<Instant>,
    kill_at: Option<Instant>,
}

struct Ext {
    name: String,
    version: Option<String>,
    scope: Scope,
    dir: PathBuf,
    state: State,
    log: ExtLog,
    proc: Option<ExtProcess>,
    hello: bool,
    hello_deadline: Option<Instant>,
    idle_ready_at: Option<Instant>,
    exit_poll: Option<(Instant, Duration)>,
    stop: Option<Stop>,
    events: Vec<String>,
    intercept: Vec<String>,
    dropped_events: u64,
    dropping: bool,
    /// Frames queued during this loop iteration.
    out: Vec<u8>,
}

impl Ext {
    fn live(&self) -> bool {
        self.proc.is_some()
    }

    /// Running, handshaken and not being stopped: may get requests.
    fn serving(&self) -> bool {
        self.live() && self.hello && self.stop.is_none() && !matches!(self.state, State::Failed(_))
    }

    /// Queues a frame; it is handed to the writer thread at the end of
    /// the loop iteration, batched with the others. False when stdin is
    /// closed.
    fn send(&mut self, line: &[u8]) -> bool {
        if !self.proc.as_ref().is_some_and(ExtProcess::writable) {
            return false;
        }
        self.out.extend_from_slice(line);
        true
    }

    /// Hands what was queued this iteration to the writer thread.
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        let chunk = std::mem::take(&mut self.out);
        if let Some(p) = &self.proc {
            p.send(chunk);
        }
    }

    /// Bytes waiting for this extension, queued or not yet handed over.
    fn backlog(&self) -> usize {
        self.out.len() + self.proc.as_ref().map_or(0, ExtProcess::queued_bytes)
    }

    /// Closes stdin once everything queued so far is written.
    fn close_stdin(&mut self) {
        self.flush();
        if let Some(p) = &mut self.proc {
            p.close_stdin();
        }
    }
}

enum PendingKind {
    Command {
        name: String,
        reply: Reply<CommandOutcome>,
    },
    Tool {
        name: String,
        reply: Reply<ToolOutcome>,
    },
    Guard {
        chain: u64,
        pos: usize,
    },
}

impl PendingKind {
    /// Answers a command or tool request with an error; a guard's
    /// answer is the chain's business.
    fn fail(self, error: String) {
        match self {
            PendingKind::Command { reply, .. } => reply(Err(error)),
            PendingKind::Tool { reply, .. } => reply(Err(error)),
            PendingKind::Guard { .. } => {}
        }
    }
}

struct Pending {
    ext: usize,
    deadline: Instant,
    kind: PendingKind,
}

/// What happens when a chain is decided.
enum Then {
    Reply(Reply<InterceptOutcome>),
    Tool {
        name: String,
        reply: Reply<ToolOutcome>,
    },
}

struct ChainState {
    chain: Chain,
    guards: Vec<usize>,
    ids: Vec<Option<String>>,
    then: Option<Then>,
}

enum Goal {
    Shutdown(Vec<Reply<()>>),
    Reload(Reply<ReloadReport>, usize),
}

struct Startup {
    deadline: Instant,
    reload: Option<Reply<ReloadReport>>,
    stopped: usize,
    loaded: usize,
    errors: Vec<String>,
}

struct Engine {
    cfg: HostConfig,
    cwd: String,
    events: Sender<HostEvent>,
    latch: Arc<ReadyLatch>,
    inbound_tx: Sender<InboundMsg>,
    exts: Vec<Ext>,
    by_key: HashMap<u64, usize>,
    next_key: u64,
    next_id: u64,
    pending: HashMap<String, Pending>,
    chains: HashMap<u64, ChainState>,
    next_chain: u64,
    commands: Registry<String>,
    tools: Registry<(String, Option<Value>)>,
    startup: Option<Startup>,
    announced: bool,
    goal: Option<Goal>,
    liveness_at: Option<Instant>,
    /// Requests that arrived while extensions were (re)starting.
    deferred: Vec<Request>,
    done: bool,
}

/// Most messages handled in one loop iteration before queued frames are
/// handed to the writer threads.
const BATCH: usize = 256;

/// How long a thread that expects an answer polls before it sleeps.
pub(crate) const POLL_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// Yields until `ready()` or [`POLL_BEFORE_SLEEP`] passes; true if ready.
pub(crate) fn poll_briefly(mut ready: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + POLL_BEFORE_SLEEP;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Why the loop woke up.
enum Wake {
    Inbound(Option<InboundMsg>),
    Request(Option<Request>),
    Timer,
}

/// Runs the loop until shutdown.
pub(crate) fn run(
    cfg: HostConfig,
    requests: Receiver<Request>,
    events: Sender<HostEvent>,
    latch: Arc<ReadyLatch>,
) {
    let (inbound_tx, inbound) = crossbeam_channel::unbounded();
    let mut engine = Engine {
        cwd: cfg.cwd.to_string_lossy().into_owned(),
        cfg,
        events,
        latch,
        inbound_tx,
        exts: Vec::new(),
        by_key: HashMap::new(),
        next_key: 0,
        next_id: 0,
        pending: HashMap::new(),
        chains: HashMap::new(),
        next_chain: 0,
        commands: Registry::default(),
        tools: Registry::default(),
        startup: None,
        announced: false,
        goal: None,
        liveness_at: None,
        deferred: Vec::new(),
        done: false,
    };
    engine.start_all(None, 0);
    let mut requests = requests;
    while !engine.done {
        // An answer is due: poll briefly before sleeping. Waking a thread
        // that sleeps on another CPU costs tens of microseconds, more than
        // a typical round trip; yielding keeps a single CPU usable.
        if !engine.pending.is_empty()
            && poll_briefly(|| !inbound.is_empty() || !requests.is_empty())
        {
            // Fall through: select! below returns at once.
        }
        let timeout = engine
            .next_deadline()
            .map(|d| d.saturating_duration_since(Instant::now()));
        // `default(timeout)` rather than an `after()` channel: no
        // allocation per wake-up on the hot path.
        let woke = match timeout {
            Some(t) => select! {
                recv(inbound) -> msg => Wake::Inbound(msg.ok()),
                recv(requests) -> req => Wake::Request(req.ok()),
                default(t) => Wake::Timer,
            },
            None => select! {
                recv(inbound) -> msg => Wake::Inbound(msg.ok()),
                recv(requests) -> req => Wake::Request(req.ok()),
            },
        };
        match woke {
            // The engine holds an inbound sender, so that never disconnects.
            Wake::Inbound(Some(msg)) => engine.inbound(msg),
            Wake::Request(Some(req)) => engine.request(req),
            Wake::Request(None) => {
                // Every handle is gone: nobody can ask for anything again.
                requests = crossbeam_channel::never();
                engine.begin_stop(Goal::Shutdown(Vec::new()));
            }
            Wake::Inbound(None) | Wake::Timer => {}
        }
        // Take what else is already waiting before handing frames to the
        // writer threads, so a burst costs one wake-up per extension.
        for _ in 0..BATCH {
            if let Ok(msg) = inbound.try_recv() {
                engine.inbound(msg);
            } else if let Ok(req) = requests.try_recv() {
                engine.request(req);
            } else {
                break;
            }
        }
        engine.tick(Instant::now());
        engine.check_stopped();
        engine.run_deferred();
        for ext in &mut engine.exts {
            ext.flush();
        }
    }
}

/// `30 s` or `250 ms`: whole seconds when exact, else milliseconds.
fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Engine {
    // ----- starting -------------------------------------------------

    fn start_all(&mut self, reload: Option<Reply<ReloadReport>>, stopped: usize) {
        let now = Instant::now();
        let found = discovery::discover(
            &self.cfg.ext_paths,
            &self.cfg.cwd,
            &self.cfg.zot_home,
            self.cfg.discover,
        );
        let logs = discovery::logs_dir(&self.cfg.zot_home);
        let mut errors = Vec::new();
        let mut loaded = 0;
        for f in found {
            let name = match &f.manifest {
                Some(m) => m.name.clone(),
                None => f
                    .dir
                    .file_name()
                    .map_or_else(|| "unknown".into(), |n| n.to_string_lossy().into_owned()),
            };
            if let Status::Shadowed { by } = &f.status {
                ExtLog::open(&logs, &name).line(&format!(
                    "not started: {} is shadowed by {}",
                    f.dir.display(),
                    by.display()
                ));
                continue;
            }
            let key = self.next_key;
            self.next_key += 1;
            let log = match f.status {
                Status::Invalid(_) => ExtLog::stderr(&name),
                _ => ExtLog::open(&logs, &name),
            };
            let mut ext = Ext {
                name,
                version: f.manifest.as_ref().and_then(|m| m.version.clone()),
                scope: f.scope,
                dir: f.dir.clone(),
                state: State::Disabled,
                log,
                proc: None,
                hello: false,
                hello_deadline: None,
                idle_ready_at: None,
                exit_poll: None,
                stop: None,
                events: Vec::new(),
                intercept: Vec::new(),
                dropped_events: 0,
                dropping: false,
                out: Vec::new(),
            };
            match (&f.status, &f.manifest) {
                (Status::Invalid(e), _) => {
                    ext.state = State::Failed(format!("invalid manifest: {e}"))
                }
                (Status::Start, Some(m)) => {
                    let started = m.resolve_exec(&f.dir).and_then(|exe| {
                        ExtProcess::spawn(
                            key,
                            &m.name,
                            &exe,
                            &m.args,
                            &f.dir,
                            &ext.log,
                            self.inbound_tx.clone(),
                        )
                        .map_err(|e| format!("cannot start {}: {e}", exe.display()))
                    });
                    match started {
                        Ok(p) => {
                            ext.log.line(&format!("started {} (pid {})", m.exec, p.pid));
                            ext.proc = Some(p);
                            ext.state = State::Starting;
                            ext.hello_deadline = Some(now + self.cfg.timeouts.hello);
                            loaded += 1;
                        }
                        Err(e) => ext.state = State::Failed(e),
                    }
                }
                _ => {}
            }
            if let State::Failed(e) = &ext.state {
                ext.log.line(e);
                errors.push(format!("{}: {e}", ext.name));
                let _ = self.events.send(HostEvent::ExtensionFailed {
                    extension: ext.name.clone(),
                    error: e.clone(),
                });
            }
            self.by_key.insert(key, self.exts.len());
            self.exts.push(ext);
        }
        self.startup = Some(Startup {
            deadline: now + self.cfg.timeouts.startup,
            reload,
            stopped,
            loaded,
            errors,
        });
        self.check_startup(now);
    }

    fn check_startup(&mut self, now: Instant) {
        let Some(st) = &self.startup else { return };
        let loading = self.exts.iter().any(|e| e.state == State::Starting);
        if loading && now < st.deadline {
            return;
        }
        let Some(mut st) = self.startup.take() else {
            return;
        };
        let ready: Vec<String> = self
            .exts
            .iter()
            .filter(|e| e.state == State::Ready)
            .map(|e| e.name.clone())
            .collect();
        for e in self.exts.iter().filter(|e| e.state == State::Starting) {
            e.log.line(
                "still loading after the startup grace; its registrations count when they arrive",
            );
        }
        for e in &self.exts {
            if let State::Failed(why) = &e.state {
                let line = format!("{}: {why}", e.name);
                if !st.errors.contains(&line) {
                    st.errors.push(line);
                }
            }
        }
        if !self.announced {
            self.announced = true;
            let _ = self.events.send(HostEvent::Ready {
                extensions: ready.clone(),
            });
            self.latch.set(ready.clone());
        }
        if let Some(reply) = st.reload {
            reply(Ok(ReloadReport {
                stopped: st.stopped,
                loaded: st.loaded,
                ready: ready.len(),
                errors: st.errors,
            }));
        }
    }

    fn mark_ready(&mut self, idx: usize, why: &str, now: Instant) {
        let ext = &mut self.exts[idx];
        if ext.state != State::Starting {
            return;
        }
        ext.state = State::Ready;
        ext.idle_ready_at = None;
        if why != "ready" {
            ext.log.line(why);
        }
        if self.startup.is_none() && self.announced {
            let _ = self.events.send(HostEvent::Registered {
                extension: ext.name.clone(),
            });
        }
        self.check_startup(now);
    }

    fn fail(&mut self, idx: usize, reason: String, now: Instant) {
        let ext = &mut self.exts[idx];
        ext.log.line(&format!("failed: {reason}"));
        ext.state = State::Failed(reason.clone());
        ext.hello_deadline = None;
        ext.idle_ready_at = None;
        if let Some(p) = &ext.proc {
            p.signal_group(libc::SIGKILL);
            ext.exit_poll = Some((now, Duration::from_millis(1)));
        }
        let _ = self.events.send(HostEvent::ExtensionFailed {
            extension: ext.name.clone(),
            error: reason,
        });
        self.drop_registrations(
            idx,
            &format!("extension {} failed", self.exts[idx].name),
            now,
        );
        self.check_startup(now);
    }

    // ----- frames from extensions -----------------------------------

    fn inbound(&mut self, msg: InboundMsg) {
        let Some(&idx) = self.by_key.get(&msg.key) else {
            return; // from an extension of before a reload
        };
        let now = Instant::now();
        match msg.msg {
            Inbound::Frame(frame) => self.frame(idx, frame, now),
            Inbound::Eof => self.poll_exit(idx, now),
            Inbound::WriteFailed(e) => {
                let ext = &mut self.exts[idx];
                ext.log.line(&format!("cannot write to stdin: {e}"));
                ext.out.clear();
                ext.close_stdin();
                self.release_guards(idx, now);
            }
        }
    }

    fn frame(&mut self, idx: usize, frame: ExtFrame, now: Instant) {
        let ext = &mut self.exts[idx];
        if !ext.hello {
            if matches!(ext.state, State::Failed(_)) {
                return;
            }
            return match frame {
                ExtFrame::Hello { name, .. } if name.trim().is_empty() => {
                    self.fail(idx, "hello has an empty name".into(), now)
                }
                ExtFrame::Hello { name, version, .. } => self.hello(idx, &name, version, now),
                other => self.fail(
                    idx,
                    format!("first frame was `{}`, expected `hello`", other.kind()),
                    now,
                ),
            };
        }
        if ext.state == State::Starting {
            ext.idle_ready_at = Some(now + self.cfg.timeouts.ready_idle);
        }
        match frame {
            ExtFrame::Hello { .. } => ext.log.line("ignored a second hello"),
            ExtFrame::RegisterCommand { name, description } => {
                self.register_command(idx, &name, description.unwrap_or_default())
            }
            ExtFrame::RegisterTool {
                name,
                description,
                schema,
            } => self.register_tool(idx, &name, description.unwrap_or_default(), schema),
            ExtFrame::Subscribe { events, intercept } => self.subscribe(
                idx,
                events.unwrap_or_default(),
                intercept.unwrap_or_default(),
            ),
            ExtFrame::Ready => self.mark_ready(idx, "ready", now),
            ExtFrame::CommandResponse(r) => self.command_response(idx, r),
            ExtFrame::ToolResult {
                id,
                content,
                is_error,
            } => self.tool_result(idx, &id, content, is_error.unwrap_or(false)),
            ExtFrame::EventInterceptResponse {
                id,
                block,
                reason,
                modified_args,
                replace_text,
            } => {
                let Some((chain, pos)) = self.take_guard(idx, &id) else {
                    return;
                };
                if let Some(state) = self.chains.get_mut(&chain) {
                    let name = &self.exts[idx].name;
                    let answer = answer_from(
                        &state.chain.event,
                        block.unwrap_or(false),
                        reason,
                        modified_args,
                        replace_text,
                        name,
                    );
                    state.ids[pos] = None;
                    state.chain.answer(pos, answer);
                    self.drive(chain, now);
                }
            }
            ExtFrame::Notify { level, message } => {
                let level = match level.as_deref() {
                    Some(l @ ("info" | "success" | "warn" | "error")) => l.to_string(),
                    None => "info".to_string(),
                    Some(other) => {
                        ext.log.line(&format!(
                            "notify level {other:?} is not info/success/warn/error; shown as info"
                        ));
                        "info".to_string()
                    }
                };
                let _ = self.events.send(HostEvent::Notify {
                    extension: ext.name.clone(),
                    level,
                    message,
                });
            }
            ExtFrame::ClearNotes => {
                let _ = self.events.send(HostEvent::ClearNotes {
                    extension: ext.name.clone(),
                });
            }
            ExtFrame::PanelRender(panel) => {
                let _ = self.events.send(HostEvent::PanelRender {
                    panel,
                    extension: ext.name.clone(),
                });
            }
            ExtFrame::PanelClose { panel_id } => {
                let _ = self.events.send(HostEvent::PanelClose {
                    panel_id,
                    extension: ext.name.clone(),
                });
            }
            ExtFrame::ShutdownAck if ext.stop.is_some() => ext.close_stdin(),
            ExtFrame::ShutdownAck => ext.log.line("ignored shutdown_ack: no shutdown was sent"),
        }
    }

    fn hello(&mut self, idx: usize, name: &str, version: Option<String>, now: Instant) {
        let ext = &mut self.exts[idx];
        if name != ext.name {
            ext.log.line(&format!(
                "hello says name {name:?}, manifest says {:?}; using the manifest's",
                ext.name
            ));
        }
        ext.hello = true;
        ext.hello_deadline = None;
        ext.idle_ready_at = Some(now + self.cfg.timeouts.ready_idle);
        if ext.version.is_none() {
            ext.version = version;
        }
        let dir = ext.dir.to_string_lossy();
        let line = HostFrame::HelloAck {
            protocol_version: PROTOCOL_VERSION,
            zot_version: &self.cfg.zot_version,
            provider: &self.cfg.provider,
            model: &self.cfg.model,
            cwd: &self.cwd,
            extension_dir: &dir,
            data_dir: &dir,
        }
        .to_line();
        ext.send(&line);
    }

    fn register_command(&mut self, idx: usize, name: &str, description: String) {
        let ext = &self.exts[idx];
        if !registry::valid_name(name) {
            return ext.log.line(&format!(
                "rejected command {name:?}: names must be non-empty without whitespace"
            ));
        }
        if self.cfg.builtin_commands.iter().any(|b| b == name) {
            return ext.log.line(&format!(
                "command /{name} is shadowed by the built-in command"
            ));
        }
        let claimed = self.commands.claim(name, idx, description);
        self.log_claim("command /", name, idx, claimed);
    }

    fn register_tool(
        &mut self,
        idx: usize,
        name: &str,
        description: String,
        schema: Option<Value>,
    ) {
        let ext = &self.exts[idx];
        if !registry::valid_name(name) {
            return ext.log.line(&format!(
                "rejected tool {name:?}: names must be non-empty without whitespace"
            ));
        }
        if schema.as_ref().is_some_and(|s| !s.is_object()) {
            return ext.log.line(&format!(
                "rejected tool {name:?}: `schema` must be a JSON object"
            ));
        }
        if self.cfg.builtin_tools.iter().any(|b| b == name) {
            return ext
                .log
                .line(&format!("tool {name} is shadowed by the built-in tool"));
        }
        let claimed = self.tools.claim(name, idx, (description, schema));
        self.log_claim("tool ", name, idx, claimed);
    }

    fn log_claim(&self, what: &str, name: &str, idx: usize, claimed: Claimed) {
        match claimed {
            Claimed::Shadowed { by } => self.exts[idx].log.line(&format!(
                "{what}{name} is shadowed by extension {} (higher precedence)",
                self.exts[by].name
            )),
            Claimed::Owner {
                displaced: Some(other),
            } => self.exts[other].log.line(&format!(
                "{what}{name} is now shadowed by extension {} (higher precedence)",
                self.exts[idx].name
            )),
            Claimed::Owner { displaced: None } => {}
        }
    }

    fn subscribe(&mut self, idx: usize, events: Vec<String>, intercept: Vec<String>) {
        let ext = &mut self.exts[idx];
        for e in events {
            if !ext.events.contains(&e) {
                ext.events.push(e);
            }
        }
        for e in intercept {
            if !INTERCEPTABLE.contains(&e.as_str()) {
                ext.log.line(&format!(
                    "cannot intercept {e:?}: only tool_call, turn_start and assistant_message"
                ));
            } else if !ext.intercept.contains(&e) {
                ext.intercept.push(e);
            }
        }
    }

    /// Removes the pending request `id` when it belongs to extension `idx`.
    fn take_pending(&mut self, idx: usize, id: &str, frame: &str) -> Option<Pending> {
        match self.pending.remove(id) {
            Some(p) if p.ext == idx => Some(p),
            other => {
                if let Some(p) = other {
                    self.pending.insert(id.to_string(), p);
                }
                self.exts[idx].log.line(&format!(
                    "dropped {frame}: id {id:?} is unknown, expired or already answered"
                ));
                None
            }
        }
    }

    fn take_guard(&mut self, idx: usize, id: &str) -> Option<(u64, usize)> {
        match self.take_pending(idx, id, "event_intercept_response")? {
            Pending {
                kind: PendingKind::Guard { chain, pos },
                ..
            } => Some((chain, pos)),
            other => {
                self.pending.insert(id.to_string(), other);
                self.exts[idx].log.line(&format!(
                    "dropped event_intercept_response: id {id:?} is not an intercept"
                ));
                None
            }
        }
    }

    fn command_response(&mut self, idx: usize, r: CommandResponse) {
        let Some(p) = self.take_pending(idx, &r.id, "command_response") else {
            return;
        };
        let PendingKind::Command { reply, .. } = p.kind else {
            self.pending.insert(r.id.clone(), p);
            return self.exts[idx]
                .log
                .line("dropped command_response: its id is not a command");
        };
        let mut action = r.action.unwrap_or_default();
        let mut error = r.error.filter(|e| !e.is_empty());
        if !matches!(
            action.as_str(),
            "prompt" | "insert" | "display" | "noop" | "open_panel"
        ) {
            let why = format!("unknown action {action:?}");
            self.exts[idx].log.line(&format!("command_response: {why}"));
            error.get_or_insert(why);
            action = "noop".into();
        }
        reply(Ok(CommandOutcome {
            extension: self.exts[idx].name.clone(),
            action,
            prompt: r.prompt,
            insert: r.insert,
            display: r.display,
            open_panel: r.open_panel,
            error,
        }));
    }

    fn tool_result(&mut self, idx: usize, id: &str, content: Option<Vec<Value>>, is_error: bool) {
        let Some(p) = self.take_pending(idx, id, "tool_result") else {
            return;
        };
        let PendingKind::Tool { reply, .. } = p.kind else {
            self.pending.insert(id.to_string(), p);
            return self.exts[idx]
                .log
                .line("dropped tool_result: its id is not a tool call");
        };
        reply(Ok(ToolOutcome {
            extension: self.exts[idx].name.clone(),
            content: map_content(content.unwrap_or_default()),
            is_error,
            blocked: false,
            reason: None,
        }));
    }

    // ----- exits ----------------------------------------------------

    fn poll_exit(&mut self, idx: usize, now: Instant) {
        let ext = &mut self.exts[idx];
        let Some(p) = &mut ext.proc else { return };
        match p.try_wait() {
            Some(status) => self.exited(idx, status, now),
            None => {
                let step = ext.exit_poll.map_or(Duration::from_millis(1), |(_, s)| {
                    (s * 2).min(Duration::from_millis(50))
                });
                ext.exit_poll = Some((now + step, step));
            }
        }
    }

    fn exited(&mut self, idx: usize, status: ExitStatus, now: Instant) {
        let desc = describe_status(status);
        let ext = &mut self.exts[idx];
        let Some(p) = ext.proc.take() else { return };
        ext.out.clear();
        // Whatever the extension left in its group goes with it.
        if group_alive(p.pid) {
            signal_group(p.pid, libc::SIGKILL);
        }
        p.join_finished();
        ext.exit_poll = None;
        ext.hello_deadline = None;
        ext.idle_ready_at = None;
        ext.log.line(&format!("exited ({desc})"));
        if ext.dropped_events > 0 {
            ext.log.line(&format!(
                "dropped {} events in total: its queue was full",
                ext.dropped_events
            ));
        }
        let stopping = ext.stop.take().is_some();
        match ext.state.clone() {
            State::Starting if !ext.hello => {
                ext.state = State::Failed(format!("exited before hello ({desc})"));
                let _ = self.events.send(HostEvent::ExtensionFailed {
                    extension: ext.name.clone(),
                    error: format!("exited before hello ({desc})"),
                });
            }
            State::Failed(_) => {}
            _ => {
                ext.state = State::Exited(desc.clone());
                if !stopping && self.goal.is_none() {
                    let _ = self.events.send(HostEvent::ExtensionExited {
                        extension: ext.name.clone(),
                        status: desc.clone(),
                    });
                }
            }
        }
        let why = format!("extension {} exited ({desc})", self.exts[idx].name);
        self.drop_registrations(idx, &why, now);
        self.check_startup(now);
    }

    /// An extension is gone or unusable: its requests fail at once, its
    /// guards count as allow, its names leave the registries.
    fn drop_registrations(&mut self, idx: usize, why: &str, now: Instant) {
        let ids: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.ext == idx && !matches!(p.kind, PendingKind::Guard { .. }))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some(p) = self.pending.remove(&id) {
                p.kind.fail(why.to_string());
            }
        }
        self.release_guards(idx, now);
        self.commands.remove_rank(idx);
        self.tools.remove_rank(idx);
    }

    /// Every intercept waiting on extension `idx` counts as allow.
    fn release_guards(&mut self, idx: usize, now: Instant) {
        let guards: Vec<(String, u64, usize)> = self
            .pending
            .iter()
            .filter_map(|(id, p)| match p.kind {
                PendingKind::Guard { chain, pos } if p.ext == idx => Some((id.clone(), chain, pos)),
                _ => None,
            })
            .collect();
        for (id, chain, pos) in guards {
            self.pending.remove(&id);
            if let Some(state) = self.chains.get_mut(&chain) {
                state.ids[pos] = None;
                state.chain.answer(pos, Answer::Allow);
                self.drive(chain, now);
            }
        }
    }

    // ----- requests from the embedder -------------------------------

    fn request(&mut self, req: Request) {
        let now = Instant::now();
        // Until (re)started extensions are ready their registries are
        // incomplete: hold requests, in order, rather than fail them.
        // Startup is bounded by its grace, so a held shutdown waits little.
        if self.starting() && !matches!(req, Request::List { .. }) {
            return self.deferred.push(req);
        }
        if matches!(self.goal, Some(Goal::Shutdown(_))) {
            if let Request::Shutdown { reply } = req {
                if let Some(Goal::Shutdown(replies)) = &mut self.goal {
                    replies.push(reply);
                }
                return;
            }
            return req.fail("the extension host is shutting down".into());
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
                    return reply(Err(format!(
                        "event {:?} cannot be intercepted (only tool_call, turn_start, assistant_message)",
                        request.event
                    )));
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
            Request::Reload { reply } => {
                if self.goal.is_some() || self.startup.as_ref().is_some_and(|s| s.reload.is_some())
                {
                    return reply(Err("a reload is already running".into()));
                }
                self.begin_stop(Goal::Reload(reply, 0));
            }
            Request::Shutdown { reply } => self.begin_stop(Goal::Shutdown(vec![reply])),
        }
    }

    fn starting(&self) -> bool {
        self.startup.is_some() || matches!(self.goal, Some(Goal::Reload(..)))
    }

    fn run_deferred(&mut self) {
        if self.done {
            for req in std::mem::take(&mut self.deferred) {
                req.fail("the extension host has stopped".into());
            }
        }
        while !self.starting() && !self.deferred.is_empty() {
            let req = self.deferred.remove(0);
            self.request(req);
        }
    }

    fn send_to(&mut self, extension: &str, line: Vec<u8>) -> Result<(), String> {
        let ext = self
            .exts
            .iter_mut()
            .find(|e| e.name == extension && e.serving())
            .ok_or_else(|| format!("no running extension named {extension:?}"))?;
        if ext.send(&line) {
            Ok(())
        } else {
            Err(format!("extension {extension} is not accepting input"))
        }
    }

    fn next_id(&mut self) -> String {
        self.next_id += 1;
        self.next_id.to_string()
    }

    fn invoke_command(
        &mut self,
        name: &str,
        args: &str,
        reply: Reply<CommandOutcome>,
        now: Instant,
    ) {
        if self.cfg.builtin_commands.iter().any(|b| b == name) {
            return reply(Err(format!("/{name} is a host command")));
        }
        let Some(idx) = self.commands.owner(name).map(|c| c.rank) else {
            return reply(Err(format!("unknown command /{name}")));
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
        self.send_request(idx, id, &line, now + self.cfg.timeouts.command, kind);
    }

    /// Sends a request frame and records it as pending until `deadline`;
    /// fails it at once when the extension cannot take it.
    fn send_request(
        &mut self,
        idx: usize,
        id: String,
        line: &[u8],
        deadline: Instant,
        kind: PendingKind,
    ) {
        let ext = &mut self.exts[idx];
        if !ext.serving() || !ext.send(line) {
            return kind.fail(format!("extension {} is not accepting input", ext.name));
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

    fn call_tool(
        &mut self,
        call: ToolRequest,
        pipeline: bool,
        reply: Reply<ToolOutcome>,
        now: Instant,
    ) {
        if self.cfg.builtin_tools.contains(&call.name) {
            return reply(Err(format!(
                "tool {} is built in: the embedder runs it",
                call.name
            )));
        }
        if self.tools.owner(&call.name).is_none() {
            return reply(Err(format!("unknown tool {}", call.name)));
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
        self.start_chain(
            "tool_call",
            payload,
            Then::Tool {
                name: call.name,
                reply,
            },
            now,
        );
    }

    fn dispatch_tool(&mut self, name: &str, args: Value, reply: Reply<ToolOutcome>, now: Instant) {
        let Some(idx) = self.tools.owner(name).map(|c| c.rank) else {
            return reply(Err(format!("unknown tool {name}")));
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
        self.send_request(idx, id, &line, now + self.cfg.timeouts.tool, kind);
    }

    /// Queues `event` to every subscriber; returns their names.
    fn emit(&mut self, event: &str, payload: &EventPayload) -> Vec<String> {
        let line = HostFrame::Event { event, payload }.to_line();
        let limit = self.cfg.event_queue_limit;
        let mut delivered = Vec::new();
        for ext in &mut self.exts {
            if !ext.serving() || !ext.events.iter().any(|e| e == event) {
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

    // ----- interception ---------------------------------------------

    fn start_chain(&mut self, event: &str, payload: EventPayload, then: Then, now: Instant) {
        let guards: Vec<usize> = (0..self.exts.len())
            .filter(|&i| {
                self.exts[i].serving() && self.exts[i].intercept.iter().any(|e| e == event)
            })
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
    fn ask(&mut self, chain: u64, positions: std::ops::Range<usize>, now: Instant) {
        let deadline = now + self.cfg.timeouts.intercept;
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
            if ext.serving() && ext.send(&line) {
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
                ext.log
                    .line("cannot send event_intercept: counted as allow");
                state.chain.answer(pos, Answer::Allow);
            }
        }
    }

    fn drive(&mut self, chain: u64, now: Instant) {
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

    // ----- stopping -------------------------------------------------

    fn begin_stop(&mut self, goal: Goal) {
        let now = Instant::now();
        let mut stopped = 0;
        let line = HostFrame::Shutdown.to_line();
        for ext in &mut self.exts {
            if !ext.live() || ext.stop.is_some() {
                continue;
            }
            stopped += 1;
            // Queued after every event already emitted to it.
            ext.send(&line);
            ext.stop = Some(Stop {
                term_at: Some(now + self.cfg.timeouts.shutdown_grace),
                kill_at: None,
            });
            ext.hello_deadline = None;
            ext.idle_ready_at = None;
        }
        self.goal = Some(match goal {
            Goal::Reload(reply, _) => Goal::Reload(reply, stopped),
            other => other,
        });
    }

    /// Finishes a shutdown or reload once every extension is gone. Run
    /// only from the main loop: a reload replaces `exts`, which must not
    /// happen under code that holds an index into it.
    fn check_stopped(&mut self) {
        if self.goal.is_none() || self.exts.iter().any(Ext::live) {
            return;
        }
        match self.goal.take() {
            Some(Goal::Shutdown(replies)) => {
                for reply in replies {
                    reply(Ok(()));
                }
                self.done = true;
            }
            Some(Goal::Reload(reply, stopped)) => {
                for (_, p) in self.pending.drain() {
                    p.kind.fail("extensions were reloaded".into());
                }
                for (_, mut chain) in self.chains.drain() {
                    match chain.then.take() {
                        Some(Then::Reply(reply)) => reply(Err("extensions were reloaded".into())),
                        Some(Then::Tool { reply, .. }) => {
                            reply(Err("extensions were reloaded".into()))
                        }
                        None => {}
                    }
                }
                self.commands.clear();
                self.tools.clear();
                self.exts.clear();
                self.by_key.clear();
                self.start_all(Some(reply), stopped);
            }
            None => {}
        }
    }

    // ----- time -----------------------------------------------------

    fn next_deadline(&self) -> Option<Instant> {
        let mut next = self.startup.as_ref().map(|s| s.deadline);
        for e in &self.exts {
            next = min_deadline(next, e.hello_deadline);
            next = min_deadline(next, e.idle_ready_at);
            next = min_deadline(next, e.exit_poll.map(|(at, _)| at));
            if let Some(stop) = &e.stop {
                next = min_deadline(next, stop.term_at);
                next = min_deadline(next, stop.kill_at);
            }
        }
        for p in self.pending.values() {
            next = min_deadline(next, Some(p.deadline));
        }
        min_deadline(next, self.liveness_at)
    }

    fn tick(&mut self, now: Instant) {
        for idx in 0..self.exts.len() {
            self.tick_ext(idx, now);
        }
        let expired: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.expire(&id, now);
        }
        if self.startup.as_ref().is_some_and(|s| s.deadline <= now) {
            self.check_startup(now);
        }
        self.check_liveness(now);
    }

    fn tick_ext(&mut self, idx: usize, now: Instant) {
        let ext = &mut self.exts[idx];
        let due = |at: Option<Instant>| at.is_some_and(|t| t <= now);
        if due(ext.hello_deadline) {
            let limit = human(self.cfg.timeouts.hello);
            return self.fail(idx, format!("no hello within {limit}"), now);
        }
        if due(ext.idle_ready_at) {
            let idle = human(self.cfg.timeouts.ready_idle);
            return self.mark_ready(
                idx,
                &format!("no ready frame: treated as ready after {idle} of silence"),
                now,
            );
        }
        if due(ext.exit_poll.map(|(at, _)| at)) {
            return self.poll_exit(idx, now);
        }
        let Some(p) = &ext.proc else { return };
        let Some(stop) = &mut ext.stop else { return };
        if due(stop.term_at) {
            ext.log
                .line("no exit within the shutdown grace: SIGTERM to its process group");
            p.signal_group(libc::SIGTERM);
            stop.term_at = None;
            stop.kill_at = Some(now + self.cfg.timeouts.term_grace);
            ext.exit_poll = Some((now + Duration::from_millis(1), Duration::from_millis(1)));
        } else if due(stop.kill_at) {
            ext.log
                .line("still running after SIGTERM: SIGKILL to its process group");
            p.signal_group(libc::SIGKILL);
            stop.kill_at = None;
            ext.exit_poll = Some((now + Duration::from_millis(1), Duration::from_millis(1)));
        }
    }

    fn expire(&mut self, id: &str, now: Instant) {
        let Some(p) = self.pending.remove(id) else {
            return;
        };
        let ext = &self.exts[p.ext];
        match p.kind {
            PendingKind::Command { name, reply } => {
                let limit = human(self.cfg.timeouts.command);
                ext.log
                    .line(&format!("no command_response for /{name} within {limit}"));
                reply(Err(format!(
                    "extension {} did not answer /{name} within {limit}",
                    ext.name
                )));
            }
            PendingKind::Tool { name, reply } => {
                let limit = human(self.cfg.timeouts.tool);
                ext.log
                    .line(&format!("no tool_result for {name} within {limit}"));
                reply(Err(format!(
                    "extension {} did not answer tool {name} within {limit}",
                    ext.name
                )));
            }
            PendingKind::Guard { chain, pos } => {
                ext.log
                    .line("no event_intercept_response in time: counted as allow");
                if let Some(state) = self.chains.get_mut(&chain) {
                    state.ids[pos] = None;
                    state.chain.answer(pos, Answer::Allow);
                    self.drive(chain, now);
                }
            }
        }
    }

    /// While requests wait, check now and then that their extensions
    /// still run: a grandchild holding stdout open hides the exit.
    fn check_liveness(&mut self, now: Instant) {
        if self.pending.is_empty() {
            self.liveness_at = None;
            return;
        }
        match self.liveness_at {
            Some(at) if at > now => {}
            Some(_) => {
                let mut waiting: Vec<usize> = self.pending.values().map(|p| p.ext).collect();
                waiting.sort_unstable();
                waiting.dedup();
                for idx in waiting {
                    if let Some(status) =
                        self.exts[idx].proc.as_mut().and_then(ExtProcess::try_wait)
                    {
                        self.exited(idx, status, now);
                    }
                }
                self.liveness_at = Some(now + LIVENESS_EVERY);
            }
            None => self.liveness_at = Some(now + LIVENESS_EVERY),
        }
    }

    // ----- listing --------------------------------------------------

    fn snapshot(&self) -> Snapshot {
        let extensions = self
            .exts
            .iter()
            .enumerate()
            .map(|(idx, e)| {
                let (state, error) = match &e.state {
                    State::Starting => ("starting", None),
                    State::Ready => ("ready", None),
                    State::Failed(why) => ("failed", Some(why.clone())),
                    State::Exited(how) => ("exited", Some(how.clone())),
                    State::Disabled => ("disabled", None),
                };
                ExtensionInfo {
                    name: e.name.clone(),
                    version: e.version.clone(),
                    scope: e.scope.as_str(),
                    dir: e.dir.clone(),
                    state,
                    error,
                    pid: e.proc.as_ref().map(|p| p.pid),
                    commands: self.commands.owned_by(idx),
                    tools: self.tools.owned_by(idx),
                    events: e.events.clone(),
                    intercept: e.intercept.clone(),
                }
            })
            .collect();
        let commands = self
            .commands
            .owners()
            .map(|(name, c)| CommandInfo {
                name: name.to_string(),
                description: c.info.clone(),
                extension: self.exts[c.rank].name.clone(),
            })
            .collect();
        let tools = self
            .tools
            .owners()
            .map(|(name, c)| ToolInfo {
                name: name.to_string(),
                description: c.info.0.clone(),
                schema: c.info.1.clone(),
                extension: self.exts[c.rank].name.clone(),
            })
            .collect();
        Snapshot {
            extensions,
            commands,
            tools,
        }
    }
}
