//! The embedder's view of the host: configuration, requests, outcomes,
//! events, and the blocking convenience calls on [`Host`].
//!
//! All work happens on one loop thread (see `engine`); this module only
//! sends it requests and waits for replies.

use crate::engine;
use crate::intercept::InterceptOutcome;
use crate::protocol::{EventPayload, OpenPanel, Panel};
use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;
use serde_json::Value;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Every deadline the host enforces (SPEC 3.8).
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// From spawn to `hello` (10 s).
    pub hello: Duration,
    /// Silence after which an extension that sent no `ready` is ready (250 ms).
    pub ready_idle: Duration,
    /// How long startup waits for every extension to be ready (3 s).
    pub startup: Duration,
    /// `command_invoked` to `command_response` (30 s).
    pub command: Duration,
    /// `tool_call` to `tool_result` (60 s).
    pub tool: Duration,
    /// One round of `event_intercept` answers (5 s; timeout = allow).
    pub intercept: Duration,
    /// From `shutdown` to SIGTERM (2 s).
    pub shutdown_grace: Duration,
    /// From SIGTERM to SIGKILL (1 s).
    pub term_grace: Duration,
    /// From a crash to the first restart (500 ms); it doubles with each
    /// crash within 3 minutes, up to 16 times this (SPEC 12).
    pub restart_backoff: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            hello: Duration::from_secs(10),
            ready_idle: Duration::from_millis(250),
            startup: Duration::from_secs(3),
            command: Duration::from_secs(30),
            tool: Duration::from_secs(60),
            intercept: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(2),
            term_grace: Duration::from_secs(1),
            restart_backoff: Duration::from_millis(500),
        }
    }
}

/// Tool names the agent implements itself (SPEC 3.7); the default of
/// [`HostConfig::builtin_tools`].
pub const BUILTIN_TOOLS: [&str; 5] = ["read", "write", "edit", "bash", "skill"];

/// How to start a [`Host`].
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// State directory: global extensions and logs live here.
    pub zot_home: PathBuf,
    /// The user's project directory: `.zot/extensions` and `hello_ack.cwd`.
    pub cwd: PathBuf,
    /// Extensions given explicitly (`-e`), highest precedence first.
    pub ext_paths: Vec<PathBuf>,
    /// Also discover project and global extensions.
    pub discover: bool,
    /// `hello_ack.zot_version`.
    pub zot_version: String,
    /// `hello_ack.provider`.
    pub provider: String,
    /// `hello_ack.model`.
    pub model: String,
    /// Deadlines.
    pub timeouts: Timeouts,
    /// Tool names the embedder implements itself; they always win.
    pub builtin_tools: Vec<String>,
    /// Command names the embedder implements itself; they always win.
    pub builtin_commands: Vec<String>,
    /// Bytes that may wait in one extension's stdin queue before further
    /// events to it are dropped (and counted in its log).
    pub event_queue_limit: usize,
    /// Size at which an extension's log is rotated to `.log.1`, at start
    /// and while it runs; its logs stay under twice this on disk.
    pub log_rotate_bytes: u64,
    /// Bytes of notes and panel updates that may wait in
    /// [`Host::events`] for the embedder to take them; beyond it they are
    /// dropped, counted, and reported by [`HostEvent::EventsDropped`].
    pub event_budget: usize,
}

impl HostConfig {
    /// Defaults: discovery on, SPEC timeouts, the built-in tools
    /// `read write edit bash skill` and the session's host commands.
    pub fn new(zot_home: PathBuf, cwd: PathBuf) -> HostConfig {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        HostConfig {
            zot_home,
            cwd,
            ext_paths: Vec::new(),
            discover: true,
            zot_version: env!("CARGO_PKG_VERSION").to_string(),
            provider: String::new(),
            model: String::new(),
            timeouts: Timeouts::default(),
            builtin_tools: names(&BUILTIN_TOOLS),
            builtin_commands: names(&[
                "help",
                "commands",
                "tools",
                "ext",
                "call",
                "reload-ext",
                "clear",
                "quit",
                "exit",
                "key",
            ]),
            event_queue_limit: 16 * 1024 * 1024,
            log_rotate_bytes: crate::log::ROTATE_BYTES,
            event_budget: 8 * 1024 * 1024,
        }
    }
}

