//! MCP servers as extensions (docs/PROTOCOL.md#mcp-servers): the host is the server's MCP
//! client, and this client translates at the frame layer so the rest of
//! the host never sees a second protocol. It does no I/O and has no
//! thread or lock of its own: the host loop (`src/engine/mcp.rs`) hands
//! it the server's lines as the loop read them
//! ([`McpClient::on_line`]), the host's frames as values
//! ([`McpClient::on_host_frame`]) and the time; it answers with
//! JSON-RPC lines for the server's stdin and zot frames the loop handles
//! as if the server had sent them. Its deadlines (the probe's limit,
//! cancellations) are the loop's: the loop asks
//! [`McpClient::next_deadline`] and calls [`McpClient::on_deadline`]
//! when it passes. JSON-RPC itself is `src/wire/jsonrpc.rs`, shared with
//! `zot mcp`. Wire shapes: MCP 2025-11-25, and 2026-07-28 for
//! `server/discover`, `_meta` and `subscriptions/listen`.
//!
//! # Behaviour
//!
//! - **`prefix`** (optional, MCP servers only) is prepended to every tool and
//!   command name: MCP servers use generic names (`search`, `echo`), and
//!   names are owned by precedence, so two servers with a `search` tool
//!   would otherwise shadow each other.
//! - **Handshake** (within the 10 s hello limit): `server/discover` first,
//!   with the 2026-07-28 `_meta` envelope (client info `{name: "zot",
//!   version}`, capabilities `{}`), given 3 s (`Timeouts::mcp_probe`; the
//!   CLI's `$ZOT_MCP_PROBE_TIMEOUT`); a server that lists 2026-07-28 is
//!   spoken to in that revision (every request carries the envelope; list
//!   changes arrive on a `subscriptions/listen` stream).
//!   On an error or no answer: the legacy `initialize` (2025-11-25) and
//!   `notifications/initialized`; a late `server/discover` answer still
//!   wins, and an `initialize` refused while the probe is out fails the
//!   server (with the refusal as the reason) when the probe stays silent
//!   another 3 s. Then `tools/list` and `prompts/list`
//!   (every page), registered as if the extension had sent them, then it is
//!   ready. The log (`zot ext logs <name>`) says which revision it speaks.
//! - **Tools**: `tools/call`; content maps text -> text, image -> image,
//!   audio -> `[audio <mime>]`, resource links -> `[resource <uri>]`,
//!   embedded resources -> their text (`[resource <uri>]` when binary),
//!   `structuredContent` without `content` -> its JSON as text; `isError`
//!   -> `is_error`. When a call outlasts `--tool-timeout` (60 s by
//!   default) the call fails and the server gets `notifications/cancelled`
//!   for it (a `prompts/get` likewise after `--command-timeout`).
//! - **Prompts as commands** (description: the prompt's description, else
//!   its title): `/name ARGS` runs `prompts/get`. ARGS that parse as a JSON
//!   object are the arguments (non-string values as their JSON text);
//!   otherwise a prompt without arguments ignores ARGS, one with a single
//!   argument takes all of ARGS, one with several takes `key=value` pairs
//!   (values may be double-quoted). zot checks required arguments itself
//!   and names the missing one. The user messages' text, joined by blank
//!   lines, becomes the prompt (a turn); assistant messages and non-text
//!   content are dropped.
//! - **Notes**: `notifications/message` -> a note (`debug`, `info`,
//!   `notice` -> info; `warning` -> warn; `error` and worse -> error), the
//!   text `logger: data`.
//! - **List changes** (`notifications/tools/list_changed`,
//!   `notifications/prompts/list_changed`) -> zot lists again, registers new
//!   names and drops removed ones.
//! - **Requests from the server**: `ping` is answered; `sampling/createMessage`,
//!   `elicitation/create` and `roots/list` get error -32601 (zot declares
//!   none of those capabilities). A server that sends them without
//!   reading its stdin is not read once 16 MiB of answers wait for it. Their 2026-07-28 form, a result with
//!   `resultType: "input_required"`, is an error result naming what the
//!   server asked for.
//! - **Bad lines** from the server are dropped and logged, as for any
//!   extension; reading goes on. So are tool and prompt names that are
//!   empty or contain whitespace; a listing ends at a `nextCursor` it
//!   followed already, after 1000 pages, or at the registration caps
//!   (10,000 names or 16 MiB a kind; what fits is registered); of the notes sent before the
//!   handshake ends, the last 100 are kept. A server that
//!   refuses `initialize` fails with the reason it gave.
//! - **Shutdown**: stdin is closed (MCP's stdio shutdown), then the usual
//!   2 s grace, SIGTERM and SIGKILL to its process group.
//!
//! What does not map: an MCP server cannot subscribe to events or intercept
//! them, so it is never a guard and sees no `tool_call`, `turn_start`... events;
//! panels and `clear_notes` do not exist in MCP; resources are not used.
//! Its tools still pass through every guard of the zot extensions loaded
//! with it, in `zot rpc`, the session and `zot mcp` alike.

use crate::log::human;
use crate::log::ExtLog;
use crate::wire::jsonrpc::{Id, Message, RpcError, METHOD_NOT_FOUND, PARSE_ERROR};
use crate::wire::protocol::{
    head_fields, snippet, split_ends, tail_id, top_level_id, CommandResponse, ExtFrame, HostFrame,
    ToolExtras, MAX_LINE,
};
use crate::wire::registry::{footprint, MAX_NAMES, MAX_NAME_BYTES};
use crate::wire::toolresult::{text_block, Block};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The revision probed first, and the legacy fallback's.
const MODERN_VERSION: &str = "2026-07-28";
const LEGACY_VERSION: &str = "2025-11-25";
/// The versions an `initialize` answer may name: a client disconnects
/// from one it does not speak (MCP lifecycle, version negotiation).
const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", LEGACY_VERSION];
/// The probe is the first request.
const PROBE_ID: u64 = 1;
/// Notes held during the handshake; older ones are dropped and counted.
const HELD_NOTES: usize = 100;
/// A server whose cursors never end would have the host list forever.
const MAX_PAGES: usize = 1000;

/// Appends a formatted line to the server's log.
macro_rules! log {
    ($client:expr, $($fmt:tt)*) => {
        $client.log.line(&format!($($fmt)*))
    };
}

/// How an MCP server extension is run.
pub(crate) struct McpOptions {
    /// The manifest's name: what the host knows the extension as.
    pub name: String,
    /// Prepended to its tool and command names.
    pub prefix: String,
    /// `clientInfo.version`.
    pub client_version: String,
    /// After these, an unanswered `tools/call` or `prompts/get` is cancelled.
    pub tool_timeout: Duration,
    pub command_timeout: Duration,
    /// How long the `server/discover` probe may go unanswered
    /// (`Timeouts::mcp_probe`).
    pub probe_timeout: Duration,
}

/// What a server lists: tools (registered as tools), prompts (as commands).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tool = 0,
    Prompt = 1,
}

