//! What crosses between the embedder (`host`) and the loop (`engine`):
//! requests and replies, outcomes, events, the snapshot; it uses neither.

use crate::ext::discovery::Scope;
use crate::intercept::{InterceptEvent, InterceptOutcome};
use crate::log::human;
#[cfg(feature = "panels")]
use crate::wire::panels::{OpenPanel, Panel, PanelKey};
use crate::wire::protocol::EventPayload;
use crate::wire::toolresult::Content;
// A tool as registered is the wire's; the API's data re-exports it.
#[cfg(feature = "tool-extras")]
pub use crate::wire::tooldef::Exposure;
#[cfg(feature = "journal")]
pub use crate::wire::tooldef::Replay;
pub use crate::wire::tooldef::ToolInfo;
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
    /// What the host is asked to do; its text is in the field of the same name.
    pub action: Action,
    /// Text to submit as a user message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `tool_prompt`: the tool to run before the prompt (docs/PROTOCOL.md#commands-and-actions).
    #[cfg(feature = "tool-extras")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// `tool_prompt`: its args, a JSON object.
    #[cfg(feature = "tool-extras")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_args: Option<Value>,
    /// Text for the input line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insert: Option<String>,
    /// A one-shot note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// A panel to open.
    #[cfg(feature = "panels")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_panel: Option<OpenPanel>,
    /// An error to show; with one, the action is `noop` (the one the
    /// extension asked for is skipped, as upstream does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

closed_set! {
    /// What a slash command asks the host for (`command_response.action`).
    #[derive(Default)]
    pub enum Action {
        /// Submit [`CommandOutcome::prompt`] as a user message.
        Prompt = "prompt",
        /// Put [`CommandOutcome::insert`] in the input line.
        Insert = "insert",
        /// Show [`CommandOutcome::display`] once.
        Display = "display",
        /// Nothing (also when the command failed: see [`CommandOutcome::error`]).
        #[default]
        Noop = "noop",
        /// Open `CommandOutcome::open_panel` (the `panels` feature).
        OpenPanel = "open_panel" if "panels",
        /// Run `CommandOutcome::tool_name`, then submit the prompt
        /// (docs/PROTOCOL.md#commands-and-actions; the `tool-extras` feature).
        ToolPrompt = "tool_prompt" if "tool-extras",
    }
}

closed_set! {
    /// How loud a note is ([`HostEvent::Notify`], [`HostEvent::HostNote`]).
    pub enum Level {
        /// For information (also what an unknown level is shown as).
        Info = "info",
        /// Something worked.
        Success = "success",
        /// Something to look at.
        Warn = "warn",
        /// Something failed.
        Error = "error",
    }
}

closed_set! {
    /// How an extension became ready (docs/PROTOCOL.md#readiness).
    pub enum ReadyVia {
        /// It sent `ready`.
        Ready = "ready",
        /// It registered and then stayed silent for the ready watchdog.
        Watchdog = "watchdog",
    }
}

closed_set! {
    /// Which registry a [`NameConflict`] is in.
    pub enum NameKind {
        /// Slash commands.
        Command = "command",
        /// Tools.
        Tool = "tool",
    }
}

/// Where an extension is in its life, with why it failed or how it
/// exited. On the wire `state` is the variant's name and `error` its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ExtensionState {
    /// Started, not yet ready.
    Starting,
    /// Ready (also while it is being stopped after it said hello).
    Ready,
    /// It could not start, failed its handshake or was killed.
    Failed {
        /// Why.
        #[serde(rename = "error")]
        reason: String,
    },
    /// It exited on its own and was not restarted.
    Exited {
        /// How, e.g. `exit code 1` or `signal 9`.
        #[serde(rename = "error")]
        status: String,
    },
    /// `enabled: false`: never started.
    Disabled,
    /// No `exec`: a bundle of files, never started (docs/PROTOCOL.md#bundles).
    #[cfg(feature = "bundles")]
    Bundle,
    /// A project extension the user has not trusted: never started (docs/PROTOCOL.md#trust).
    Untrusted {
        /// Why it is not trusted (never, or its files changed).
        #[serde(rename = "error")]
        reason: String,
    },
}