/// What a slash command asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CommandOutcome {
    /// The extension that ran it.
    pub extension: String,
    /// `prompt`, `insert`, `display`, `noop` or `open_panel`.
    pub action: String,
    /// Text to submit as a user message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Text for the input line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insert: Option<String>,
    /// A one-shot note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// A panel to open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_panel: Option<OpenPanel>,
    /// An error to show, whatever the action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A tool call from the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    /// Tool name.
    pub name: String,
    /// Arguments; `{}` when the model gave none.
    pub args: Value,
    /// The model's id for the call; one is made up when absent.
    pub tool_id: Option<String>,
}

/// A tool's result, attributed to its extension; for a built-in tool
/// (which the embedder runs itself) the verdict of the pipeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolOutcome {
    /// The extension that owns the tool.
    pub extension: String,
    /// Result blocks: `{"type":"text","text"}` or `{"type":"image","mime_type","data"}`.
    pub content: Vec<Value>,
    /// The call failed.
    pub is_error: bool,
    /// A guard refused the call; it never ran.
    pub blocked: bool,
    /// The guard's reason, when blocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A built-in tool: the event and the guards ran, nothing was
    /// executed; the embedder runs it with `args` unless `blocked`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub builtin: bool,
    /// Built-in tools: the final arguments, as the guards rewrote them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// An interception request for an event the embedder is about to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct InterceptRequest {
    /// `tool_call`, `turn_start` or `assistant_message`.
    pub event: String,
    /// The event's fields.
    pub payload: EventPayload,
}

/// State of one extension.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtensionInfo {
    /// Manifest name (directory name when the manifest is invalid).
    pub name: String,
    /// Manifest version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `explicit`, `project` or `global`.
    pub scope: &'static str,
    /// Extension directory.
    pub dir: PathBuf,
    /// `starting`, `ready`, `failed`, `exited` or `disabled`.
    pub state: &'static str,
    /// Why it failed or how it exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Process id while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Commands it owns.
    pub commands: Vec<String>,
    /// Tools it owns.
    pub tools: Vec<String>,
    /// Events it observes.
    pub events: Vec<String>,
    /// Events it intercepts.
    pub intercept: Vec<String>,
    /// How often it was restarted after a crash (SPEC 12).
    pub restarts: u32,
}

/// A registered command.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandInfo {
    /// Name without the slash.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Owning extension.
    pub extension: String,
}

/// A registered tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its args, when given.
    pub schema: Option<Value>,
    /// Owning extension.
    pub extension: String,
}

/// Everything the host knows, at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Every extension, in precedence order.
    pub extensions: Vec<ExtensionInfo>,
    /// Commands by name.
    pub commands: Vec<CommandInfo>,
    /// Tools by name.
    pub tools: Vec<ToolInfo>,
}

impl Snapshot {
    /// State of the extension called `name`.
    pub fn extension(&self, name: &str) -> Option<&ExtensionInfo> {
        self.extensions.iter().find(|e| e.name == name)
    }
}

/// What `/reload-ext` did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReloadReport {
    /// Extensions stopped.
    pub stopped: usize,
    /// Extensions started.
    pub loaded: usize,
    /// Of those, ready when startup finished.
    pub ready: usize,
    /// Invalid manifests, failed starts and handshakes.
    pub errors: Vec<String>,
}