impl Kind {
    /// `tool`; `tools` (its capability and list key); the methods listing and calling one.
    fn names(self) -> [&'static str; 4] {
        match self {
            Kind::Tool => ["tool", "tools", "tools/list", "tools/call"],
            Kind::Prompt => ["prompt", "prompts", "prompts/list", "prompts/get"],
        }
    }
}

/// One JSON-RPC request of ours that waits for its response.
enum Waiting {
    Discover,
    Initialize,
    Listen,
    Page(Kind),
    /// A `tool_call` or `command_invoked` of the host, by its id.
    Call(Kind, String),
}

/// Where the handshake is: frames pass to the host only once `Running`.
#[derive(Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Probing,
    /// `Some(why)` once `initialize` was refused while the probe was out:
    /// a 2026-only server refuses it, maybe before it answers the probe.
    Initializing(Option<String>),
    Listing,
    Running,
    /// The handshake failed: reading stops.
    Failed,
}

/// What is registered of one kind, and its listing under way.
#[derive(Default)]
struct Lists {
    /// Registered name -> server name, declared arguments (name, required).
    registered: BTreeMap<String, (String, Vec<(String, bool)>)>,
    listing: Option<Listing>,
    /// A change was announced meanwhile: list again after.
    again: bool,
}

/// A listing under way: the items so far (only the fields registered),
/// what they hold against the registration caps, the cursors followed.
#[derive(Default)]
struct Listing {
    items: Vec<Value>,
    bytes: usize,
    cursors: BTreeSet<String>,
}

/// The client of one MCP server, driven by the host loop alone: it is
/// handed the server's lines, the host's frames and the time, and what
/// it makes of them waits in [`Output`] until the loop takes it.
pub(crate) struct McpClient {
    opts: McpOptions,
    log: ExtLog,
    /// The 2026-07-28 `_meta` envelope of our requests.
    meta: Value,
    next_id: u64,
    phase: Phase,
    /// It speaks 2026-07-28: our requests carry `_meta`.
    modern: bool,
    waiting: HashMap<u64, Waiting>,
    /// When to look at which request again (the probe's limit, a
    /// cancellation), earliest first; and each request's entry in it.
    due: BTreeSet<(Instant, u64)>,
    due_at: HashMap<u64, Instant>,
    /// Indexed by `Kind`.
    lists: [Lists; 2],
    /// Frames held until `hello` is sent, notes apart (capped).
    held: Vec<ExtFrame>,
    held_notes: VecDeque<ExtFrame>,
    dropped_notes: usize,
    server_version: Option<String>,
    out: Output,
    /// When it was last handed something: what waits in `out` is due
    /// from then, so the loop takes it on its next turn.
    made_at: Instant,
}

/// What the client made for the loop to act on.
#[derive(Default)]
struct Output {
    /// JSON-RPC lines for the server's stdin.
    lines: Vec<u8>,
    /// Frames for the host, as if the extension had sent them.
    frames: Vec<ExtFrame>,
    /// The handshake failed, for this reason: the server cannot start.
    failed: Option<String>,
}

impl Output {
    fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.frames.is_empty() && self.failed.is_none()
    }
}