impl ExtensionState {
    /// Its name on the wire: `starting`, `ready`, `failed`, `exited`,
    /// `disabled`, `bundle` or `untrusted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ExtensionState::Starting => "starting",
            ExtensionState::Ready => "ready",
            ExtensionState::Failed { .. } => "failed",
            ExtensionState::Exited { .. } => "exited",
            ExtensionState::Disabled => "disabled",
            #[cfg(feature = "bundles")]
            ExtensionState::Bundle => "bundle",
            ExtensionState::Untrusted { .. } => "untrusted",
        }
    }

    /// Why it failed, how it exited or why it is untrusted.
    pub fn error(&self) -> Option<&str> {
        match self {
            ExtensionState::Failed { reason } | ExtensionState::Untrusted { reason } => {
                Some(reason)
            }
            ExtensionState::Exited { status } => Some(status),
            _ => None,
        }
    }
}

impl fmt::Display for ExtensionState {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// Sent as the `tool_call`'s `operation_key`: a stable key, the same
    /// for every replay of one call (the `journal` feature).
    #[cfg(feature = "journal")]
    pub operation_key: Option<String>,
    /// Sent as `reconcile: true` (with `operation_key`): the extension
    /// must not perform the operation, only say whether it happened; the
    /// answer's state is [`ToolResult::reconciled`] (the `journal` feature).
    #[cfg(feature = "journal")]
    pub reconcile: bool,
}

impl ToolRequest {
    /// A call of `name` with `args`, without an id of the model's.
    pub fn new(name: impl Into<String>, args: Value) -> ToolRequest {
        ToolRequest {
            name: name.into(),
            args,
            tool_id: None,
            #[cfg(feature = "journal")]
            operation_key: None,
            #[cfg(feature = "journal")]
            reconcile: false,
        }
    }

    /// The same call with `operation_key` `key`.
    #[cfg(feature = "journal")]
    pub fn with_operation_key(self, key: impl Into<String>) -> ToolRequest {
        ToolRequest {
            operation_key: Some(key.into()),
            ..self
        }
    }

    /// The same call as a reconcile call: the extension only reports
    /// whether the operation under its key happened.
    #[cfg(feature = "journal")]
    pub fn reconciling(self) -> ToolRequest {
        ToolRequest {
            reconcile: true,
            ..self
        }
    }

    /// The same call under the model's id `tool_id`.
    pub fn with_id(self, tool_id: impl Into<String>) -> ToolRequest {
        ToolRequest {
            tool_id: Some(tool_id.into()),
            ..self
        }
    }
}

/// What a tool call came to: an extension's result, or for a built-in
/// tool (which the embedder runs itself) the pipeline's verdict (docs/PROTOCOL.md#tool-pipeline).
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// An extension's tool answered, or a guard refused it
    /// ([`ToolResult::blocked`]).
    Ran(ToolResult),
    /// A built-in tool: only its event and guards ran.
    Builtin(BuiltinVerdict),
}

impl ToolOutcome {
    /// The extension's result; `None` for a built-in tool's verdict.
    pub fn ran(self) -> Option<ToolResult> {
        match self {
            ToolOutcome::Ran(result) => Some(result),
            ToolOutcome::Builtin(_) => None,
        }
    }

    /// A built-in tool's verdict; `None` for an extension's result.
    pub fn builtin(self) -> Option<BuiltinVerdict> {
        match self {
            ToolOutcome::Builtin(verdict) => Some(verdict),
            ToolOutcome::Ran(_) => None,
        }
    }

    /// A guard refused the call: it never ran.
    pub fn blocked(&self) -> bool {
        match self {
            ToolOutcome::Ran(result) => result.blocked,
            ToolOutcome::Builtin(verdict) => matches!(verdict, BuiltinVerdict::Blocked { .. }),
        }
    }
}

/// On the wire an extension's result is [`ToolResult`]'s fields, a
/// verdict `{builtin: true, blocked, args, reason?}`.
impl Serialize for ToolOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (args, reason) = match self {
            ToolOutcome::Ran(result) => return result.serialize(s),
            ToolOutcome::Builtin(BuiltinVerdict::Run { args }) => (args, None),
            ToolOutcome::Builtin(BuiltinVerdict::Blocked { args, reason }) => (args, Some(reason)),
        };
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("builtin", &true)?;
        map.serialize_entry("blocked", &reason.is_some())?;
        map.serialize_entry("args", args)?;
        if let Some(reason) = reason {
            map.serialize_entry("reason", reason)?;
        }
        map.end()
    }
}