/// Something the host tells the embedder, unasked.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostEvent {
    /// Startup readiness reached (once): these extensions are ready.
    Ready {
        /// Names of the ready extensions.
        extensions: Vec<String>,
    },
    /// A note for the user.
    Notify {
        /// The extension that sent it.
        extension: String,
        /// `info`, `success`, `warn` or `error`.
        level: String,
        /// The note's text.
        message: String,
    },
    /// Retract every note of `extension`.
    ClearNotes {
        /// The extension whose notes go.
        extension: String,
    },
    /// Show or update a panel.
    PanelRender {
        /// The panel, flattened into the event.
        #[serde(flatten)]
        panel: Panel,
        /// The extension that owns it.
        extension: String,
    },
    /// Close a panel.
    PanelClose {
        /// The panel to close.
        panel_id: String,
        /// The extension that owns it.
        extension: String,
    },
    /// An extension finished registering after startup.
    Registered {
        /// The extension's name.
        extension: String,
    },
    /// An extension exited on its own.
    ExtensionExited {
        /// The extension's name.
        extension: String,
        /// How it exited, e.g. `exit code 1` or `signal 9`.
        status: String,
    },
    /// A crashed extension was started again (SPEC 12).
    ExtensionRestarted {
        /// The extension's name.
        extension: String,
        /// Which restart since its crashes began (1 for the first).
        attempt: u32,
        /// How the crash before this restart ended it, e.g. `exit code 3`.
        status: String,
    },
    /// An extension could not be started or failed its handshake.
    ExtensionFailed {
        /// The extension's name.
        extension: String,
        /// Why it failed.
        error: String,
    },
    /// Notes and panel updates were dropped because the embedder did
    /// not take events fast enough ([`HostConfig::event_budget`]).
    EventsDropped {
        /// How many since the last report.
        count: u64,
    },
}

/// Where a reply goes: called once, on the host loop thread, so it
/// must be quick (send on a channel, write to a queue).
pub type Reply<T> = Box<dyn FnOnce(Result<T, String>) + Send>;

/// A request to the host loop. Each carries its own [`Reply`].
pub enum Request {
    /// Run the slash command `name` with `args`.
    Command {
        /// Command name, without the slash.
        name: String,
        /// Text after the command name.
        args: String,
        /// Gets the extension's answer.
        reply: Reply<CommandOutcome>,
    },
    /// Run a tool; `pipeline` runs the `tool_call` event and the
    /// interception chain first (SPEC 3.11).
    Tool {
        /// The tool and its arguments.
        call: ToolRequest,
        /// Run the event and interception first.
        pipeline: bool,
        /// Gets the tool's result.
        reply: Reply<ToolOutcome>,
    },
    /// Run the interception chain only.
    Intercept {
        /// The event to put to the guards.
        request: InterceptRequest,
        /// Gets the chain's outcome.
        reply: Reply<InterceptOutcome>,
    },
    /// Emit a lifecycle event; replies with the subscribers it was queued to.
    Emit {
        /// Event name, e.g. `turn_end`.
        event: String,
        /// The event's fields.
        payload: EventPayload,
        /// Gets the names of the extensions it was queued to.
        reply: Reply<Vec<String>>,
    },
    /// Forward a key to an extension's panel.
    PanelKey {
        /// The extension that owns the panel.
        extension: String,
        /// The panel's id.
        panel_id: String,
        /// One of [`PANEL_KEYS`](crate::protocol::PANEL_KEYS).
        key: String,
        /// The typed text, for `rune`.
        text: Option<String>,
        /// Gets whether the key could be sent.
        reply: Reply<()>,
    },
    /// Tell an extension its panel was closed.
    PanelClose {
        /// The extension that owns the panel.
        extension: String,
        /// The panel's id.
        panel_id: String,
        /// Gets whether the close could be sent.
        reply: Reply<()>,
    },
    /// Extensions and registries.
    List {
        /// Gets the snapshot.
        reply: Reply<Snapshot>,
    },
    /// Stop every extension, rediscover, start again.
    Reload {
        /// Gets what the reload did.
        reply: Reply<ReloadReport>,
    },
    /// Graceful stop (SPEC 3.14): requests accepted before it finish
    /// first (each within its own timeout), later ones are refused; then
    /// every extension is stopped; the loop ends after the reply.
    Shutdown {
        /// Called once every extension has stopped.
        reply: Reply<()>,
    },
    /// Stop without waiting for accepted requests (a second Ctrl-C):
    /// they fail at once, then every extension is stopped as above.
    ShutdownNow {
        /// Called once every extension has stopped.
        reply: Reply<()>,
    },
}