impl McpClient {
    /// The client of a server just spawned; its first line, the probe, waits in the output.
    pub fn new(opts: McpOptions, log: ExtLog, now: Instant) -> McpClient {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "zot", "version": opts.client_version},
        });
        let mut client = McpClient {
            opts,
            log,
            meta,
            next_id: 0,
            phase: Phase::Probing,
            modern: false,
            waiting: HashMap::new(),
            due: BTreeSet::new(),
            due_at: HashMap::new(),
            lists: Default::default(),
            held: Vec::new(),
            held_notes: VecDeque::new(),
            dropped_notes: 0,
            server_version: None,
            out: Output::default(),
            made_at: now,
        };
        client.request("server/discover", json!({}), Waiting::Discover);
        client.after(now, client.opts.probe_timeout, PROBE_ID);
        client
    }

    /// Takes the lines for the server's stdin made since last asked.
    pub fn take_lines(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out.lines)
    }

    /// Takes the frames for the host made since last asked: the host
    /// handles them as if the server had sent them.
    pub fn take_frames(&mut self) -> Vec<ExtFrame> {
        std::mem::take(&mut self.out.frames)
    }

    /// Why the handshake failed, once: the server cannot start.
    pub fn take_failure(&mut self) -> Option<String> {
        self.out.failed.take()
    }

    /// When it next needs [`McpClient::on_deadline`]: at once when it
    /// made something the loop has not taken yet.
    pub fn next_deadline(&self) -> Option<Instant> {
        let due = self.due.first().map(|&(at, _)| at);
        match self.out.is_empty() {
            true => due,
            false => Some(due.map_or(self.made_at, |at| at.min(self.made_at))),
        }
    }

    /// Acts on every deadline that passed by `now`.
    pub fn on_deadline(&mut self, now: Instant) {
        self.made_at = now;
        while let Some(&(at, id)) = self.due.first().filter(|(at, _)| *at <= now) {
            self.due.remove(&(at, id));
            self.due_at.remove(&id);
            self.fire(id);
        }
    }

    /// Queues one JSON-RPC message for the server's stdin.
    fn write<P: Serialize, R: Serialize>(&mut self, msg: &Message<P, R>) {
        msg.write_line(&mut self.out.lines);
    }

    /// Passes a frame to the host, or holds it until `hello` is sent.
    fn emit(&mut self, frame: ExtFrame) {
        if self.phase == Phase::Running {
            self.out.frames.push(frame);
        } else if matches!(frame, ExtFrame::Notify { .. }) {
            if self.held_notes.len() == HELD_NOTES {
                self.held_notes.pop_front();
                self.dropped_notes += 1;
            }
            self.held_notes.push_back(frame);
        } else {
            self.held.push(frame);
        }
    }

    /// Looks at request `id` again `delay` after `now`.
    fn after(&mut self, now: Instant, delay: Duration, id: u64) {
        if let Some(at) = now.checked_add(delay) {
            self.forget_deadline(id);
            self.due.insert((at, id));
            self.due_at.insert(id, at);
        }
    }

    fn forget_deadline(&mut self, id: u64) {
        if let Some(at) = self.due_at.remove(&id) {
            self.due.remove(&(at, id));
        }
    }

    /// Request `id` is answered or abandoned: what it waited for.
    fn forget(&mut self, id: u64) -> Option<Waiting> {
        self.forget_deadline(id);
        self.waiting.remove(&id)
    }

    fn timeout(&self, kind: Kind) -> Duration {
        [self.opts.tool_timeout, self.opts.command_timeout][kind as usize]
    }

    /// Sends a request and records what its response is for.
    fn request(&mut self, method: &str, mut params: Value, waiting: Waiting) -> u64 {
        self.next_id += 1;
        // The probe carries the envelope too: without it the official
        // Python SDK server answers -32601 and locks the stream to legacy.
        if self.modern || matches!(waiting, Waiting::Discover) {
            params["_meta"] = self.meta.clone();
            // 2026-07-28 servers send log messages only to requests that opt in.
            if matches!(waiting, Waiting::Call(..)) {
                params["_meta"]["io.modelcontextprotocol/logLevel"] = json!("debug");
            }
        }
        // A listing is not waited for forever: a re-list that never
        // ends would keep every later one from starting.
        if matches!(waiting, Waiting::Page(_)) {
            let (at, limit) = (self.made_at, self.opts.tool_timeout);
            self.after(at, limit, self.next_id);
        }
        self.waiting.insert(self.next_id, waiting);
        self.write(&Message::<_, ()>::request(
            Id::from(self.next_id),
            method,
            params,
        ));
        self.next_id
    }

    /// A timer is due: the probe's limit, or a request's cancellation.
    fn fire(&mut self, id: u64) {
        match self.waiting.get(&id) {
            // A slow server (an SDK still importing) may answer it yet: that wins.
            Some(Waiting::Discover) => {
                let limit = human(self.opts.probe_timeout);
                let why = format!("no answer within {limit}; trying the legacy initialize");
                self.no_probe(why);
            }
            Some(&Waiting::Call(kind, _)) => {
                self.forget(id);
                let reason = format!("timed out after {}", human(self.timeout(kind)));
                let [.., method] = kind.names();
                log!(self, "{method} request {id} {reason}: cancelled");
                self.write(&cancelled(id, &reason));
            }
            Some(&Waiting::Page(kind)) => {
                self.forget(id);
                let reason = format!("no answer within {}", human(self.opts.tool_timeout));
                self.write(&cancelled(id, &reason));
                self.page(kind, Err(reason));
            }
            _ => {}
        }
    }

    fn initialize(&mut self) {
        self.phase = Phase::Initializing(None);
        let params = json!({
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": self.meta["io.modelcontextprotocol/clientInfo"],
        });
        self.request("initialize", params, Waiting::Initialize);
    }

    /// Handles one line from the server.
    pub fn on_line(&mut self, line: &[u8], now: Instant) {
        self.made_at = now;
        if self.phase == Phase::Failed {
            return; // the host is stopping it
        }
        let why = match Message::parse(line) {
            Ok(msg) => return self.message(msg, now),
            Err(invalid)
                if invalid
                    .answers
                    .as_ref()
                    .is_some_and(|id| self.waits_for(id)) =>
            {
                let id = invalid.answers.unwrap_or_else(Id::null);
                let why = format!(
                    "the MCP server {:?} sent an invalid response to request {id} ({}): {}",
                    self.opts.name,
                    invalid.why,
                    snippet(line)
                );
                log!(self, "{why}");
                return self.settle(&id, Err(why), now);
            }
            // Too deep or too big to read: its id, when a bounded scan
            // finds it at the top level, fails the request it answers.
            Err(invalid) if invalid.code == PARSE_ERROR => {
                let id = top_level_id(line).and_then(|id| id.as_u64());
                if let Some(id) = id.filter(|id| self.waiting.contains_key(id)) {
                    let why = format!(
                        "the MCP server's answer to request {id} could not be read ({}): dropped",
                        invalid.why
                    );
                    log!(self, "{why}: {}", snippet(line));
                    return self.settle(&Id::from(id), Err(why), now);
                }
                invalid.why
            }
            Err(_) if !line.trim_ascii_start().starts_with(b"{") => "not a JSON object".into(),
            Err(invalid) => invalid.why,
        };
        self.dropped(line, &why);
    }

    /// A message over the frame limit was dropped: when its start (or,
    /// as some libraries write it last, its end) names the id of a
    /// request of ours, that request fails at once (its content is lost).
    pub fn on_too_long(&mut self, len: usize, ends: &[u8], now: Instant) {
        self.made_at = now;
        let (head, tail) = split_ends(ends);
        let fields = head_fields(head);
        let id = fields
            .iter()
            .find(|(k, _)| k == "id")
            .map(|(_, v)| v.clone());
        let id = id.or_else(|| tail_id(tail)).and_then(|id| id.as_u64());
        let Some(id) = id.filter(|id| self.waiting.contains_key(id)) else {
            return; // an answer nobody waits for, or one whose id is not at either end
        };
        let why = format!(
            "the MCP server's answer was {len} bytes, over the {} MiB frame limit: dropped",
            MAX_LINE >> 20
        );
        log!(self, "{why} (request {id})");
        self.settle(&Id::from(id), Err(why), now);
    }

    fn message(&mut self, msg: Message, now: Instant) {
        match msg {
            Message::Request(r) => self.server_request(&r.method, r.id),
            Message::Notification(n) => self.notification(&n.method, n.params.as_ref()),
            Message::Response(r) => self.response(&r.id, r.result, now),
        }
    }

    fn dropped(&self, line: &[u8], why: &str) {
        log!(self, "dropped MCP message ({why}): {}", snippet(line));
    }

    /// `ping` is answered; sampling, elicitation and roots are refused.
    fn server_request(&mut self, method: &str, id: Id) {
        if method == "ping" {
            return self.write(&Message::<(), _>::response(id, Ok(json!({}))));
        }
        let why = "zot declares no client capabilities";
        log!(self, "refused the server's {method} request: {why}");
        let message = format!("Method not found: {method} ({why})");
        let error = RpcError::new(METHOD_NOT_FOUND, message);
        self.write(&Message::<(), ()>::response(id, Err(error)));
    }

    fn notification(&mut self, method: &str, params: Option<&Map<String, Value>>) {
        match method {
            "notifications/message" => match params.and_then(note_from_log) {
                Some(note) => self.emit(note),
                None => log!(self, "dropped notifications/message without a level"),
            },
            "notifications/tools/list_changed" => self.relist(Kind::Tool),
            "notifications/prompts/list_changed" => self.relist(Kind::Prompt),
            "notifications/subscriptions/acknowledged" => {
                let honored = params.and_then(|p| p.get("notifications"));
                let honored = honored.map_or_else(|| "{}".into(), Value::to_string);
                log!(self, "subscriptions/listen acknowledged: {honored}");
            }
            _ => {}
        }
    }

    /// Whether request `id` of ours waits for its response.
    fn waits_for(&self, id: &Id) -> bool {
        id.as_u64().is_some_and(|n| self.waiting.contains_key(&n))
    }

    fn response(&mut self, id: &Id, result: Result<Value, RpcError>, now: Instant) {
        let result = match &result {
            Ok(r) => Ok(r),
            Err(e) => {
                let message = Some(e.message.as_str()).filter(|m| !m.is_empty());
                let code = Some(e.code).filter(|&c| c != 0).map(|c| format!(" {c}"));
                let message = message.unwrap_or("(no message)");
                Err(format!("MCP error{}: {message}", code.unwrap_or_default()))
            }
        };
        self.settle(id, result, now);
    }

    /// Request `id` is answered with `result`: what waited for it goes on.
    fn settle(&mut self, id: &Id, result: Result<&Value, String>, now: Instant) {
        let Some(waiting) = id.as_u64().and_then(|n| self.forget(n)) else {
            let why = "unknown, cancelled or already answered";
            return log!(self, "dropped a response: id {id} is {why}");
        };
        match waiting {
            Waiting::Discover => self.discovered(result),
            Waiting::Initialize => self.initialized(result, now),
            Waiting::Listen => {
                let why = result.err().unwrap_or("closed by the server".into());
                log!(self, "subscriptions/listen ended: {why}");
            }
            Waiting::Page(kind) => self.page(kind, result),
            Waiting::Call(kind, host_id) => {
                let frame = answer(kind, host_id, result.and_then(complete));
                self.emit(frame);
            }
        }
    }

    fn discovered(&mut self, result: Result<&Value, String>) {
        let supports_modern = |r: &Value| {
            let versions = r["supportedVersions"].as_array();
            versions.is_some_and(|v| v.contains(&MODERN_VERSION.into()))
        };
        let legacy = |why: String| format!("{why}; using the legacy initialize ({LEGACY_VERSION})");
        let result = match result {
            Ok(result) if supports_modern(result) => result,
            Ok(_) => {
                let why = format!("{MODERN_VERSION} is not among its supportedVersions");
                return self.no_probe(legacy(why));
            }
            Err(e) => return self.no_probe(legacy(e)),
        };
        if !matches!(self.phase, Phase::Probing | Phase::Initializing(_)) {
            return;
        }
        // Its answer to initialize (a 2026-only server's error) no longer matters.
        self.waiting
            .retain(|_, w| !matches!(w, Waiting::Initialize));
        self.modern = true;
        // The SDKs put the identity in `_meta`, the specification in `serverInfo`.
        let at = |pointer| result.pointer(pointer).and_then(Value::as_str);
        let version = at("/_meta/io.modelcontextprotocol~1serverInfo/version");
        log!(self, "speaking MCP {MODERN_VERSION} (server/discover)");
        // The 2026 era announces list changes only on a listen stream.
        let filter =
            json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}});
        self.request("subscriptions/listen", filter, Waiting::Listen);
        self.list_all(result, version.or_else(|| at("/serverInfo/version")));
    }

    fn initialized(&mut self, result: Result<&Value, String>, now: Instant) {
        let result = result.and_then(|r| {
            let version = r.get("protocolVersion");
            match version.and_then(Value::as_str) {
                Some(v) if LEGACY_VERSIONS.contains(&v) => Ok(r),
                _ => Err(format!(
                    "the server answered with protocolVersion {}, which zot does not speak ({})",
                    version.map_or_else(|| "(none)".into(), Value::to_string),
                    LEGACY_VERSIONS.join(", ")
                )),
            }
        });
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                let why = format!("initialize failed: {e}");
                if !self.waiting.contains_key(&PROBE_ID) {
                    return self.handshake_failed(why);
                }
                // Not forever: one more limit, then this refusal is the reason.
                log!(self, "{why}; waiting for the server/discover answer");
                self.phase = Phase::Initializing(Some(why));
                return self.after(now, self.opts.probe_timeout, PROBE_ID);
            }
        };
        let version = result["protocolVersion"].as_str().unwrap_or_default();
        log!(self, "speaking MCP {version} (initialize)");
        let initialized = "notifications/initialized";
        self.write(&Message::<(), ()>::notification(initialized, None));
        self.list_all(result, result["serverInfo"]["version"].as_str());
    }

    /// No usable probe answer (`why`): the legacy `initialize`, unless it
    /// is out already; when that was refused, the handshake fails.
    fn no_probe(&mut self, why: String) {
        match std::mem::take(&mut self.phase) {
            Phase::Probing => {
                log!(self, "server/discover: {why}");
                self.initialize();
            }
            Phase::Initializing(Some(why)) => self.handshake_failed(why),
            phase => self.phase = phase,
        }
    }

    /// The host fails the server with `why` (not the EOF that follows), kills it.
    fn handshake_failed(&mut self, why: String) {
        self.log.line(&why);
        self.out.failed = Some(why);
        self.phase = Phase::Failed;
    }

    /// The handshake's `result`: fetches the tools and prompts the server
    /// declares (both when it declares no capabilities at all).
    fn list_all(&mut self, result: &Value, version: Option<&str>) {
        self.phase = Phase::Listing;
        self.server_version = version.map(Into::into);
        let caps = result.get("capabilities");
        for kind in [Kind::Tool, Kind::Prompt] {
            let [_, capability, ..] = kind.names();
            if caps.is_none_or(|c| c.get(capability).is_some()) {
                self.list(kind);
            }
        }
        self.listed();
    }

    /// A list changed: fetch it again, now or after the running fetch.
    fn relist(&mut self, kind: Kind) {
        let [_, list_key, ..] = kind.names();
        log!(self, "{list_key} changed: listing it again");
        if matches!(self.phase, Phase::Listing | Phase::Running) {
            self.lists[kind as usize].again = true;
            self.listed();
        }
    }

    /// Requests a list's first page.
    fn list(&mut self, kind: Kind) {
        self.lists[kind as usize].listing = Some(Default::default());
        self.lists[kind as usize].again = false;
        let [_, _, list_method, _] = kind.names();
        self.request(list_method, json!({}), Waiting::Page(kind));
    }

    fn page(&mut self, kind: Kind, result: Result<&Value, String>) {
        let [what, key, method, _] = kind.names();
        let Some(listing) = self.lists[kind as usize].listing.as_mut() else {
            return;
        };
        let Listing {
            items,
            bytes,
            cursors,
        } = listing;
        match result {
            Err(e) => log!(self, "{method}: {e}; keeping what was listed"),
            Ok(result) => {
                let page = result[key].as_array().into_iter().flatten();
                // The registration caps, while paging: pages are not held past them.
                let mut capped = false;
                for item in page.map(|item| kept_fields(kind, item)) {
                    let text = |k: &str| item[k].as_str().unwrap_or("");
                    let details = item.get(["inputSchema", "arguments"][kind as usize]);
                    // Counted as registered: with its prefix.
                    let size = footprint(text("name"), text("description"), &details.cloned())
                        + footprint("", "", &item.get("outputSchema").cloned())
                        + self.opts.prefix.len();
                    if items.len() >= MAX_NAMES || *bytes + size > MAX_NAME_BYTES {
                        capped = true;
                        break;
                    }
                    *bytes += size;
                    items.push(item);
                }
                let cursor = result["nextCursor"].as_str().filter(|c| !c.is_empty());
                if capped {
                    let cap = format!("{MAX_NAMES} {what}s or {} MiB", MAX_NAME_BYTES >> 20);
                    log!(self, "{method}: stopped at the cap ({cap}); keeping the {} listed, the rest are ignored", items.len());
                } else if let Some(cursor) = cursor {
                    let why = if !cursors.insert(cursor.into()) {
                        format!("the server repeated the cursor {cursor:?}")
                    } else if cursors.len() >= MAX_PAGES {
                        format!("stopped after {MAX_PAGES} pages")
                    } else {
                        let params = json!({"cursor": cursor});
                        self.request(method, params, Waiting::Page(kind));
                        return;
                    };
                    log!(self, "{method}: {why}; keeping the {} listed", items.len());
                }
                let items = std::mem::take(items);
                self.register(kind, items);
            }
        }
        self.lists[kind as usize].listing = None;
        self.listed();
    }

    /// After a listing: once the first ones are done, `hello`, the held frames
    /// and `ready`, as a zot extension starts; then lists again what changed.
    fn listed(&mut self) {
        let idle = |l: &Lists| l.listing.is_none();
        if self.phase == Phase::Listing && self.lists.iter().all(idle) {
            self.phase = Phase::Running;
            self.out.frames.push(ExtFrame::Hello {
                name: self.opts.name.clone(),
                version: self.server_version.clone(),
                // The host's `tool_cancel` becomes `notifications/cancelled`.
                capabilities: Some(vec!["tool_cancel".into()]),
            });
            if self.dropped_notes > 0 {
                let n = self.dropped_notes;
                log!(
                    self,
                    "dropped {n} notes sent before the handshake ended (the oldest; {HELD_NOTES} kept)"
                );
            }
            let held = self.held.drain(..).chain(self.held_notes.drain(..));
            self.out.frames.extend(held.chain([ExtFrame::Ready]));
        }
        for kind in [Kind::Tool, Kind::Prompt] {
            let lists = &self.lists[kind as usize];
            if self.phase == Phase::Running && lists.again && idle(lists) {
                self.list(kind);
            }
        }
    }

    /// Registers a whole list, and unregisters what left it: first, so a
    /// command that comes back spelled another way (command names ignore
    /// case) is not taken away with the spelling that left.
    fn register(&mut self, kind: Kind, items: Vec<Value>) {
        let [what, _, method, _] = kind.names();
        let mut now = BTreeMap::new();
        let mut frames = Vec::new();
        // Command names ignore case: of `Report` and `report`, the first listed is kept.
        let mut folded = BTreeSet::new();
        for item in items {
            let Some(server_name) = item["name"].as_str() else {
                log!(self, "{method}: skipped a {what} without a name");
                continue;
            };
            let name = format!("{}{server_name}", self.opts.prefix);
            if kind == Kind::Prompt && !folded.insert(name.to_lowercase()) {
                log!(self, "{method}: skipped {what} {server_name:?}: commands ignore case and another spelling of it is listed first");
                continue;
            }
            let text = |key: &str| item[key].as_str().filter(|s| !s.is_empty());
            let description = text("description")
                .or_else(|| text("title"))
                .map(Into::into);
            let frame = match kind {
                Kind::Tool => ExtFrame::RegisterTool {
                    name: name.clone(),
                    description,
                    schema: item.get("inputSchema").filter(|s| s.is_object()).cloned(),
                    // Kept as the server sent it: one that is not an
                    // object is rejected, and logged, like any other.
                    extra: ToolExtras {
                        #[cfg(feature = "tool-extras")]
                        output_schema: item.get("outputSchema").filter(|s| !s.is_null()).cloned(),
                        ..Default::default()
                    },
                },
                Kind::Prompt => ExtFrame::RegisterCommand {
                    name: name.clone(),
                    description,
                },
            };
            frames.push(frame);
            let args = item["arguments"].as_array().into_iter().flatten();
            let args =
                args.filter_map(|a| Some((a["name"].as_str()?.to_string(), a["required"] == true)));
            now.insert(name, (server_name.to_string(), args.collect()));
        }
        let before = std::mem::replace(&mut self.lists[kind as usize].registered, now);
        for name in before.into_keys() {
            if !self.lists[kind as usize].registered.contains_key(&name) {
                let frame = match kind {
                    Kind::Tool => ExtFrame::UnregisterTool { name },
                    Kind::Prompt => ExtFrame::UnregisterCommand { name },
                };
                self.emit(frame);
            }
        }
        for frame in frames {
            self.emit(frame);
        }
    }

    /// Handles a frame the host loop sends this extension.
    pub fn on_host_frame(&mut self, frame: &HostFrame, now: Instant) {
        self.made_at = now;
        match *frame {
            HostFrame::ToolCall {
                id,
                name,
                args,
                #[cfg(feature = "journal")]
                reconcile,
                ..
            } => {
                let arguments = match args {
                    // MCP has no way to ask without running the tool.
                    #[cfg(feature = "journal")]
                    _ if reconcile => Err("an MCP server cannot reconcile a call".into()),
                    Value::Null => Ok(json!({})),
                    obj @ Value::Object(_) => Ok(obj.clone()),
                    _ => Err("MCP tool arguments must be a JSON object".into()),
                };
                self.call(Kind::Tool, id, name, |_| arguments, now)
            }
            HostFrame::CommandInvoked { id, name, args } => {
                let arguments =
                    |declared: &[_]| prompt_arguments(declared, args).map(Value::Object);
                self.call(Kind::Prompt, id, name, arguments, now)
            }
            HostFrame::ToolCancel { id } => self.cancel(id),
            // MCP's stdio shutdown is closing stdin; acknowledging at
            // once lets the host do that and start its grace period.
            HostFrame::Shutdown => self.out.frames.push(ExtFrame::ShutdownAck),
            // hello_ack; events, intercepts and panels never apply.
            _ => {}
        }
    }

    /// The host abandoned its `tool_call` `host_id` (docs/PROTOCOL.md#cancellation): the
    /// server is told with `notifications/cancelled`; its late answer is
    /// dropped.
    fn cancel(&mut self, host_id: &str) {
        let ours = self.waiting.iter().find_map(|(&id, w)| match w {
            Waiting::Call(Kind::Tool, h) if h == host_id => Some(id),
            _ => None,
        });
        let Some(id) = ours else { return };
        self.forget(id);
        log!(self, "tools/call request {id} cancelled by the host");
        self.write(&cancelled(id, "cancelled by the host"));
    }

    /// `tools/call` for the host's `tool_call`, `prompts/get` (arguments parsed
    /// from the text) for its `command_invoked`; cancelled when the host gives up.
    fn call(
        &mut self,
        kind: Kind,
        host_id: &str,
        name: &str,
        arguments: impl FnOnce(&[(String, bool)]) -> Result<Value, String>,
        now: Instant,
    ) {
        let host_id = host_id.to_string();
        let [what, _, _, call_method] = kind.names();
        let Some((server_name, declared)) = self.lists[kind as usize].registered.get(name) else {
            let e = format!("MCP server has no {what} {name:?}");
            return self.emit(answer(kind, host_id, Err(e)));
        };
        match arguments(declared) {
            Ok(arguments) => {
                let params = json!({"name": server_name, "arguments": arguments});
                let waiting = Waiting::Call(kind, host_id);
                let id = self.request(call_method, params, waiting);
                self.after(now, self.timeout(kind), id);
            }
            Err(e) => self.emit(answer(kind, host_id, Err(e))),
        }
    }
}