/// A tool's result, attributed to its extension.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolResult {
    /// The extension that owns the tool.
    pub extension: String,
    /// Result blocks, as the model is given them (never empty).
    pub content: Vec<Content>,
    /// The call failed.
    pub is_error: bool,
    /// A guard refused the call; it never ran (the content is the reason).
    pub blocked: bool,
    /// The guard's reason, when blocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tool's `structured_content`, as it came
    /// (docs/PROTOCOL.md#structured-and-deferred-tools).
    #[cfg(feature = "tool-extras")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// The tool declares an `output_schema` (MCP clients then require
    /// `structured_content`).
    #[cfg(feature = "tool-extras")]
    #[serde(skip)]
    pub declares_output: bool,
    /// A reconcile call's answer: whether the operation happened.
    #[cfg(feature = "journal")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<ReconcileState>,
}

#[cfg(feature = "journal")]
closed_set! {
    /// What a reconcile call found (its `structured_content.state`;
    /// missing or malformed is `Unknown`).
    pub enum ReconcileState {
        /// The operation happened: the result is its result.
        Completed = "completed",
        /// It never started: it may be run.
        NotStarted = "not_started",
        /// The extension cannot tell.
        Unknown = "unknown",
    }
}

#[cfg(feature = "journal")]
impl ReconcileState {
    /// The state a reconcile answer's `structured_content` gives.
    pub fn of(structured: Option<&Value>) -> ReconcileState {
        let state = structured
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str);
        state
            .and_then(ReconcileState::parse)
            .unwrap_or(ReconcileState::Unknown)
    }
}

/// The pipeline's verdict on a built-in tool, which the embedder runs.
#[derive(Debug, Clone, PartialEq)]
pub enum BuiltinVerdict {
    /// The guards allowed it: run it with `args`, as they rewrote them.
    Run {
        /// The final arguments.
        args: Value,
    },
    /// A guard refused it: do not run it.
    Blocked {
        /// The guard's reason, for the model.
        reason: String,
        /// The arguments as they stood.
        args: Value,
    },
}

/// An interception request for an event the embedder is about to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct InterceptRequest {
    /// The event.
    pub event: InterceptEvent,
    /// The event's fields.
    pub payload: EventPayload,
}

impl InterceptRequest {
    /// Asks the guards of `event` about `payload`.
    pub fn new(event: InterceptEvent, payload: EventPayload) -> InterceptRequest {
        InterceptRequest { event, payload }
    }
}

/// State of one extension: `name` from the manifest (the directory's when
/// the manifest is invalid), where it was found, its state (with why it
/// failed or how it exited), `pid` while it runs, the names it owns or subscribed to, its
/// `restarts` after crashes (docs/PROTOCOL.md#supervision), the absolute paths of the
/// `skills` files and `theme` it ships, for the embedder to load (with the
/// `bundles` feature), how it became ready, and the names it lost to others.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtensionInfo {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub scope: Scope,
    pub dir: PathBuf,
    #[serde(flatten)]
    pub state: ExtensionState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub commands: Vec<String>,
    pub tools: Vec<String>,
    pub events: Vec<String>,
    pub intercept: Vec<InterceptEvent>,
    pub restarts: u32,
    #[cfg(feature = "bundles")]
    pub skills: Vec<PathBuf>,
    #[cfg(feature = "bundles")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theme: Option<PathBuf>,
    /// How it became ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_via: Option<ReadyVia>,
    /// Names it registered that another owns.
    pub conflicts: Vec<NameConflict>,
}

/// A command or tool name an extension registered but lost (docs/PROTOCOL.md#names-and-precedence):
/// `winner` the extension that owns it, or `built-in`.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameConflict {
    pub kind: NameKind,
    pub name: String,
    pub winner: String,
}

/// A registered command (`name` without `/`) and its owning extension.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandInfo {
    pub name: String,
    pub description: String,
    pub extension: String,
}

