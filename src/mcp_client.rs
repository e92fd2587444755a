//! MCP servers as extensions (SPEC 11): the host is the server's MCP
//! client, and this adapter translates at the frame layer so the host
//! loop never sees a second protocol. The reader thread hands it the
//! server's lines (`Adapter::on_server_line`), the host loop its frames
//! (`Adapter::on_host_chunk`); a timer thread fires the probe limit and
//! cancellations. Wire shapes: MCP 2025-11-25, and 2026-07-28 for
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
//!   version}`, capabilities `{}`), given 3 s; a server that lists
//!   2026-07-28 is spoken to in that revision (every request carries the
//!   envelope; list changes arrive on a `subscriptions/listen` stream).
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

use crate::jsonrpc::{Id, Message, RpcError, METHOD_NOT_FOUND, PARSE_ERROR};
use crate::log::ExtLog;
use crate::process::{Inbound, InboundMsg, OutChunk};
use crate::protocol::{head_fields, snippet, CommandResponse, ExtFrame, ToolExtras, MAX_LINE};
use crate::registry::{footprint, MAX_NAMES, MAX_NAME_BYTES};
use crate::toolresult::text_block;
use crate::types::human;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// The revision probed first, and the legacy fallback's.
const MODERN_VERSION: &str = "2026-07-28";
const LEGACY_VERSION: &str = "2025-11-25";
/// How long the `server/discover` probe may go unanswered.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The probe is the first request.
const PROBE_ID: u64 = 1;
/// Notes held during the handshake; older ones are dropped and counted.
const HELD_NOTES: usize = 100;
/// A server whose cursors never end would have the host list forever.
const MAX_PAGES: usize = 1000;

/// Appends a formatted line to the server's log.
macro_rules! log {
    ($adapter:expr, $($fmt:tt)*) => {
        $adapter.log.line(&format!($($fmt)*))
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
    /// Bytes that may wait for its stdin before its stdout is not read:
    /// the host's `event_queue_limit`, as for every extension.
    pub stdin_limit: usize,
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

#[derive(Default)]
struct State {
    next_id: u64,
    phase: Phase,
    /// It speaks 2026-07-28: our requests carry `_meta`.
    modern: bool,
    waiting: HashMap<u64, Waiting>,
    /// Indexed by `Kind`.
    lists: [Lists; 2],
    /// Frames held until `hello` is sent, notes apart (capped).
    held: Vec<ExtFrame>,
    held_notes: VecDeque<ExtFrame>,
    dropped_notes: usize,
    server_version: Option<String>,
}

/// The per-server translator, shared by the reader, host loop and timer threads.
pub(crate) struct Adapter {
    key: u64,
    opts: McpOptions,
    log: ExtLog,
    inbound: Sender<InboundMsg>,
    stdin: Mutex<Option<Sender<OutChunk>>>,
    /// Bytes queued for stdin, shared with the process (its writer subtracts them).
    queued: Arc<AtomicUsize>,
    /// When to look at which request again (the probe, a cancellation).
    timer: Sender<(Instant, u64)>,
    /// The 2026-07-28 `_meta` envelope of our requests.
    meta: Value,
    state: Mutex<State>,
    /// Its stdout was not read once for its stdin's backlog (logged once).
    backlogged: AtomicBool,
}

/// Creates the adapter for a spawned server, starts its timer and sends the probe.
pub(crate) fn start(
    key: u64,
    opts: McpOptions,
    log: ExtLog,
    inbound: Sender<InboundMsg>,
    stdin: Sender<OutChunk>,
    queued: Arc<AtomicUsize>,
) -> io::Result<Arc<Adapter>> {
    let (timer, timer_rx) = crossbeam_channel::unbounded();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "zot", "version": opts.client_version},
    });
    let adapter = Arc::new(Adapter {
        key,
        opts,
        log,
        inbound,
        stdin: Mutex::new(Some(stdin)),
        queued,
        timer,
        meta,
        state: Mutex::default(),
        backlogged: AtomicBool::new(false),
    });
    let weak = Arc::downgrade(&adapter);
    std::thread::Builder::new()
        .name(format!("zot-mcp-{}", adapter.opts.name))
        .stack_size(64 * 1024)
        .spawn(move || run_timer(&weak, &timer_rx))?;
    let mut st = lock(&adapter.state);
    adapter.request(&mut st, "server/discover", json!({}), Waiting::Discover);
    drop(st);
    adapter.after(PROBE_TIMEOUT, PROBE_ID);
    Ok(adapter)
}