/// What a listed tool or prompt keeps until it is registered: its name,
/// description (else title), and schemas or arguments; the rest of a
/// page is not held.
fn kept_fields(kind: Kind, item: &Value) -> Value {
    let mut kept = Map::new();
    if let Some(name) = item.get("name") {
        kept.insert("name".into(), name.clone());
    }
    let text = |key: &str| item[key].as_str().filter(|s| !s.is_empty());
    if let Some(description) = text("description").or_else(|| text("title")) {
        kept.insert("description".into(), description.into());
    }
    let details: &[&str] = match kind {
        Kind::Tool => &["inputSchema", "outputSchema"],
        Kind::Prompt => &["arguments"],
    };
    for &key in details {
        if let Some(v) = item.get(key) {
            kept.insert(key.into(), v.clone());
        }
    }
    Value::Object(kept)
}

/// A final result, or why not: a 2026-07-28 `input_required` result asks
/// for sampling, elicitation or roots, which zot does not provide.
fn complete(result: &Value) -> Result<&Value, String> {
    let kind = result["resultType"].as_str().unwrap_or("complete");
    if kind == "complete" {
        return Ok(result);
    }
    let requests = result["inputRequests"].as_object().into_iter().flatten();
    let wanted: Vec<&str> = requests.filter_map(|(_, r)| r["method"].as_str()).collect();
    let wanted = match wanted.is_empty() {
        true => String::new(),
        false => format!(" ({})", wanted.join(", ")),
    };
    Err(format!(
        "the MCP server answered with resultType {kind:?}{wanted}, which zot does not provide"
    ))
}