/// Everything the host knows, at one moment: extensions in precedence
/// order, commands and tools by name.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    pub extensions: Vec<ExtensionInfo>,
    pub commands: Vec<CommandInfo>,
    pub tools: Vec<ToolInfo>,
    /// What is in flight: requests sent to extensions and not answered,
    /// tool pipeline runs (the embedder's and `call_tool`'s).
    pub in_flight: InFlight,
}

/// Sizes of the host's tables of unfinished work: after every request
/// is answered they are back to zero (nothing leaks).
#[allow(missing_docs)]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InFlight {
    pub requests: usize,
    pub tool_calls: usize,
}

impl Snapshot {
    /// State of the extension called `name`.
    pub fn extension(&self, name: &str) -> Option<&ExtensionInfo> {
        self.extensions.iter().find(|e| e.name == name)
    }
}

/// What `/reload-ext` did: extensions `stopped`, `loaded` (started) and of
/// those `ready` when startup finished; invalid manifests, failed starts
/// and handshakes as `errors`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReloadReport {
    pub stopped: usize,
    pub loaded: usize,
    pub ready: usize,
    pub errors: Vec<String>,
}

/// Something the host tells the embedder, unasked.
#[allow(missing_docs)] // each variant's line says what its fields are
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostEvent {
    /// Startup readiness reached (once): these extensions are ready.
    Ready { extensions: Vec<String> },
    /// A note for the user.
    Notify {
        extension: String,
        level: Level,
        message: String,
    },
    /// Retract every note of `extension`.
    ClearNotes { extension: String },
    /// Show or update a panel of `extension`.
    #[cfg(feature = "panels")]
    PanelRender {
        #[serde(flatten)]
        panel: Panel,
        extension: String,
    },
    /// A note from the host itself, e.g. a `before_agent_start` answer
    /// it could not use (docs/PROTOCOL.md#system-prompt); `level` as for [`HostEvent::Notify`].
    HostNote { level: Level, message: String },
    /// Close a panel of `extension`.
    #[cfg(feature = "panels")]
    PanelClose { panel_id: String, extension: String },
    /// `extension` opened a panel by itself, outside any command (docs/PROTOCOL.md#panels).
    #[cfg(feature = "panels")]
    OpenPanel { extension: String, panel: OpenPanel },
    /// `extension` submits `text` as a user prompt (docs/PROTOCOL.md#submits).
    #[cfg(feature = "panels")]
    Submit { extension: String, text: String },
    /// `extension` asks to run the slash command line `text` as if typed.
    #[cfg(feature = "panels")]
    SubmitSlash { extension: String, text: String },
    /// An extension finished registering after startup.
    Registered { extension: String },
    /// A `tool_result` of `extension` activated these deferred tools of
    /// its own (docs/PROTOCOL.md#structured-and-deferred-tools).
    #[cfg(feature = "tool-extras")]
    ToolsActivated {
        extension: String,
        names: Vec<String>,
    },
    /// An extension exited on its own; `status` is e.g. `exit code 1` or `signal 9`.
    ExtensionExited { extension: String, status: String },
    /// A crashed extension was started again (docs/PROTOCOL.md#supervision); `attempt` counts
    /// from 1, `status` says how the crash before it ended.
    ExtensionRestarted {
        extension: String,
        attempt: u32,
        status: String,
    },
    /// An extension could not be started or failed its handshake.
    ExtensionFailed { extension: String, error: String },
    /// Notes and panel updates dropped since the last report: the embedder
    /// was slow ([`crate::HostConfig::event_budget`]).
    EventsDropped { count: u64 },
    /// An extension's `call_tool` for a built-in tool, which the embedder
    /// runs (the `ext-calls` feature, docs/PROTOCOL.md#calls-from-extensions):
    /// answer with [`BuiltinReply::send`] within the tool timeout. `args`
    /// are final (the guards allowed them).
    #[cfg(feature = "ext-calls")]
    BuiltinCall {
        call_id: String,
        extension: String,
        name: String,
        args: Value,
        #[serde(skip)]
        reply: BuiltinReply,
    },
}