fn run_timer(adapter: &Weak<Adapter>, rx: &Receiver<(Instant, u64)>) {
    // Every request schedules a cancellation that usually outlives its
    // answer, so thousands may be due: keep them ordered, earliest first.
    let mut due = BTreeSet::new();
    loop {
        let got = match due.first() {
            Some(&(at, _)) => rx.recv_deadline(at),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(timer) => _ = due.insert(timer),
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let later = due.split_off(&(Instant::now(), u64::MAX));
        for (_, id) in std::mem::replace(&mut due, later) {
            let Some(adapter) = adapter.upgrade() else {
                return;
            };
            adapter.fire(id);
        }
    }
}

/// Poison is ignored: a panic elsewhere matters less than stopping the server.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Adapter {
    /// Writes one JSON-RPC message to the server's stdin, unless closed.
    fn write<P: Serialize, R: Serialize>(&self, msg: &Message<P, R>) {
        let stdin = lock(&self.stdin);
        let Some(tx) = stdin.as_ref() else { return };
        let mut line = Vec::new();
        msg.write_line(&mut line);
        let len = line.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if tx.send(line).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
        }
    }

    /// Whether more than `stdin_limit` bytes wait for its stdin: then
    /// its stdout is not read (what it sends may need answers, SPEC 11).
    pub fn stdin_backlogged(&self) -> bool {
        let over = self.queued.load(Ordering::Relaxed) > self.opts.stdin_limit;
        if over && !self.backlogged.swap(true, Ordering::Relaxed) {
            let limit = self.opts.stdin_limit >> 20;
            log!(self, "not reading its stdin: its stdout is not read while more than {limit} MiB wait for it");
        }
        over
    }

    /// Closes stdin (MCP's stdio shutdown) once every queued line is written.
    pub fn close_stdin(&self) {
        lock(&self.stdin).take();
    }

    fn report(&self, msg: Inbound) {
        let _ = self.inbound.send(InboundMsg { key: self.key, msg });
    }

    /// Passes a frame to the host, or holds it until `hello` is sent.
    fn emit(&self, st: &mut State, frame: ExtFrame) {
        if st.phase == Phase::Running {
            self.report(Inbound::Frame(frame));
        } else if matches!(frame, ExtFrame::Notify { .. }) {
            if st.held_notes.len() == HELD_NOTES {
                st.held_notes.pop_front();
                st.dropped_notes += 1;
            }
            st.held_notes.push_back(frame);
        } else {
            st.held.push(frame);
        }
    }

    fn after(&self, delay: Duration, id: u64) {
        if let Some(at) = Instant::now().checked_add(delay) {
            let _ = self.timer.send((at, id));
        }
    }

    fn timeout(&self, kind: Kind) -> Duration {
        [self.opts.tool_timeout, self.opts.command_timeout][kind as usize]
    }

    /// Sends a request and records what its response is for.
    fn request(&self, st: &mut State, method: &str, mut params: Value, waiting: Waiting) -> u64 {
        st.next_id += 1;
        // The probe carries the envelope too: without it the official
        // Python SDK server answers -32601 and locks the stream to legacy.
        if st.modern || matches!(waiting, Waiting::Discover) {
            params["_meta"] = self.meta.clone();
            // 2026-07-28 servers send log messages only to requests that opt in.
            if matches!(waiting, Waiting::Call(..)) {
                params["_meta"]["io.modelcontextprotocol/logLevel"] = json!("debug");
            }
        }
        st.waiting.insert(st.next_id, waiting);
        self.write(&Message::<_, ()>::request(
            Id::from(st.next_id),
            method,
            params,
        ));
        st.next_id
    }

    /// A timer is due: the probe's limit, or a request's cancellation.
    fn fire(&self, id: u64) {
        let mut st = lock(&self.state);
        match st.waiting.get(&id) {
            // A slow server (an SDK still importing) may answer it yet: that wins.
            Some(Waiting::Discover) => {
                let secs = PROBE_TIMEOUT.as_secs();
                let why = format!("no answer within {secs} s; trying the legacy initialize");
                self.no_probe(&mut st, why);
            }
            Some(&Waiting::Call(kind, _)) => {
                st.waiting.remove(&id);
                let reason = format!("timed out after {}", human(self.timeout(kind)));
                let [.., method] = kind.names();
                log!(self, "{method} request {id} {reason}: cancelled");
                self.write(&cancelled(id, &reason));
            }
            _ => {}
        }
    }

    fn initialize(&self, st: &mut State) {
        st.phase = Phase::Initializing(None);
        let params = json!({
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": self.meta["io.modelcontextprotocol/clientInfo"],
        });
        self.request(st, "initialize", params, Waiting::Initialize);
    }

    /// Handles one line from the server; false once the handshake failed.
    pub fn on_server_line(&self, line: &[u8]) -> bool {
        let why = match Message::parse(line) {
            Ok(msg) => return self.message(msg),
            Err(invalid) if invalid.code == PARSE_ERROR => invalid.why,
            Err(_) if !line.trim_ascii_start().starts_with(b"{") => "not a JSON object".into(),
            Err(invalid) => invalid.why,
        };
        self.dropped(line, &why);
        true
    }

    /// A message over the frame limit was dropped: when its start names
    /// the id of a call, that call fails at once (its content is lost).
    pub fn on_too_long(&self, len: usize, head: &[u8]) {
        let fields = head_fields(head);
        let id = fields
            .iter()
            .find(|(k, _)| k == "id")
            .and_then(|(_, v)| v.as_u64());
        let mut st = lock(&self.state);
        // Only a call: the handshake and the lists have their own deadlines.
        let id = id.filter(|id| matches!(st.waiting.get(id), Some(Waiting::Call(..))));
        let Some(Waiting::Call(kind, host_id)) = id.and_then(|id| st.waiting.remove(&id)) else {
            return; // an answer nobody waits for, or one without its id up front
        };
        let why = format!(
            "the MCP server's answer was {len} bytes, over the {} MiB frame limit: dropped",
            MAX_LINE >> 20
        );
        self.emit(&mut st, answer(kind, host_id, Err(why)));
    }

    /// Dispatches one JSON-RPC message; false once the handshake failed.
    fn message(&self, msg: Message) -> bool {
        let mut st = lock(&self.state);
        match msg {
            Message::Request(r) => self.server_request(&r.method, r.id),
            Message::Notification(n) => self.notification(&mut st, &n.method, n.params.as_ref()),
            Message::Response(r) => self.response(&mut st, &r.id, r.result),
        }
        st.phase != Phase::Failed
    }

    fn dropped(&self, line: &[u8], why: &str) {
        log!(self, "dropped MCP message ({why}): {}", snippet(line));
    }

    /// `ping` is answered; sampling, elicitation and roots are refused.
    fn server_request(&self, method: &str, id: Id) {
        if method == "ping" {
            return self.write(&Message::<(), _>::response(id, Ok(json!({}))));
        }
        let why = "zot declares no client capabilities";
        log!(self, "refused the server's {method} request: {why}");
        let message = format!("Method not found: {method} ({why})");
        let error = RpcError::new(METHOD_NOT_FOUND, message);
        self.write(&Message::<(), ()>::response(id, Err(error)));
    }

    fn notification(&self, st: &mut State, method: &str, params: Option<&Map<String, Value>>) {
        match method {
            "notifications/message" => match params.and_then(note_from_log) {
                Some(note) => self.emit(st, note),
                None => log!(self, "dropped notifications/message without a level"),
            },
            "notifications/tools/list_changed" => self.relist(st, Kind::Tool),
            "notifications/prompts/list_changed" => self.relist(st, Kind::Prompt),
            "notifications/subscriptions/acknowledged" => {
                let honored = params.and_then(|p| p.get("notifications"));
                let honored = honored.map_or_else(|| "{}".into(), Value::to_string);
                log!(self, "subscriptions/listen acknowledged: {honored}");
            }
            _ => {}
        }
    }

    fn response(&self, st: &mut State, id: &Id, result: Result<Value, RpcError>) {
        let Some(waiting) = id.as_u64().and_then(|n| st.waiting.remove(&n)) else {
            let why = "unknown, cancelled or already answered";
            return log!(self, "dropped a response: id {id} is {why}");
        };
        let result = match &result {
            Ok(r) => Ok(r),
            Err(e) => {
                let message = Some(e.message.as_str()).filter(|m| !m.is_empty());
                let code = Some(e.code).filter(|&c| c != 0).map(|c| format!(" {c}"));
                let message = message.unwrap_or("(no message)");
                Err(format!("MCP error{}: {message}", code.unwrap_or_default()))
            }
        };
        match waiting {
            Waiting::Discover => self.discovered(st, result),
            Waiting::Initialize => self.initialized(st, result),
            Waiting::Listen => {
                let why = result.err().unwrap_or("closed by the server".into());
                log!(self, "subscriptions/listen ended: {why}");
            }
            Waiting::Page(kind) => self.page(st, kind, result),
            Waiting::Call(kind, host_id) => {
                let frame = answer(kind, host_id, result.and_then(complete));
                self.emit(st, frame);
            }
        }
    }

    fn discovered(&self, st: &mut State, result: Result<&Value, String>) {
        let supports_modern = |r: &Value| {
            let versions = r["supportedVersions"].as_array();
            versions.is_some_and(|v| v.contains(&MODERN_VERSION.into()))
        };
        let legacy = |why: String| format!("{why}; using the legacy initialize ({LEGACY_VERSION})");
        let result = match result {
            Ok(result) if supports_modern(result) => result,
            Ok(_) => {
                let why = format!("{MODERN_VERSION} is not among its supportedVersions");
                return self.no_probe(st, legacy(why));
            }
            Err(e) => return self.no_probe(st, legacy(e)),
        };
        if !matches!(st.phase, Phase::Probing | Phase::Initializing(_)) {
            return;
        }
        // Its answer to initialize (a 2026-only server's error) no longer matters.
        st.waiting.retain(|_, w| !matches!(w, Waiting::Initialize));
        st.modern = true;
        // The SDKs put the identity in `_meta`, the specification in `serverInfo`.
        let at = |pointer| result.pointer(pointer).and_then(Value::as_str);
        let version = at("/_meta/io.modelcontextprotocol~1serverInfo/version");
        log!(self, "speaking MCP {MODERN_VERSION} (server/discover)");
        // The 2026 era announces list changes only on a listen stream.
        let filter =
            json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}});
        self.request(st, "subscriptions/listen", filter, Waiting::Listen);
        self.list_all(st, result, version.or_else(|| at("/serverInfo/version")));
    }

    fn initialized(&self, st: &mut State, result: Result<&Value, String>) {
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                let why = format!("initialize failed: {e}");
                if !st.waiting.contains_key(&PROBE_ID) {
                    return self.handshake_failed(st, why);
                }
                // Not forever: one more limit, then this refusal is the reason.
                log!(self, "{why}; waiting for the server/discover answer");
                st.phase = Phase::Initializing(Some(why));
                return self.after(PROBE_TIMEOUT, PROBE_ID);
            }
        };
        let version = result["protocolVersion"].as_str();
        let version = version.unwrap_or("of unknown version");
        log!(self, "speaking MCP {version} (initialize)");
        let initialized = "notifications/initialized";
        self.write(&Message::<(), ()>::notification(initialized, None));
        self.list_all(st, result, result["serverInfo"]["version"].as_str());
    }

    /// No usable probe answer (`why`): the legacy `initialize`, unless it
    /// is out already; when that was refused, the handshake fails.
    fn no_probe(&self, st: &mut State, why: String) {
        match std::mem::take(&mut st.phase) {
            Phase::Probing => {
                log!(self, "server/discover: {why}");
                self.initialize(st);
            }
            Phase::Initializing(Some(why)) => self.handshake_failed(st, why),
            phase => st.phase = phase,
        }
    }

    /// The host fails the server with `why` (not the EOF that follows), kills it.
    fn handshake_failed(&self, st: &mut State, why: String) {
        self.log.line(&why);
        self.report(Inbound::Failed(why));
        st.phase = Phase::Failed;
    }

    /// The handshake's `result`: fetches the tools and prompts the server
    /// declares (both when it declares no capabilities at all).
    fn list_all(&self, st: &mut State, result: &Value, version: Option<&str>) {
        st.phase = Phase::Listing;
        st.server_version = version.map(Into::into);
        let caps = result.get("capabilities");
        for kind in [Kind::Tool, Kind::Prompt] {
            let [_, capability, ..] = kind.names();
            if caps.is_none_or(|c| c.get(capability).is_some()) {
                self.list(st, kind);
            }
        }
        self.listed(st);
    }

    /// A list changed: fetch it again, now or after the running fetch.
    fn relist(&self, st: &mut State, kind: Kind) {
        let [_, list_key, ..] = kind.names();
        log!(self, "{list_key} changed: listing it again");
        if matches!(st.phase, Phase::Listing | Phase::Running) {
            st.lists[kind as usize].again = true;
            self.listed(st);
        }
    }

    /// Requests a list's first page.
    fn list(&self, st: &mut State, kind: Kind) {
        st.lists[kind as usize].listing = Some(Default::default());
        st.lists[kind as usize].again = false;
        let [_, _, list_method, _] = kind.names();
        self.request(st, list_method, json!({}), Waiting::Page(kind));
    }

    fn page(&self, st: &mut State, kind: Kind, result: Result<&Value, String>) {
        let [what, key, method, _] = kind.names();
        let Some(listing) = st.lists[kind as usize].listing.as_mut() else {
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
                    let size = footprint(text("name"), text("description"), &details.cloned())
                        + footprint("", "", &item.get("outputSchema").cloned());
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
                        self.request(st, method, params, Waiting::Page(kind));
                        return;
                    };
                    log!(self, "{method}: {why}; keeping the {} listed", items.len());
                }
                let items = std::mem::take(items);
                self.register(st, kind, items);
            }
        }
        st.lists[kind as usize].listing = None;
        self.listed(st);
    }

    /// After a listing: once the first ones are done, `hello`, the held frames
    /// and `ready`, as a zot extension starts; then lists again what changed.
    fn listed(&self, st: &mut State) {
        let idle = |l: &Lists| l.listing.is_none();
        if st.phase == Phase::Listing && st.lists.iter().all(idle) {
            st.phase = Phase::Running;
            self.report(Inbound::Frame(ExtFrame::Hello {
                name: self.opts.name.clone(),
                version: st.server_version.clone(),
                // The host's `tool_cancel` becomes `notifications/cancelled`.
                capabilities: Some(vec!["tool_cancel".into()]),
            }));
            if st.dropped_notes > 0 {
                let n = st.dropped_notes;
                log!(
                    self,
                    "dropped {n} notes sent before the handshake ended (the oldest; {HELD_NOTES} kept)"
                );
            }
            let held = st.held.drain(..).chain(st.held_notes.drain(..));
            for frame in held.chain([ExtFrame::Ready]) {
                self.report(Inbound::Frame(frame));
            }
        }
        for kind in [Kind::Tool, Kind::Prompt] {
            let lists = &st.lists[kind as usize];
            if st.phase == Phase::Running && lists.again && idle(lists) {
                self.list(st, kind);
            }
        }
    }

    /// Registers a whole list, and unregisters what left it.
    fn register(&self, st: &mut State, kind: Kind, items: Vec<Value>) {
        let mut now = BTreeMap::new();
        for item in items {
            let Some(server_name) = item["name"].as_str() else {
                let [what, _, method, _] = kind.names();
                log!(self, "{method}: skipped a {what} without a name");
                continue;
            };
            let name = format!("{}{server_name}", self.opts.prefix);
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
                        output_schema: item.get("outputSchema").filter(|s| !s.is_null()).cloned(),
                        ..Default::default()
                    },
                },
                Kind::Prompt => ExtFrame::RegisterCommand {
                    name: name.clone(),
                    description,
                },
            };
            self.emit(st, frame);
            let args = item["arguments"].as_array().into_iter().flatten();
            let args =
                args.filter_map(|a| Some((a["name"].as_str()?.to_string(), a["required"] == true)));
            now.insert(name, (server_name.to_string(), args.collect()));
        }
        let before = std::mem::replace(&mut st.lists[kind as usize].registered, now);
        for name in before.into_keys() {
            if !st.lists[kind as usize].registered.contains_key(&name) {
                let frame = match kind {
                    Kind::Tool => ExtFrame::UnregisterTool { name },
                    Kind::Prompt => ExtFrame::UnregisterCommand { name },
                };
                self.emit(st, frame);
            }
        }
    }

    /// Handles a chunk of frames the host loop wrote for this extension.
    pub fn on_host_chunk(&self, chunk: &[u8]) {
        for line in chunk.split(|&b| b == b'\n') {
            let Ok(frame) = serde_json::from_slice::<Value>(line) else {
                continue; // the host's own frames always parse
            };
            let str_of = |key: &str| frame[key].as_str().unwrap_or("");
            let (id, name, args) = (str_of("id"), str_of("name"), frame.get("args"));
            match str_of("type") {
                "tool_call" => self.call(Kind::Tool, id, name, args),
                "command_invoked" => self.call(Kind::Prompt, id, name, args),
                "tool_cancel" => self.cancel(id),
                // MCP's stdio shutdown is closing stdin; acknowledging at
                // once lets the host do that and start its grace period.
                "shutdown" => self.report(Inbound::Frame(ExtFrame::ShutdownAck)),
                // hello_ack; events, intercepts and panels never apply.
                _ => {}
            }
        }
    }

    /// The host abandoned its `tool_call` `host_id` (SPEC 13.2): the
    /// server is told with `notifications/cancelled`; its late answer is
    /// dropped.
    fn cancel(&self, host_id: &str) {
        let mut st = lock(&self.state);
        let ours = st.waiting.iter().find_map(|(&id, w)| match w {
            Waiting::Call(Kind::Tool, h) if h == host_id => Some(id),
            _ => None,
        });
        let Some(id) = ours else { return };
        st.waiting.remove(&id);
        log!(self, "tools/call request {id} cancelled by the host");
        self.write(&cancelled(id, "cancelled by the host"));
    }

    /// `tools/call` for the host's `tool_call`, `prompts/get` (arguments parsed
    /// from the text) for its `command_invoked`; cancelled when the host gives up.
    fn call(&self, kind: Kind, host_id: &str, name: &str, args: Option<&Value>) {
        let mut st = lock(&self.state);
        let host_id = host_id.to_string();
        let [what, _, _, call_method] = kind.names();
        let Some((server_name, declared)) = st.lists[kind as usize].registered.get(name) else {
            let e = format!("MCP server has no {what} {name:?}");
            return self.emit(&mut st, answer(kind, host_id, Err(e)));
        };
        let arguments = match (kind, args) {
            (Kind::Prompt, _) => {
                let text = args.and_then(Value::as_str).unwrap_or("");
                prompt_arguments(declared, text).map(Value::Object)
            }
            (Kind::Tool, None | Some(Value::Null)) => Ok(json!({})),
            (Kind::Tool, Some(obj @ Value::Object(_))) => Ok(obj.clone()),
            (Kind::Tool, Some(_)) => Err("MCP tool arguments must be a JSON object".into()),
        };
        match arguments {
            Ok(arguments) => {
                let params = json!({"name": server_name, "arguments": arguments});
                let waiting = Waiting::Call(kind, host_id);
                let id = self.request(&mut st, call_method, params, waiting);
                self.after(self.timeout(kind), id);
            }
            Err(e) => self.emit(&mut st, answer(kind, host_id, Err(e))),
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

/// `notifications/message` -> a note (SPEC 11).
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
        let structured_content = result
            .as_ref()
            .ok()
            .and_then(|r| r.get("structuredContent"));
        let structured_content = structured_content.filter(|s| !s.is_null()).cloned();
        let (content, is_error) = tool_content(result);
        return ExtFrame::ToolResult {
            id,
            content: Some(content),
            is_error: Some(is_error),
            structured_content,
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
        tool_name: None,
        tool_args: None,
        insert: None,
        display,
        open_panel: None,
        error,
    })
}