/// A JSON string's text, or another value's JSON.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `notifications/cancelled` for our request `id`.
fn cancelled(id: u64, reason: &str) -> Message<Value, ()> {
    let params = json!({"requestId": id, "reason": reason});
    Message::notification("notifications/cancelled", Some(params))
}

/// `notifications/message` -> a note (docs/PROTOCOL.md#mcp-servers).
fn note_from_log(params: &Map<String, Value>) -> Option<ExtFrame> {
    let level = match params.get("level")?.as_str()? {
        "debug" | "info" | "notice" => "info",
        "warning" => "warn",
        _ => "error",
    };
    let data = params.get("data").map_or_else(String::new, text_of);
    let message = match params.get("logger").and_then(Value::as_str) {
        Some(logger) if !logger.is_empty() => format!("{logger}: {data}"),
        _ => data,
    };
    let level = Some(level.into());
    Some(ExtFrame::Notify { level, message })
}

/// The frame answering the host's `tool_call` or `command_invoked`.
fn answer(kind: Kind, id: String, result: Result<&Value, String>) -> ExtFrame {
    if kind == Kind::Tool {
        #[cfg(any(feature = "tool-extras", feature = "journal"))]
        let structured_content = (result.as_ref().ok())
            .and_then(|r| r.get("structuredContent"))
            .filter(|s| !s.is_null())
            .cloned();
        let (content, is_error) = tool_content(result);
        return ExtFrame::ToolResult {
            id,
            content: Some(content),
            is_error: Some(is_error),
            #[cfg(any(feature = "tool-extras", feature = "journal"))]
            structured_content,
            #[cfg(feature = "tool-extras")]
            activate_tools: None,
        };
    }
    // A `prompt` action: the text of the user messages, joined by blank lines.
    let text = result.map(|r| {
        let messages = r["messages"].as_array().into_iter().flatten();
        let user = messages.filter(|m| m["role"] == "user" && m["content"]["type"] == "text");
        let texts: Vec<&str> = user.filter_map(|m| m["content"]["text"].as_str()).collect();
        texts.join("\n\n")
    });
    let (action, prompt, display, error) = match text {
        Ok(text) if !text.is_empty() => ("prompt", Some(text), None, None),
        Ok(_) => {
            let display = Some("(the prompt has no user message)".into());
            ("display", None, display, None)
        }
        Err(e) => ("noop", None, None, Some(e)),
    };
    ExtFrame::CommandResponse(CommandResponse {
        id,
        action: Some(action.into()),
        prompt,
        #[cfg(feature = "tool-extras")]
        tool_name: None,
        #[cfg(feature = "tool-extras")]
        tool_args: None,
        insert: None,
        display,
        #[cfg(feature = "panels")]
        open_panel: None,
        error,
    })
}