/// How the embedder answers a [`HostEvent::BuiltinCall`].
#[cfg(feature = "ext-calls")]
#[derive(Clone, Default)]
pub struct BuiltinReply {
    pub(crate) call_id: String,
    pub(crate) tx: Option<crossbeam_channel::Sender<Request>>,
    /// Inline, runs the host loop until the condition holds, so the
    /// answer is taken even when no other thread runs it.
    pub(crate) drive: Option<Drive>,
}

/// Runs the host loop on the calling thread until the condition holds
/// (or the host is done); see `host.rs`.
#[cfg(feature = "ext-calls")]
pub(crate) type Drive = std::sync::Arc<dyn Fn(&mut dyn FnMut() -> bool) + Send + Sync>;

#[cfg(feature = "ext-calls")]
impl BuiltinReply {
    /// Sends the built-in tool's result blocks; false when the call no
    /// longer waits (cancelled, timed out, its caller gone).
    pub fn send(&self, content: Vec<Value>, is_error: bool) -> bool {
        let Some(tx) = &self.tx else { return false };
        let (done, answered) = crossbeam_channel::bounded(1);
        let request = Request::BuiltinResult {
            call_id: self.call_id.clone(),
            content,
            is_error,
            reply: Box::new(move |r| {
                let _ = done.send(r.unwrap_or(false));
            }),
        };
        if tx.send(request).is_err() {
            return false;
        }
        match &self.drive {
            Some(drive) => {
                drive(&mut || !answered.is_empty());
                answered.try_recv().unwrap_or(false)
            }
            None => answered.recv().unwrap_or(false),
        }
    }
}

#[cfg(feature = "ext-calls")]
impl fmt::Debug for BuiltinReply {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "BuiltinReply({})", self.call_id)
    }
}

#[cfg(feature = "ext-calls")]
impl PartialEq for BuiltinReply {
    fn eq(&self, other: &Self) -> bool {
        self.call_id == other.call_id
    }
}

/// Names one request for [`crate::HostHandle::cancel`]; made by
/// [`crate::HostHandle::ticket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub(crate) u64);

/// Why the host could not answer a request; `Display` is the user's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// No extension registered this command.
    UnknownCommand(String),
    /// No extension registered this tool.
    UnknownTool(String),
    /// A deferred tool no `tool_result` has activated yet
    /// (docs/PROTOCOL.md#structured-and-deferred-tools).
    #[cfg(feature = "tool-extras")]
    InactiveTool(String),
    /// The command is the embedder's own.
    HostCommand(String),
    /// The tool is built in: the embedder runs it, not an extension.
    BuiltInTool(String),
    /// Only `tool_call`, `turn_start` and `assistant_message` can be intercepted.
    NotInterceptable(String),
    /// An event payload carries a field the host sets itself (`sequence`,
    /// or a frame key: `type`, `event`, `id`; docs/PROTOCOL.md#events).
    ReservedField(String),
    /// No running extension has this name.
    NoSuchExtension(String),
    /// The extension cannot take a request now (stopping, stdin closed).
    NotServing(String),
    /// The extension did not answer `request` (`/NAME` or `tool NAME`) within `limit`.
    #[allow(missing_docs)]
    TimedOut {
        extension: String,
        request: String,
        limit: Duration,
    },
    /// The request waited for an extension still starting (docs/PROTOCOL.md#readiness), and
    /// it failed before it registered the name: `reason` says why.
    #[allow(missing_docs)]
    StartFailed { extension: String, reason: String },
    /// The extension exited while the request waited; `status` is e.g. `exit code 1`.
    #[allow(missing_docs)]
    Exited { extension: String, status: String },
    /// A reload replaced the extensions while the request waited.
    Reloaded,
    /// Only one reload runs at a time.
    ReloadRunning,
    /// A shutdown began before the request was accepted.
    ShuttingDown,
    /// A shutdown without waiting (a second Ctrl-C) cancelled it.
    Cancelled,
    /// Its caller cancelled it (docs/PROTOCOL.md#cancellation).
    CallCancelled,
    /// An extension's `call_tool` of `name` did not finish within `limit`.
    #[allow(missing_docs)]
    CallTimedOut { name: String, limit: Duration },
    /// The host has stopped.
    Stopped,
    /// The journal could not record the call (the text names the file),
    /// or a journaled call cannot be resumed or abandoned: the text says why.
    Journal(String),
}