/// A `tools/call` result as content blocks and `is_error` (SPEC 11).
fn tool_content(result: Result<&Value, String>) -> (Vec<Value>, bool) {
    let result = match result {
        Ok(result) => result,
        Err(e) => return (vec![text_block(&e)], true),
    };
    let blocks = result["content"].as_array().into_iter().flatten();
    let mut content: Vec<Value> = blocks.map(zot_block).collect();
    if let (true, Some(structured)) = (content.is_empty(), result.get("structuredContent")) {
        content.push(text_block(&structured.to_string()));
    }
    (content, result["isError"] == true)
}

/// An MCP content block as zot's (SPEC 11).
fn zot_block(block: &Value) -> Value {
    let field = |b: &Value, key: &str| b[key].as_str().unwrap_or("").to_string();
    match block["type"].as_str().unwrap_or("") {
        "image" => json!({
            "type": "image",
            "mime_type": field(block, "mimeType"),
            "data": field(block, "data"),
        }),
        "audio" => text_block(&format!("[audio {}]", field(block, "mimeType"))),
        "resource_link" => text_block(&format!("[resource {}]", field(block, "uri"))),
        "resource" => match block["resource"]["text"].as_str() {
            Some(t) => text_block(t),
            None => text_block(&format!("[resource {}]", field(&block["resource"], "uri"))),
        },
        // Text, and anything unknown: the host's own mapping reports it.
        _ => block.clone(),
    }
}

/// The arguments of `/name args` for a prompt `declared` (name, required), as
/// SPEC 11 says; required ones are checked here (servers report them badly).
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
        let texts = ["[audio audio/wav]", "[resource file:///a]", "inside"];
        assert_eq!(content[..3], texts.map(text_block));
        assert_eq!(content[3], text_block("[resource file:///c]"));
        assert!(is_error);
    }
}