/// A `tools/call` result as content blocks and `is_error` (docs/PROTOCOL.md#mcp-servers).
fn tool_content(result: Result<&Value, String>) -> (Vec<Block>, bool) {
    let result = match result {
        Ok(result) => result,
        Err(e) => return (vec![text_value(&e).into()], true),
    };
    let blocks = result["content"].as_array().into_iter().flatten();
    let mut content: Vec<Block> = blocks.map(|b| zot_block(b).into()).collect();
    if let (true, Some(structured)) = (content.is_empty(), result.get("structuredContent")) {
        content.push(text_value(&structured.to_string()).into());
    }
    (content, result["isError"] == true)
}

/// A zot text block, as JSON (the shape of an MCP block mapped).
fn text_value(text: &str) -> Value {
    text_block(text).to_value()
}

/// An MCP content block as zot's (docs/PROTOCOL.md#mcp-servers).
fn zot_block(block: &Value) -> Value {
    let field = |b: &Value, key: &str| b[key].as_str().unwrap_or("").to_string();
    match block["type"].as_str().unwrap_or("") {
        "image" => json!({
            "type": "image",
            "mime_type": field(block, "mimeType"),
            "data": field(block, "data"),
        }),
        "audio" => text_value(&format!("[audio {}]", field(block, "mimeType"))),
        "resource_link" => text_value(&format!("[resource {}]", field(block, "uri"))),
        "resource" => match block["resource"]["text"].as_str() {
            Some(t) => text_value(t),
            None => text_value(&format!("[resource {}]", field(&block["resource"], "uri"))),
        },
        // Text, and anything unknown: the host's own mapping reports it.
        _ => block.clone(),
    }
}