impl Request {
    /// Answers the request with an error without running it.
    pub fn fail(self, error: String) {
        match self {
            Request::Command { reply, .. } => reply(Err(error)),
            Request::Tool { reply, .. } => reply(Err(error)),
            Request::Intercept { reply, .. } => reply(Err(error)),
            Request::Emit { reply, .. } => reply(Err(error)),
            Request::PanelKey { reply, .. } | Request::PanelClose { reply, .. } => {
                reply(Err(error))
            }
            Request::List { reply } => reply(Err(error)),
            Request::Reload { reply } => reply(Err(error)),
            Request::Shutdown { reply } | Request::ShutdownNow { reply } => reply(Err(error)),
        }
    }
}

const STOPPED: &str = "the extension host has stopped";

/// A cheap, cloneable way to send requests from any thread.
///
/// Ordering: everything one extension writes reaches the embedder in
/// the order written (SPEC 3.17). An event is in [`Host::events`] before
/// the reply to a request that the extension answered after it is
/// delivered. Events written after the answer may be there too by the
/// time the consumer sees the reply: a consumer that reads
/// [`HostHandle::events_sent`] inside the reply callback and, before
/// acting on the reply, takes events until it has taken that many in
/// all, keeps the exact order.
#[derive(Clone)]
pub struct HostHandle {
    tx: Sender<Request>,
    ready: Arc<ReadyLatch>,
    events_sent: Arc<AtomicU64>,
}

impl HostHandle {
    /// How many events the host has put into [`Host::events`] so far.
    /// Reply callbacks run on the host loop, which is the only sender of
    /// events, so read inside one it counts exactly the events sent
    /// before that reply (see [`HostHandle`] on ordering).
    pub fn events_sent(&self) -> u64 {
        self.events_sent.load(Ordering::SeqCst)
    }

    /// Blocks until startup readiness (see [`Host::wait_ready`]).
    pub fn wait_ready(&self) -> Vec<String> {
        self.ready.wait()
    }

    /// Queues a request; its reply arrives through its callback. After
    /// the host stopped the callback gets an error at once.
    pub fn submit(&self, request: Request) {
        if let Err(e) = self.tx.send(request) {
            e.into_inner().fail(STOPPED.to_string());
        }
    }

    /// Sends a request and blocks for its reply.
    pub fn call<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, String> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.submit(make(Box::new(move |r| {
            let _ = tx.send(r);
        })));
        crate::engine::poll_briefly(|| !rx.is_empty());
        rx.recv().unwrap_or_else(|_| Err(STOPPED.to_string()))
    }
}

/// Set once startup readiness is reached.
#[derive(Default)]
pub(crate) struct ReadyLatch {
    ready: Mutex<Option<Vec<String>>>,
    cond: Condvar,
}

impl ReadyLatch {
    pub(crate) fn set(&self, names: Vec<String>) {
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        if ready.is_none() {
            *ready = Some(names);
            self.cond.notify_all();
        }
    }