impl HostError {
    /// A command or tool the host does not run: the caller's mistake.
    pub fn is_unknown_name(&self) -> bool {
        use HostError::*;
        #[cfg(feature = "tool-extras")]
        if matches!(self, InactiveTool(_)) {
            return true;
        }
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
            #[cfg(feature = "tool-extras")]
            InactiveTool(name) => write!(
                f,
                "tool {name} is deferred and not active yet: a tool_result's activate_tools activates it"
            ),
            HostCommand(name) => write!(f, "/{name} is a host command"),
            BuiltInTool(name) => write!(f, "tool {name} is built in: the embedder runs it"),
            NotInterceptable(event) => write!(
                f,
                "event {event:?} cannot be intercepted (only tool_call, turn_start, assistant_message, before_agent_start)"
            ),
            ReservedField(field) if field == "sequence" => f.write_str(
                "payload field `sequence` is the host's event counter (one over all events): \
                 it cannot be set; leave it out",
            ),
            ReservedField(field) => write!(
                f,
                "payload field `{field}` is a key of the frame itself: it cannot be set"
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
            StartFailed { extension, reason } => write!(f, "extension {extension} failed: {reason}"),
            Exited { extension, status } => write!(f, "extension {extension} exited ({status})"),
            Reloaded => f.write_str("extensions were reloaded"),
            ReloadRunning => f.write_str("a reload is already running"),
            ShuttingDown => f.write_str("the extension host is shutting down"),
            Cancelled => f.write_str("cancelled: the extension host is shutting down"),
            CallCancelled => f.write_str("cancelled"),
            Journal(why) => f.write_str(why),
            CallTimedOut { name, limit } => {
                write!(f, "tool {name} did not finish within {}", human(*limit))
            }
            Stopped => f.write_str("the extension host has stopped"),
        }
    }
}

impl std::error::Error for HostError {}

// Here rather than in `intercept.rs`: the error is this file's.
impl std::str::FromStr for InterceptEvent {
    type Err = HostError;

    /// The event named `name`; [`HostError::NotInterceptable`] for any other.
    fn from_str(name: &str) -> Result<InterceptEvent, HostError> {
        InterceptEvent::parse(name).ok_or_else(|| HostError::NotInterceptable(name.into()))
    }
}

/// Where a reply goes: called once, on the loop thread, so it must be quick.
pub type Reply<T> = Box<dyn FnOnce(Result<T, HostError>) + Send>;