/// The arguments of `/name args` for a prompt `declared` (name, required), as
/// docs/PROTOCOL.md#mcp-servers says; required ones are checked here (servers
/// report them badly).
fn prompt_arguments(declared: &[(String, bool)], args: &str) -> Result<Map<String, Value>, String> {
    let args = args.trim();
    let with_usage = |why: String| {
        let part = |(n, required): &(String, bool)| match required {
            true => format!("{n}=..."),
            false => format!("[{n}=...]"),
        };
        let parts: Vec<String> = declared.iter().map(part).collect();
        Err(format!("{why} (arguments: {})", parts.join(" ")))
    };
    let mut map = Map::new();
    if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(args) {
        for (k, v) in obj {
            map.insert(k, text_of(&v).into());
        }
    } else if let [(only, _)] = declared {
        if !args.is_empty() {
            map.insert(only.clone(), args.into());
        }
    } else if !declared.is_empty() {
        for (k, v) in key_values(args)? {
            if !declared.iter().any(|(name, _)| *name == k) {
                return with_usage(format!("unknown argument `{k}`"));
            }
            map.insert(k, v.into());
        }
    }
    let missing = |(n, required): &&(String, bool)| *required && !map.contains_key(n);
    match declared.iter().find(missing) {
        Some((n, _)) => with_usage(format!("missing required argument `{n}`")),
        None => Ok(map),
    }
}