    fn wait(&self) -> Vec<String> {
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(names) = &*ready {
                return names.clone();
            }
            ready = self.cond.wait(ready).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A running extension host. Dropping it shuts it down gracefully.
pub struct Host {
    handle: HostHandle,
    events: Receiver<HostEvent>,
    ready: Arc<ReadyLatch>,
    thread: Option<JoinHandle<()>>,
}

impl Host {
    /// Discovers and starts the extensions on a new loop thread; returns
    /// at once. Use [`Host::wait_ready`] to wait for startup readiness.
    pub fn start(config: HostConfig) -> io::Result<Host> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (event_tx, events) = crossbeam_channel::unbounded();
        let ready = Arc::new(ReadyLatch::default());
        let latch = ready.clone();
        let events_sent = Arc::new(AtomicU64::new(0));
        let sent = events_sent.clone();
        let thread = std::thread::Builder::new()
            .name("zot-host".into())
            .spawn(move || engine::run(config, rx, event_tx, sent, latch))?;
        Ok(Host {
            handle: HostHandle {
                tx,
                ready: ready.clone(),
                events_sent,
            },
            events,
            ready,
            thread: Some(thread),
        })
    }

    /// Unasked events: notes, panels, readiness, exits. Notes and panel
    /// updates wait here within [`HostConfig::event_budget`] bytes; an
    /// embedder that does not take them loses them (counted), never
    /// memory. Events emitted before a reply are here before the reply
    /// is delivered (see [`HostHandle`]).
    pub fn events(&self) -> &Receiver<HostEvent> {
        &self.events
    }

    /// A handle for submitting requests from other threads.
    pub fn handle(&self) -> HostHandle {
        self.handle.clone()
    }

    /// Blocks until every extension is ready or failed, or the startup
    /// grace ran out; returns the names of the ready ones.
    pub fn wait_ready(&self) -> Vec<String> {
        self.ready.wait()
    }

    /// Runs a slash command (name without `/`).
    pub fn command(&self, name: &str, args: &str) -> Result<CommandOutcome, String> {
        let (name, args) = (name.to_string(), args.to_string());
        self.handle
            .call(|reply| Request::Command { name, args, reply })
    }

    /// Runs a tool through the pipeline: `tool_call` event, the
    /// interception chain, then the owning extension. For a built-in
    /// tool nothing runs after the chain: the outcome has `builtin` set
    /// and the final `args` (SPEC 7).
    pub fn call_tool(&self, call: ToolRequest) -> Result<ToolOutcome, String> {
        self.handle.call(|reply| Request::Tool {
            call,
            pipeline: true,
            reply,
        })
    }

    /// Runs a tool directly, without event or interception.
    pub fn call_tool_direct(&self, call: ToolRequest) -> Result<ToolOutcome, String> {
        self.handle.call(|reply| Request::Tool {
            call,
            pipeline: false,
            reply,
        })
    }

    /// Asks the guards about an event the embedder is about to act on.
    pub fn intercept(&self, request: InterceptRequest) -> Result<InterceptOutcome, String> {
        self.handle
            .call(|reply| Request::Intercept { request, reply })
    }

    /// Emits a lifecycle event; returns the subscribers it was queued to.
    pub fn emit(&self, event: &str, payload: EventPayload) -> Result<Vec<String>, String> {
        let event = event.to_string();
        self.handle.call(|reply| Request::Emit {
            event,
            payload,
            reply,
        })
    }

    /// Queues a lifecycle event without waiting: for bursts. Events keep
    /// their order with each other and with every other request from
    /// this host; [`Host::emit`] waits and says who got it.
    pub fn emit_nowait(&self, event: &str, payload: EventPayload) {
        self.handle.submit(Request::Emit {
            event: event.to_string(),
            payload,
            reply: Box::new(|_| {}),
        });
    }

    /// Forwards a key pressed in `panel_id` to `extension`.
    pub fn panel_key(
        &self,
        extension: &str,
        panel_id: &str,
        key: &str,
        text: Option<&str>,
    ) -> Result<(), String> {
        let (extension, panel_id, key) =
            (extension.to_string(), panel_id.to_string(), key.to_string());
        let text = text.map(str::to_string);
        self.handle.call(|reply| Request::PanelKey {
            extension,
            panel_id,
            key,
            text,
            reply,
        })
    }

    /// Tells `extension` its panel `panel_id` was closed.
    pub fn panel_close(&self, extension: &str, panel_id: &str) -> Result<(), String> {
        let (extension, panel_id) = (extension.to_string(), panel_id.to_string());
        self.handle.call(|reply| Request::PanelClose {
            extension,
            panel_id,
            reply,
        })
    }

    /// Extensions and registries as they are now.
    pub fn list(&self) -> Result<Snapshot, String> {
        self.handle.call(|reply| Request::List { reply })
    }

    /// Stops every extension, rediscovers and starts them again.
    pub fn reload(&self) -> Result<ReloadReport, String> {
        self.handle.call(|reply| Request::Reload { reply })
    }

    /// Graceful shutdown (SPEC 3.14): requests already submitted finish
    /// first, then the extensions stop; returns when every one is gone.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let _ = self.handle.call(|reply| Request::Shutdown { reply });
        let _ = thread.join();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop();
    }
}
