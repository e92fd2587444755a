//! What crosses between the embedder (`host`) and the loop (`engine`):
//! requests and replies, outcomes, events, the snapshot; it uses neither.

use crate::intercept::InterceptOutcome;
use crate::protocol::{EventPayload, OpenPanel, Panel};
use serde::Serialize;
use serde_json::Value;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

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
    /// A built-in tool: only the pipeline ran; the embedder runs it unless `blocked`.
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
    /// Notes and panel updates dropped: the embedder was slow ([`crate::HostConfig::event_budget`]).
    EventsDropped {
        /// How many since the last report.
        count: u64,
    },
}

/// Why the host could not answer a request; `Display` is the user's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// No extension registered this command.
    UnknownCommand(String),
    /// No extension registered this tool.
    UnknownTool(String),
    /// The command is the embedder's own.
    HostCommand(String),
    /// The tool is built in: the embedder runs it, not an extension.
    BuiltInTool(String),
    /// Only `tool_call`, `turn_start` and `assistant_message` can be intercepted.
    NotInterceptable(String),
    /// No running extension has this name.
    NoSuchExtension(String),
    /// The extension cannot take a request now (stopping, stdin closed).
    NotServing(String),
    /// The extension did not answer in time.
    TimedOut {
        /// The extension asked.
        extension: String,
        /// What it was asked: `/NAME` or `tool NAME`.
        request: String,
        /// The timeout that passed.
        limit: Duration,
    },
    /// The extension exited while the request waited.
    Exited {
        /// The extension.
        extension: String,
        /// How it exited, e.g. `exit code 1`.
        status: String,
    },
    /// A reload replaced the extensions while the request waited.
    Reloaded,
    /// Only one reload runs at a time.
    ReloadRunning,
    /// A shutdown began before the request was accepted.
    ShuttingDown,
    /// A shutdown without waiting (a second Ctrl-C) cancelled it.
    Cancelled,
    /// The host has stopped.
    Stopped,
}

impl HostError {
    /// A command or tool the host does not run: the caller's mistake.
    pub fn is_unknown_name(&self) -> bool {
        use HostError::*;
        matches!(
            self,
            UnknownCommand(_) | UnknownTool(_) | HostCommand(_) | BuiltInTool(_)
        )
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use HostError::*;
        match self {
            UnknownCommand(name) => write!(f, "unknown command /{name}"),
            UnknownTool(name) => write!(f, "unknown tool {name}"),
            HostCommand(name) => write!(f, "/{name} is a host command"),
            BuiltInTool(name) => write!(f, "tool {name} is built in: the embedder runs it"),
            NotInterceptable(event) => write!(
                f,
                "event {event:?} cannot be intercepted (only tool_call, turn_start, assistant_message)"
            ),
            NoSuchExtension(name) => write!(f, "no running extension named {name:?}"),
            NotServing(name) => write!(f, "extension {name} is not accepting input"),
            TimedOut {
                extension,
                request,
                limit,
            } => write!(
                f,
                "extension {extension} did not answer {request} within {}",
                human(*limit)
            ),
            Exited { extension, status } => write!(f, "extension {extension} exited ({status})"),
            Reloaded => f.write_str("extensions were reloaded"),
            ReloadRunning => f.write_str("a reload is already running"),
            ShuttingDown => f.write_str("the extension host is shutting down"),
            Cancelled => f.write_str("cancelled: the extension host is shutting down"),
            Stopped => f.write_str("the extension host has stopped"),
        }
    }
}

impl std::error::Error for HostError {}

/// `30 s` or `250 ms`: whole seconds when exact, else milliseconds.
pub(crate) fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Where a reply goes: called once, on the loop thread, so it must be quick.
pub type Reply<T> = Box<dyn FnOnce(Result<T, HostError>) + Send>;

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
    /// Run a tool, with or without its pipeline (SPEC 3.11).
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
    /// Graceful stop (SPEC 3.14): accepted requests finish, later ones are refused.
    Shutdown {
        /// Called once every extension has stopped.
        reply: Reply<()>,
    },
    /// Stop at once (a second Ctrl-C): accepted requests fail.
    ShutdownNow {
        /// Called once every extension has stopped.
        reply: Reply<()>,
    },
}

impl Request {
    /// Answers the request with an error without running it.
    pub fn fail(self, error: HostError) {
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

    pub(crate) fn wait(&self) -> Vec<String> {
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(names) = &*ready {
                return names.clone();
            }
            ready = self.cond.wait(ready).unwrap_or_else(|p| p.into_inner());
        }
    }
}