/// A request to the host loop; its `reply` gets the answer.
#[allow(missing_docs)] // each variant's line says what its fields are
pub enum Request {
    /// Run the slash command `name` (without `/`) with `args`.
    Command {
        name: String,
        args: String,
        reply: Reply<CommandOutcome>,
    },
    /// Run a tool; with `pipeline`, after its event and interception
    /// (docs/PROTOCOL.md#tool-pipeline).
    Tool {
        call: ToolRequest,
        pipeline: bool,
        reply: Reply<ToolOutcome>,
    },
    /// Run the interception chain only.
    Intercept {
        request: InterceptRequest,
        reply: Reply<InterceptOutcome>,
    },
    /// Emit a lifecycle event; replies with the subscribers it was queued to.
    Emit {
        event: String,
        payload: EventPayload,
        reply: Reply<Vec<String>>,
    },
    /// Forward a key (with its `text` for [`PanelKey::Rune`]) to a panel.
    #[cfg(feature = "panels")]
    PanelKey {
        extension: String,
        panel_id: String,
        key: PanelKey,
        text: Option<String>,
        reply: Reply<()>,
    },
    /// Tell an extension how much room its panel has (docs/PROTOCOL.md#panels).
    #[cfg(feature = "panels")]
    PanelResize {
        extension: String,
        panel_id: String,
        width: u32,
        height: u32,
        reply: Reply<()>,
    },
    /// Tell an extension its panel was closed.
    #[cfg(feature = "panels")]
    PanelClose {
        extension: String,
        panel_id: String,
        reply: Reply<()>,
    },
    /// Extensions and registries.
    List { reply: Reply<Snapshot> },
    /// Stop every extension, rediscover, start again.
    Reload { reply: Reply<ReloadReport> },
    /// Graceful stop (docs/PROTOCOL.md#shutdown): accepted requests finish, later ones are
    /// refused; replies once every extension has stopped.
    Shutdown { reply: Reply<()> },
    /// Stop at once (a second Ctrl-C): accepted requests fail.
    ShutdownNow { reply: Reply<()> },
    /// `request`, which [`Request::Cancel`] with `ticket` can cancel.
    Cancellable {
        ticket: Ticket,
        request: Box<Request>,
    },
    /// Cancels the tool call submitted under `ticket` (docs/PROTOCOL.md#cancellation);
    /// replies whether it was still running (then it answers
    /// [`HostError::CallCancelled`]).
    Cancel { ticket: Ticket, reply: Reply<bool> },
    /// The embedder's result for [`HostEvent::BuiltinCall`] `call_id`;
    /// replies whether the call still waited for it.
    #[cfg(feature = "ext-calls")]
    BuiltinResult {
        call_id: String,
        content: Vec<Value>,
        is_error: bool,
        reply: Reply<bool>,
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
            #[cfg(feature = "panels")]
            Request::PanelKey { reply, .. }
            | Request::PanelClose { reply, .. }
            | Request::PanelResize { reply, .. } => reply(Err(error)),
            Request::List { reply } => reply(Err(error)),
            Request::Reload { reply } => reply(Err(error)),
            Request::Shutdown { reply } | Request::ShutdownNow { reply } => reply(Err(error)),
            Request::Cancellable { request, .. } => request.fail(error),
            Request::Cancel { reply, .. } => reply(Err(error)),
            #[cfg(feature = "ext-calls")]
            Request::BuiltinResult { reply, .. } => reply(Err(error)),
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

    pub(crate) fn is_set(&self) -> bool {
        let ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        ready.is_some()
    }

    pub(crate) fn wait(&self) -> Vec<String> {
        let ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        let ready = self.cond.wait_while(ready, |names| names.is_none());
        let names = ready.unwrap_or_else(|p| p.into_inner());
        names.clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: ExtensionState) -> ExtensionInfo {
        ExtensionInfo {
            name: "a".into(),
            version: None,
            scope: Scope::Project,
            dir: "/x".into(),
            state,
            pid: Some(7),
            commands: vec![],
            tools: vec![],
            events: vec![],
            intercept: vec![],
            restarts: 0,
            #[cfg(feature = "bundles")]
            skills: vec![],
            #[cfg(feature = "bundles")]
            theme: None,
            ready_via: Some(ReadyVia::Watchdog),
            conflicts: vec![NameConflict {
                kind: NameKind::Tool,
                name: "t".into(),
                winner: "built-in".into(),
            }],
        }
    }

    #[test]
    fn typed_fields_serialize_as_the_names_on_the_wire() {
        let failed = info(ExtensionState::Failed {
            reason: "no hello".into(),
        });
        let skills = if cfg!(feature = "bundles") {
            r#""skills":[],"#
        } else {
            ""
        };
        assert_eq!(
            serde_json::to_string(&failed).unwrap(),
            format!(
                r#"{{"name":"a","scope":"project","dir":"/x","state":"failed","error":"no hello","pid":7,"commands":[],"tools":[],"events":[],"intercept":[],"restarts":0,{skills}"ready_via":"watchdog","conflicts":[{{"kind":"tool","name":"t","winner":"built-in"}}]}}"#
            )
        );
        let ready = serde_json::to_value(info(ExtensionState::Ready)).unwrap();
        assert_eq!(
            (&ready["state"], ready.get("error")),
            (&"ready".into(), None)
        );
        let note = HostEvent::Notify {
            extension: "a".into(),
            level: Level::Warn,
            message: "m".into(),
        };
        let note = serde_json::to_value(note).unwrap();
        assert_eq!(note["level"], "warn");
    }

    #[test]
    fn closed_sets_parse_their_own_names_only() {
        for name in Action::NAMES {
            assert_eq!(Action::parse(name).map(Action::as_str), Some(*name));
        }
        assert_eq!(Action::parse("Prompt"), None);
        assert_eq!(Level::parse("warning"), None);
        let err = "session_start".parse::<InterceptEvent>().unwrap_err();
        assert_eq!(err, HostError::NotInterceptable("session_start".into()));
    }
}