/// `a=1 b="two words"` -> pairs; a word without `=` is an error.
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let end = rest.find(|c: char| c == '=' || c.is_whitespace());
        let (key, after) = rest.split_at(end.unwrap_or(rest.len()));
        let Some(after) = after.strip_prefix('=').filter(|_| !key.is_empty()) else {
            return Err(format!("expected key=value arguments, got `{key}`"));
        };
        let mut value = String::new();
        if let Some(quoted) = after.strip_prefix('"') {
            let mut chars = quoted.char_indices();
            rest = loop {
                match chars.next() {
                    Some((i, '"')) => break &quoted[i + 1..],
                    Some((_, '\\')) => value.extend(chars.next().map(|(_, c)| c)),
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("unterminated quote in the value of `{key}`")),
                }
            };
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            value.push_str(&after[..end]);
            rest = &after[end..];
        }
        pairs.push((key.to_string(), value));
        rest = rest.trim_start();
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    /// The probe's limit as `HostConfig::new` sets it.
    fn probe_limit() -> Duration {
        crate::Timeouts::default().mcp_probe
    }

    fn client(now: Instant) -> McpClient {
        let opts = McpOptions {
            name: "srv".into(),
            prefix: "p_".into(),
            client_version: "9.9".into(),
            tool_timeout: 60 * SEC,
            command_timeout: 30 * SEC,
            probe_timeout: probe_limit(),
        };
        McpClient::new(opts, ExtLog::stderr("srv"), now)
    }

    /// The JSON-RPC messages it wrote since last asked.
    fn written(c: &mut McpClient) -> Vec<Value> {
        let lines = c.take_lines();
        let lines = lines.split(|&b| b == b'\n').filter(|l| !l.is_empty());
        lines.map(|l| serde_json::from_slice(l).unwrap()).collect()
    }

    fn answer_to(c: &mut McpClient, id: &Value, result: Value, now: Instant) {
        let line = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
        c.on_line(line.as_bytes(), now);
    }

    /// A client past the legacy handshake with one tool, `echo`, and
    /// one prompt, `greet {name}`.
    /// The host calls the server's `echo` tool (`p_echo`) as `id`.
    fn call_echo(c: &mut McpClient, id: &str, args: &Value, at: Instant) {
        let name = "p_echo";
        let call = HostFrame::ToolCall {
            id,
            name,
            args,
            #[cfg(feature = "journal")]
            operation_key: None,
            #[cfg(feature = "journal")]
            reconcile: false,
        };
        c.on_host_frame(&call, at);
    }

    fn running(t0: Instant) -> McpClient {
        let mut c = client(t0);
        let probe = written(&mut c).remove(0);
        let refusal = json!({"jsonrpc": "2.0", "id": probe["id"], "error": {"code": -32601, "message": "no"}});
        c.on_line(refusal.to_string().as_bytes(), t0);
        let init = written(&mut c).remove(0);
        assert_eq!(init["method"], "initialize");
        let caps = json!({"tools": {}, "prompts": {}});
        let init_result = json!({"protocolVersion": LEGACY_VERSION, "capabilities": caps});
        answer_to(&mut c, &init["id"], init_result, t0);
        let [initialized, tools, prompts] = <[Value; 3]>::try_from(written(&mut c)).unwrap();
        let methods = [&initialized, &tools, &prompts].map(|m| m["method"].clone());
        assert_eq!(
            methods,
            ["notifications/initialized", "tools/list", "prompts/list"]
        );
        answer_to(
            &mut c,
            &tools["id"],
            json!({"tools": [{"name": "echo"}]}),
            t0,
        );
        let greet = json!({"name": "greet", "arguments": [{"name": "name", "required": true}]});
        answer_to(&mut c, &prompts["id"], json!({"prompts": [greet]}), t0);
        let frames = c.take_frames();
        assert!(
            matches!(
                frames[..],
                [
                    ExtFrame::Hello { .. },
                    ExtFrame::RegisterTool { .. },
                    ExtFrame::RegisterCommand { .. },
                    ExtFrame::Ready,
                ]
            ),
            "{frames:?}"
        );
        assert_eq!(c.next_deadline(), None, "nothing left to wait for");
        c
    }

    #[test]
    fn an_unanswered_probe_falls_back_to_initialize_at_its_limit() {
        let t0 = Instant::now();
        let mut c = client(t0);
        let [probe] = <[Value; 1]>::try_from(written(&mut c)).unwrap();
        assert_eq!(
            (&probe["method"], &probe["id"]),
            (&json!("server/discover"), &json!(1))
        );
        assert_eq!(
            probe["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["version"],
            "9.9"
        );
        assert_eq!(probe_limit(), 3 * SEC, "the default probe limit is 3 s");
        assert_eq!(c.next_deadline(), Some(t0 + probe_limit()));
        c.on_deadline(t0 + probe_limit() - Duration::from_millis(1));
        assert!(written(&mut c).is_empty(), "not before its limit");
        c.on_deadline(t0 + probe_limit());
        let [init] = <[Value; 1]>::try_from(written(&mut c)).unwrap();
        assert_eq!(init["method"], "initialize");
        assert_eq!(init["params"]["protocolVersion"], LEGACY_VERSION);
        // A refusal while the probe is out: one more limit, then that
        // refusal is why the server fails.
        let t1 = t0 + 4 * SEC;
        let refusal = json!({"jsonrpc": "2.0", "id": init["id"], "error": {"code": -32603, "message": "boom"}});
        c.on_line(refusal.to_string().as_bytes(), t1);
        assert_eq!(c.take_failure(), None);
        assert_eq!(c.next_deadline(), Some(t1 + probe_limit()));
        c.on_deadline(t1 + probe_limit());
        let why = c.take_failure().unwrap_or_default();
        assert_eq!(why, "initialize failed: MCP error -32603: boom");
        assert!(c.take_frames().is_empty(), "no hello: {why}");
    }

    #[test]
    fn a_late_probe_answer_still_wins() {
        let t0 = Instant::now();
        let mut c = client(t0);
        written(&mut c);
        c.on_deadline(t0 + probe_limit());
        assert_eq!(written(&mut c)[0]["method"], "initialize");
        let versions =
            json!({"supportedVersions": [MODERN_VERSION], "capabilities": {"tools": {}}});
        answer_to(&mut c, &json!(PROBE_ID), versions, t0 + 5 * SEC);
        let methods: Vec<Value> = written(&mut c)
            .iter()
            .map(|m| m["method"].clone())
            .collect();
        assert_eq!(
            methods,
            [json!("subscriptions/listen"), json!("tools/list")]
        );
    }

    #[test]
    fn a_call_that_outlasts_its_timeout_is_cancelled() {
        let t0 = Instant::now();
        let mut c = running(t0);
        let args = json!({"x": 1});
        let call = HostFrame::ToolCall {
            id: "h1",
            name: "p_echo",
            args: &args,
            #[cfg(feature = "journal")]
            operation_key: None,
            #[cfg(feature = "journal")]
            reconcile: false,
        };
        c.on_host_frame(&call, t0);
        let [request] = <[Value; 1]>::try_from(written(&mut c)).unwrap();
        assert_eq!(request["method"], "tools/call");
        assert_eq!(
            request["params"],
            json!({"name": "echo", "arguments": {"x": 1}})
        );
        assert_eq!(c.next_deadline(), Some(t0 + 60 * SEC));
        c.on_deadline(t0 + 59 * SEC);
        assert!(written(&mut c).is_empty(), "not before the tool timeout");
        c.on_deadline(t0 + 60 * SEC);
        let [cancel] = <[Value; 1]>::try_from(written(&mut c)).unwrap();
        assert_eq!(cancel["method"], "notifications/cancelled");
        assert_eq!(
            cancel["params"],
            json!({"requestId": request["id"], "reason": "timed out after 60 s"})
        );
        assert_eq!(c.next_deadline(), None);
        // Its late answer is dropped: the host failed the call already.
        answer_to(
            &mut c,
            &request["id"],
            json!({"content": []}),
            t0 + 61 * SEC,
        );
        assert!(c.take_frames().is_empty());
    }

    #[test]
    fn a_prompt_that_outlasts_the_command_timeout_is_cancelled() {
        let t0 = Instant::now();
        let mut c = running(t0);
        let get = HostFrame::CommandInvoked {
            id: "h1",
            name: "p_greet",
            args: "Ada",
        };
        c.on_host_frame(&get, t0);
        let [request] = <[Value; 1]>::try_from(written(&mut c)).unwrap();
        assert_eq!(request["method"], "prompts/get");
        assert_eq!(
            request["params"],
            json!({"name": "greet", "arguments": {"name": "Ada"}})
        );
        assert_eq!(c.next_deadline(), Some(t0 + 30 * SEC));
        c.on_deadline(t0 + 30 * SEC);
        let [cancel] = <[Value; 1]>::try_from(written(&mut c)).unwrap();
        assert_eq!(
            cancel["params"],
            json!({"requestId": request["id"], "reason": "timed out after 30 s"})
        );
        // A missing required argument is answered without the server.
        c.on_host_frame(
            &HostFrame::CommandInvoked {
                id: "h2",
                name: "p_greet",
                args: "",
            },
            t0,
        );
        assert!(written(&mut c).is_empty());
        let frames = c.take_frames();
        let [ExtFrame::CommandResponse(r)] = &frames[..] else {
            panic!("one command response, not {frames:?}");
        };
        let error = r.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("missing required argument `name`"),
            "{error}"
        );
    }

    #[test]
    fn an_answered_call_is_not_cancelled() {
        let t0 = Instant::now();
        let mut c = running(t0);
        call_echo(&mut c, "h1", &json!({}), t0);
        let request = written(&mut c).remove(0);
        let text = json!({"content": [{"type": "text", "text": "hi"}]});
        answer_to(&mut c, &request["id"], text, t0 + SEC);
        let frames = c.take_frames();
        assert!(
            matches!(&frames[..], [ExtFrame::ToolResult { id, is_error: Some(false), .. }] if id == "h1")
        );
        assert_eq!(c.next_deadline(), None, "its cancellation is forgotten");
        c.on_deadline(t0 + 60 * SEC);
        assert!(written(&mut c).is_empty());
    }

    #[test]
    fn the_hosts_tool_cancel_and_shutdown() {
        let t0 = Instant::now();
        let mut c = running(t0);
        let args = json!({});
        call_echo(&mut c, "h1", &args, t0);
        let request = written(&mut c).remove(0);
        c.on_host_frame(&HostFrame::ToolCancel { id: "h1" }, t0 + SEC);
        let [cancel] = <[Value; 1]>::try_from(written(&mut c)).unwrap();
        assert_eq!(
            cancel["params"],
            json!({"requestId": request["id"], "reason": "cancelled by the host"})
        );
        assert_eq!(c.next_deadline(), None);
        // Unknown names and bad arguments are answered at once, without the server.
        call_echo(&mut c, "h2", &json!([1]), t0);
        c.on_host_frame(
            &HostFrame::ToolCall {
                id: "h3",
                name: "echo",
                args: &args,
                #[cfg(feature = "journal")]
                operation_key: None,
                #[cfg(feature = "journal")]
                reconcile: false,
            },
            t0,
        );
        assert!(written(&mut c).is_empty());
        assert_eq!(c.next_deadline(), Some(t0), "its answers wait for the loop");
        c.on_host_frame(&HostFrame::Shutdown, t0);
        let frames = c.take_frames();
        assert!(matches!(
            frames[..],
            [
                ExtFrame::ToolResult {
                    is_error: Some(true),
                    ..
                },
                ExtFrame::ToolResult {
                    is_error: Some(true),
                    ..
                },
                ExtFrame::ShutdownAck
            ]
        ));
        assert_eq!(c.next_deadline(), None);
    }

    // What tests/mcp_ext.rs does not reach (no server there sends these).
    #[test]
    fn prompt_argument_errors() {
        let two = [("city".to_string(), true), ("state".to_string(), false)];
        let unknown = "unknown argument `x` (arguments: city=... [state=...])";
        for (args, error) in [
            ("Paris", "expected key=value arguments, got `Paris`"),
            ("x=1 city=a", unknown),
            ("city=\"a", "unterminated quote in the value of `city`"),
        ] {
            assert_eq!(prompt_arguments(&two, args), Err(error.to_string()));
        }
        let got = prompt_arguments(&two, r#"city="New \"York\"" state=NY"#);
        assert_eq!(
            got.map(Value::Object),
            Ok(json!({"city": "New \"York\"", "state": "NY"}))
        );
    }

    #[test]
    fn audio_and_resource_blocks() {
        let (content, is_error) = tool_content(Ok(&json!({"content": [
            {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "file:///c", "blob": "aGk="}},
        ], "isError": true})));
        let text = |t: &str| Block::from(text_value(t));
        let texts = ["[audio audio/wav]", "[resource file:///a]", "inside"];
        assert_eq!(content[..3], texts.map(text));
        assert_eq!(content[3], text("[resource file:///c]"));
        assert!(is_error);
    }
}
