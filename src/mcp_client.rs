//! MCP servers as extensions (SPEC 11): the host is the server's MCP
//! client, and this adapter translates at the frame layer so the host
//! loop never sees a second protocol. The reader thread hands it the
//! server's JSON-RPC lines ([`Adapter::from_server`]), the host loop the
//! frames it writes ([`Adapter::from_host`]); a timer thread fires the 3 s
//! `server/discover` probe limit and the cancellation of requests the host
//! gave up on. Wire shapes follow the MCP specification (2025-11-25, and
//! 2026-07-28 for `server/discover`, `_meta` and `subscriptions/listen`)
//! as the official Python SDK 2.x and TypeScript SDK implement it.

use crate::log::ExtLog;
use crate::process::{Inbound, InboundMsg, OutChunk};
use crate::protocol::{parse_json, CommandResponse, ExtFrame};
use crate::toolresult::text_block;
use crate::types::human;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// The stateless revision probed first.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The revision offered by the legacy `initialize` fallback.
pub const LEGACY_VERSION: &str = "2025-11-25";
/// Notes kept while the handshake runs (as `zot mcp` keeps notes until
/// its client is initialized); older ones are dropped and counted.
const HELD_NOTES: usize = 100;
/// Pages followed for one list: a server whose cursors never end would
/// have the host list forever.
const MAX_PAGES: usize = 1000;
/// How long the `server/discover` probe may go unanswered.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const METHOD_NOT_FOUND: i64 = -32601;

/// How an MCP server extension is run.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// The manifest's name: what the host knows the extension as.
    pub name: String,
    /// Prepended to its tool and command names.
    pub prefix: String,
    /// `clientInfo.version`.
    pub client_version: String,
    /// After this, an unanswered `tools/call` is cancelled.
    pub tool_timeout: Duration,
    /// After this, an unanswered `prompts/get` is cancelled.
    pub command_timeout: Duration,
}

/// What a server lists: tools (registered as tools), prompts (as commands).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tool = 0,
    Prompt = 1,
}

const KINDS: [Kind; 2] = [Kind::Tool, Kind::Prompt];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Prompt => "prompt",
        }
    }

    fn call_method(self) -> &'static str {
        match self {
            Kind::Tool => "tools/call",
            Kind::Prompt => "prompts/get",
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

/// A list being fetched page by page.
#[derive(Default)]
struct Listing {
    items: Option<Vec<Value>>,
    /// A change was announced while this listing ran: list again after.
    again: bool,
    /// The cursors followed so far (one handed out again ends the list).
    cursors: Vec<String>,
}

/// A registered tool or prompt: its name on the server and, for a
/// prompt, its declared arguments (name, required).
struct Entry {
    server_name: String,
    args: Vec<(String, bool)>,
}

#[derive(Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Probing,
    Initializing,
    Listing,
    Running,
}

#[derive(Default)]
struct State {
    next_id: u64,
    phase: Phase,
    modern: bool,
    waiting: HashMap<u64, Waiting>,
    /// Per kind: registered name -> entry.
    registered: [BTreeMap<String, Entry>; 2],
    listings: [Listing; 2],
    /// Frames held until `hello` is sent, when the first listing is done
    /// (registrations, early notes).
    held: Vec<ExtFrame>,
    /// Notes that came before `hello`, at most [`HELD_NOTES`].
    held_notes: VecDeque<ExtFrame>,
    dropped_notes: usize,
    server_version: Option<String>,
    /// Why `initialize` failed while the probe was still unanswered: a
    /// 2026-only server refuses `initialize` and may say so before it
    /// answers the probe, so the probe's answer decides.
    refused_initialize: Option<String>,
}

/// The per-server translator; shared by the reader thread, the host
/// loop (through `ExtProcess::send`) and the timer thread.
pub struct Adapter {
    key: u64,
    opts: McpOptions,
    log: ExtLog,
    inbound: Sender<InboundMsg>,
    stdin: Mutex<Option<Sender<OutChunk>>>,
    queued: Arc<AtomicUsize>,
    /// When to look at which request again (the probe, a cancellation).
    timer: Sender<(Instant, u64)>,
    state: Mutex<State>,
}

/// Creates the adapter for a freshly spawned server, starts its timer
/// thread and sends the `server/discover` probe.
pub(crate) fn start(
    key: u64,
    opts: McpOptions,
    log: ExtLog,
    inbound: Sender<InboundMsg>,
    stdin: Sender<OutChunk>,
    queued: Arc<AtomicUsize>,
) -> io::Result<Arc<Adapter>> {
    let (timer, timer_rx) = crossbeam_channel::unbounded();
    let thread_name = format!("zot-mcp-{}", opts.name);
    let adapter = Arc::new(Adapter {
        key,
        opts,
        log,
        inbound,
        stdin: Mutex::new(Some(stdin)),
        queued,
        timer,
        state: Mutex::default(),
    });
    let weak = Arc::downgrade(&adapter);
    std::thread::Builder::new()
        .name(thread_name)
        .stack_size(64 * 1024)
        .spawn(move || run_timer(&weak, &timer_rx))?;
    let id = adapter.request(
        &mut adapter.lock(),
        "server/discover",
        json!({}),
        Waiting::Discover,
    );
    adapter.after(PROBE_TIMEOUT, id);
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
            Ok(timer) => {
                due.insert(timer);
            }
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let later = due.split_off(&(Instant::now(), u64::MAX));
        let fired = std::mem::replace(&mut due, later);
        if fired.is_empty() {
            continue;
        }
        let Some(adapter) = adapter.upgrade() else {
            return;
        };
        for (_, id) in fired {
            adapter.fire(id);
        }
    }
}

impl Adapter {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-updated in a way
        // that matters more than stopping the server would.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes one JSON-RPC message to the server's stdin, unless closed.
    fn write(&self, msg: &Value) {
        let stdin = self.stdin.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = stdin.as_ref() else {
            return;
        };
        let mut line = serde_json::to_vec(msg).unwrap_or_default();
        line.push(b'\n');
        let len = line.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if tx.send(line).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
        }
    }

    /// Closes the server's stdin (the MCP stdio shutdown) once every
    /// queued line is written.
    pub fn close_stdin(&self) {
        self.stdin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn log(&self, line: &str) {
        self.log.line(line);
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

    fn client_info(&self) -> Value {
        json!({"name": "zot", "version": self.opts.client_version})
    }

    /// Sends a request and records what its response is for.
    fn request(&self, st: &mut State, method: &str, mut params: Value, waiting: Waiting) -> u64 {
        st.next_id += 1;
        let id = st.next_id;
        // The probe carries the 2026-07-28 envelope: without it the official
        // Python SDK server answers -32601 and locks the stream to legacy.
        if st.modern || matches!(waiting, Waiting::Discover) {
            params["_meta"] = json!({
                META_VERSION: MODERN_VERSION,
                META_CAPABILITIES: {},
                META_CLIENT_INFO: self.client_info(),
            });
            // 2026-07-28 servers send log messages only to requests that
            // opt in; legacy servers send them all, so ask for all.
            if matches!(waiting, Waiting::Call(..)) {
                params["_meta"][META_LOG_LEVEL] = json!("debug");
            }
        }
        st.waiting.insert(id, waiting);
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// A timer is due: the probe's limit, or a request's cancellation.
    fn fire(&self, id: u64) {
        let mut st = self.lock();
        match st.waiting.get(&id) {
            // The probe stays outstanding: a slow server (an SDK still
            // importing) may answer it after all, and that answer wins.
            Some(Waiting::Discover) if st.phase == Phase::Probing => {
                self.log(&format!(
                    "server/discover: no answer within {} s; trying the legacy initialize",
                    PROBE_TIMEOUT.as_secs()
                ));
                self.initialize(&mut st);
            }
            // Initialize was refused while the probe was out, and the
            // probe has had another full limit: nothing will answer it.
            Some(Waiting::Discover) if st.refused_initialize.is_some() => {
                if let Some(why) = st.refused_initialize.take() {
                    self.handshake_failed(why);
                }
            }
            Some(&Waiting::Call(kind, _)) => {
                st.waiting.remove(&id);
                let reason = format!("timed out after {}", human(self.timeout(kind)));
                let method = kind.call_method();
                self.log(&format!("{method} request {id} {reason}: cancelled"));
                self.write(&json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": reason},
                }));
            }
            _ => {}
        }
    }

    fn timeout(&self, kind: Kind) -> Duration {
        match kind {
            Kind::Tool => self.opts.tool_timeout,
            Kind::Prompt => self.opts.command_timeout,
        }
    }

    fn initialize(&self, st: &mut State) {
        st.phase = Phase::Initializing;
        let params = json!({
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": self.client_info(),
        });
        self.request(st, "initialize", params, Waiting::Initialize);
    }

    /// Handles one line from the server. False when reading should stop
    /// (the handshake failed).
    pub fn from_server(&self, line: &[u8]) -> bool {
        let msg = match parse_json::<Value>(line) {
            Ok(msg) if msg.is_object() => msg,
            Ok(_) => return self.dropped(line, "not a JSON object"),
            Err(e) => return self.dropped(line, &e),
        };
        let id = msg.get("id").filter(|id| !id.is_null());
        match (msg["method"].as_str(), id) {
            (Some(method), Some(id)) => self.server_request(method, id),
            (Some(method), None) => self.notification(method, msg.get("params")),
            (None, Some(id)) => return self.response(id, &msg),
            (None, None) => {
                return self.dropped(line, "neither a request, a notification nor a response")
            }
        }
        true
    }

    fn dropped(&self, line: &[u8], why: &str) -> bool {
        let snippet = String::from_utf8_lossy(&line[..line.len().min(120)]);
        self.log(&format!("dropped MCP message ({why}): {snippet}"));
        true
    }

    /// Requests from the server: `ping` is answered, the rest (sampling,
    /// elicitation, roots) refused: the host declares none of those
    /// capabilities.
    fn server_request(&self, method: &str, id: &Value) {
        if method == "ping" {
            return self.write(&json!({"jsonrpc": "2.0", "id": id, "result": {}}));
        }
        self.log(&format!(
            "refused the server's {method} request: zot declares no client capabilities"
        ));
        let message = format!("Method not found: {method} (zot declares no client capabilities)");
        let error = json!({"code": METHOD_NOT_FOUND, "message": message});
        self.write(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        let mut st = self.lock();
        match method {
            "notifications/message" => match params.and_then(note_from_log) {
                Some(note) => self.emit(&mut st, note),
                None => self.log("dropped notifications/message without a level"),
            },
            "notifications/tools/list_changed" => self.relist(&mut st, Kind::Tool),
            "notifications/prompts/list_changed" => self.relist(&mut st, Kind::Prompt),
            "notifications/subscriptions/acknowledged" => {
                let honored = params.and_then(|p| p.get("notifications"));
                let honored = honored.map_or_else(|| "{}".into(), Value::to_string);
                self.log(&format!("subscriptions/listen acknowledged: {honored}"));
            }
            _ => {}
        }
    }

    fn response(&self, id: &Value, msg: &Value) -> bool {
        let mut st = self.lock();
        let Some(waiting) = id.as_u64().and_then(|n| st.waiting.remove(&n)) else {
            self.log(&format!(
                "dropped a response: id {id} is unknown, cancelled or already answered"
            ));
            return true;
        };
        let result = match (msg.get("result"), msg.get("error")) {
            (Some(r), _) => Ok(r),
            (None, Some(e)) => Err(describe_error(e)),
            (None, None) => Err("response without result or error".to_string()),
        };
        match waiting {
            Waiting::Discover => self.discovered(&mut st, result),
            Waiting::Initialize => return self.initialized(&mut st, result),
            Waiting::Listen => {
                let why = result.err();
                let why = why.unwrap_or_else(|| "closed by the server".into());
                self.log(&format!("subscriptions/listen ended: {why}"));
            }
            Waiting::Page(kind) => self.page(&mut st, kind, result),
            Waiting::Call(kind, host_id) => {
                let frame = answer(kind, host_id, result.and_then(complete));
                self.emit(&mut st, frame);
            }
        }
        true
    }

    fn discovered(&self, st: &mut State, result: Result<&Value, String>) {
        let modern = result.as_ref().ok().and_then(|r| {
            let supported = r.get("supportedVersions")?.as_array()?;
            supported.iter().any(|v| v == MODERN_VERSION).then_some(*r)
        });
        let result = match (modern, &st.phase) {
            (Some(r), Phase::Probing | Phase::Initializing) => r,
            (None, Phase::Probing) => {
                let not_listed = || format!("{MODERN_VERSION} is not among its supportedVersions");
                let why = result.err().unwrap_or_else(not_listed);
                self.log(&format!(
                    "server/discover: {why}; using the legacy initialize ({LEGACY_VERSION})"
                ));
                return self.initialize(st);
            }
            // Initialize is on its way already, unless it failed.
            (None, Phase::Initializing) => match st.refused_initialize.take() {
                Some(why) => return self.handshake_failed(why),
                None => return,
            },
            _ => return,
        };
        // Its answer to initialize (an error from a 2026-only server) no
        // longer matters.
        st.waiting.retain(|_, w| !matches!(w, Waiting::Initialize));
        st.refused_initialize = None;
        st.modern = true;
        // The official SDKs put the identity in `_meta`; the
        // specification page shows a `serverInfo` field: take either.
        let at = |pointer| result.pointer(pointer).and_then(Value::as_str);
        let version = at("/_meta/io.modelcontextprotocol~1serverInfo/version");
        st.server_version = version
            .or_else(|| at("/serverInfo/version"))
            .map(Into::into);
        self.log(&format!("speaking MCP {MODERN_VERSION} (server/discover)"));
        // The 2026 era announces list changes only on a listen stream.
        let filter =
            json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}});
        self.request(st, "subscriptions/listen", filter, Waiting::Listen);
        self.list_all(st, result.get("capabilities"));
    }

    fn initialized(&self, st: &mut State, result: Result<&Value, String>) -> bool {
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                let why = format!("initialize failed: {e}");
                let probe = st
                    .waiting
                    .iter()
                    .find(|(_, w)| matches!(w, Waiting::Discover));
                if let Some((&probe, _)) = probe {
                    self.log(&format!("{why}; waiting for the server/discover answer"));
                    st.refused_initialize = Some(why);
                    // Not forever: a probe still unanswered after one
                    // more limit fails the handshake with this reason.
                    self.after(PROBE_TIMEOUT, probe);
                    return true;
                }
                self.handshake_failed(why);
                return false;
            }
        };
        let version = result["protocolVersion"]
            .as_str()
            .unwrap_or("of unknown version");
        self.log(&format!("speaking MCP {version} (initialize)"));
        st.server_version = result["serverInfo"]["version"].as_str().map(Into::into);
        self.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        self.list_all(st, result.get("capabilities"));
        true
    }

    /// The host fails the server with `why` (not the EOF that follows)
    /// and kills its process group.
    fn handshake_failed(&self, why: String) {
        self.log(&why);
        self.report(Inbound::Failed(why));
    }

    /// Fetches the tools and prompts the server declares (both when it
    /// declares no capabilities at all).
    fn list_all(&self, st: &mut State, caps: Option<&Value>) {
        st.phase = Phase::Listing;
        for kind in KINDS {
            if caps.is_none_or(|c| c.get(format!("{}s", kind.name())).is_some()) {
                self.list(st, kind, None);
            }
        }
        self.listed(st);
    }

    /// A list changed: fetch it again, or again after the running fetch.
    fn relist(&self, st: &mut State, kind: Kind) {
        self.log(&format!("{}s changed: listing it again", kind.name()));
        let listing = &mut st.listings[kind as usize];
        if st.phase == Phase::Running && listing.items.is_none() {
            self.list(st, kind, None);
        } else if matches!(st.phase, Phase::Listing | Phase::Running) {
            listing.again = true;
        }
    }

    /// Requests a list's first page, or the page at `cursor`.
    fn list(&self, st: &mut State, kind: Kind, cursor: Option<String>) {
        let listing = &mut st.listings[kind as usize];
        let params = match cursor {
            Some(c) => {
                listing.cursors.push(c.clone());
                json!({"cursor": c})
            }
            None => {
                *listing = Listing {
                    items: Some(Vec::new()),
                    ..Listing::default()
                };
                json!({})
            }
        };
        let method = format!("{}s/list", kind.name());
        self.request(st, &method, params, Waiting::Page(kind));
    }

    fn page(&self, st: &mut State, kind: Kind, result: Result<&Value, String>) {
        let method = format!("{}s/list", kind.name());
        let listing = &mut st.listings[kind as usize];
        let Some(items) = listing.items.as_mut() else {
            return;
        };
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                self.log(&format!("{method}: {e}; keeping what was listed"));
                listing.items = None;
                return self.listed(st);
            }
        };
        let list = result[format!("{}s", kind.name())].as_array();
        items.extend(list.into_iter().flatten().cloned());
        let next = result["nextCursor"].as_str();
        let stop = match next.filter(|c| !c.is_empty()) {
            None => None,
            Some(c) if listing.cursors.iter().any(|seen| seen == c) => {
                Some(format!("the server repeated the cursor {c:?}"))
            }
            Some(_) if listing.cursors.len() + 1 >= MAX_PAGES => {
                Some(format!("stopped after {MAX_PAGES} pages"))
            }
            Some(c) => return self.list(st, kind, Some(c.to_string())),
        };
        if let Some(why) = stop {
            let n = items.len();
            self.log(&format!("{method}: {why}; keeping the {n} listed"));
        }
        let items = listing.items.take().unwrap_or_default();
        self.register(st, kind, items);
        if st.phase == Phase::Running && st.listings[kind as usize].again {
            self.list(st, kind, None);
        }
        self.listed(st);
    }

    /// After a listing ended: the first time none runs, start.
    fn listed(&self, st: &mut State) {
        if st.phase == Phase::Listing && st.listings.iter().all(|l| l.items.is_none()) {
            self.finish_startup(st);
        }
    }

    /// Sends what a zot extension sends on start: `hello`, its
    /// registrations (and notes that came meanwhile), `ready`.
    fn finish_startup(&self, st: &mut State) {
        st.phase = Phase::Running;
        self.report(Inbound::Frame(ExtFrame::Hello {
            name: self.opts.name.clone(),
            version: st.server_version.clone(),
            capabilities: None,
        }));
        if st.dropped_notes > 0 {
            self.log(&format!(
                "dropped {} notes sent before the handshake ended (the oldest; {HELD_NOTES} kept)",
                st.dropped_notes
            ));
        }
        let held = st.held.drain(..).chain(st.held_notes.drain(..));
        for frame in held.chain([ExtFrame::Ready]) {
            self.report(Inbound::Frame(frame));
        }
        // Changes announced during the first listing.
        for kind in KINDS {
            if st.listings[kind as usize].again {
                self.list(st, kind, None);
            }
        }
    }

    /// Registers a whole list, and unregisters what left it.
    fn register(&self, st: &mut State, kind: Kind, items: Vec<Value>) {
        let mut now = BTreeMap::new();
        for item in items {
            let Some(server_name) = item["name"].as_str() else {
                let what = kind.name();
                self.log(&format!("{what}s/list: skipped a {what} without a name"));
                continue;
            };
            let name = format!("{}{server_name}", self.opts.prefix);
            let text = |key: &str| item[key].as_str().filter(|s| !s.is_empty());
            let description = text("description")
                .or_else(|| text("title"))
                .map(Into::into);
            self.emit(
                st,
                match kind {
                    Kind::Tool => ExtFrame::RegisterTool {
                        name: name.clone(),
                        description,
                        schema: item.get("inputSchema").filter(|s| s.is_object()).cloned(),
                    },
                    Kind::Prompt => ExtFrame::RegisterCommand {
                        name: name.clone(),
                        description,
                    },
                },
            );
            let args = item["arguments"].as_array().into_iter().flatten();
            let args = args.filter_map(|a| {
                let required = a["required"].as_bool().unwrap_or(false);
                Some((a["name"].as_str()?.to_string(), required))
            });
            let (server_name, args) = (server_name.to_string(), args.collect());
            now.insert(name, Entry { server_name, args });
        }
        let before = std::mem::replace(&mut st.registered[kind as usize], now);
        for name in before.into_keys() {
            if !st.registered[kind as usize].contains_key(&name) {
                let frame = match kind {
                    Kind::Tool => ExtFrame::UnregisterTool { name },
                    Kind::Prompt => ExtFrame::UnregisterCommand { name },
                };
                self.emit(st, frame);
            }
        }
    }

    /// Handles a chunk of frames the host loop wrote for this extension.
    pub fn from_host(&self, chunk: &[u8]) {
        for line in chunk.split(|&b| b == b'\n') {
            let Ok(frame) = serde_json::from_slice::<Value>(line) else {
                continue; // the host's own frames always parse
            };
            let str_of = |key: &str| frame[key].as_str().unwrap_or("");
            let (id, name, args) = (str_of("id"), str_of("name"), frame.get("args"));
            match str_of("type") {
                "tool_call" => self.call(Kind::Tool, id, name, args),
                "command_invoked" => self.call(Kind::Prompt, id, name, args),
                // MCP's stdio shutdown is closing stdin; acknowledging at
                // once lets the host do that and start its grace period.
                "shutdown" => self.report(Inbound::Frame(ExtFrame::ShutdownAck)),
                // hello_ack; events, intercepts and panels never apply.
                _ => {}
            }
        }
    }

    /// `tools/call` for the host's `tool_call`, `prompts/get` for its
    /// `command_invoked`; cancelled when the host gives up on it.
    fn call(&self, kind: Kind, host_id: &str, name: &str, args: Option<&Value>) {
        let mut st = self.lock();
        let params = match st.registered[kind as usize].get(name) {
            None => Err(format!("MCP server has no {} {name:?}", kind.name())),
            Some(entry) => arguments(kind, &entry.args, args)
                .map(|arguments| json!({"name": entry.server_name, "arguments": arguments})),
        };
        let host_id = host_id.to_string();
        match params {
            Err(e) => self.emit(&mut st, answer(kind, host_id, Err(e))),
            Ok(params) => {
                let waiting = Waiting::Call(kind, host_id);
                let id = self.request(&mut st, kind.call_method(), params, waiting);
                self.after(self.timeout(kind), id);
            }
        }
    }
}

/// The `arguments` of a call: a tool's as the host gave them, a
/// prompt's parsed from the command's text.
fn arguments(
    kind: Kind,
    declared: &[(String, bool)],
    args: Option<&Value>,
) -> Result<Value, String> {
    match (kind, args) {
        (Kind::Tool, None | Some(Value::Null)) => Ok(json!({})),
        (Kind::Tool, Some(obj @ Value::Object(_))) => Ok(obj.clone()),
        (Kind::Tool, Some(_)) => Err("MCP tool arguments must be a JSON object".into()),
        (Kind::Prompt, _) => {
            let text = args.and_then(Value::as_str).unwrap_or("");
            prompt_arguments(declared, text).map(Value::Object)
        }
    }
}

/// `MCP error -32602: Invalid params`.
fn describe_error(e: &Value) -> String {
    let message = e["message"].as_str().unwrap_or("(no message)");
    match e["code"].as_i64() {
        Some(code) => format!("MCP error {code}: {message}"),
        None => format!("MCP error: {message}"),
    }
}

/// A final result, or why not: a 2026-07-28 `input_required` result asks
/// for sampling, elicitation or roots, which zot does not provide.
fn complete(result: &Value) -> Result<&Value, String> {
    let kind = result["resultType"].as_str();
    let Some(kind) = kind.filter(|k| *k != "complete") else {
        return Ok(result);
    };
    let requests = result["inputRequests"].as_object();
    let methods = requests.into_iter().flat_map(|r| r.values());
    let wanted: Vec<&str> = methods.filter_map(|r| r.get("method")?.as_str()).collect();
    let wanted = if wanted.is_empty() {
        String::new()
    } else {
        format!(" ({})", wanted.join(", "))
    };
    Err(format!(
        "the MCP server answered with resultType {kind:?}{wanted}, which zot does not provide"
    ))
}

/// `notifications/message` -> a note (SPEC 11).
fn note_from_log(params: &Value) -> Option<ExtFrame> {
    let level = match params.get("level")?.as_str()? {
        "debug" | "info" | "notice" => "info",
        "warning" => "warn",
        _ => "error",
    };
    let data = match params.get("data") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let message = match params["logger"].as_str() {
        Some(logger) if !logger.is_empty() => format!("{logger}: {data}"),
        _ => data,
    };
    let level = Some(level.into());
    Some(ExtFrame::Notify { level, message })
}

/// The frame answering the host's `tool_call` or `command_invoked`.
fn answer(kind: Kind, id: String, result: Result<&Value, String>) -> ExtFrame {
    if kind == Kind::Prompt {
        return command_frame(id, result.map(prompt_text));
    }
    let (content, is_error) = result.map_or_else(|e| (vec![text_block(&e)], true), tool_content);
    let (content, is_error) = (Some(content), Some(is_error));
    ExtFrame::ToolResult {
        id,
        content,
        is_error,
    }
}

/// A `tools/call` result as zot content blocks and `is_error` (SPEC 11).
fn tool_content(result: &Value) -> (Vec<Value>, bool) {
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let blocks = result["content"].as_array();
    let mut content: Vec<Value> = blocks.into_iter().flatten().map(map_block).collect();
    if let (true, Some(structured)) = (content.is_empty(), result.get("structuredContent")) {
        content.push(text_block(&structured.to_string()));
    }
    (content, is_error)
}

fn map_block(block: &Value) -> Value {
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

/// A `prompts/get` result as the text of a `prompt` action: its user
/// messages' text, joined by blank lines.
fn prompt_text(result: &Value) -> String {
    let messages = result["messages"].as_array();
    let texts: Vec<&str> = messages
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user" && m["content"]["type"] == "text")
        .filter_map(|m| m["content"]["text"].as_str())
        .collect();
    texts.join("\n\n")
}

fn command_frame(id: String, answer: Result<String, String>) -> ExtFrame {
    let (action, prompt, display, error) = match answer {
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
        insert: None,
        display,
        open_panel: None,
        error,
    })
}

/// The arguments of `/name args` for a prompt `declared` (name, required)
/// as SPEC 11 says; required ones are checked here (servers report them
/// badly).
fn prompt_arguments(declared: &[(String, bool)], args: &str) -> Result<Map<String, Value>, String> {
    let args = args.trim();
    let mut map = Map::new();
    if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(args) {
        for (k, v) in obj {
            let v = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            map.insert(k, Value::String(v));
        }
    } else if let [(only, _)] = declared {
        if !args.is_empty() {
            map.insert(only.clone(), args.into());
        }
    } else if !declared.is_empty() {
        for (k, v) in key_values(args)? {
            if !declared.iter().any(|(name, _)| *name == k) {
                let usage = usage(declared);
                return Err(format!("unknown argument `{k}` (arguments: {usage})"));
            }
            map.insert(k, Value::String(v));
        }
    }
    let missing = declared
        .iter()
        .find(|(n, req)| *req && !map.contains_key(n));
    if let Some((missing, _)) = missing {
        let usage = usage(declared);
        return Err(format!(
            "missing required argument `{missing}` (arguments: {usage})"
        ));
    }
    Ok(map)
}

/// `city=... [state=...]`.
fn usage(declared: &[(String, bool)]) -> String {
    let part = |(n, required): &(String, bool)| {
        if *required {
            format!("{n}=...")
        } else {
            format!("[{n}=...]")
        }
    };
    let parts: Vec<String> = declared.iter().map(part).collect();
    parts.join(" ")
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

    // What tests/mcp_ext.rs does not reach: the argument errors and the
    // audio and resource blocks (no server there sends those).
    #[test]
    fn prompt_argument_errors() {
        let two = [("city".to_string(), true), ("state".to_string(), false)];
        for (args, error) in [
            ("Paris", "expected key=value arguments, got `Paris`"),
            (
                "x=1 city=a",
                "unknown argument `x` (arguments: city=... [state=...])",
            ),
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
        let (content, is_error) = tool_content(&json!({"content": [
            {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "file:///c", "blob": "aGk="}},
        ], "isError": true}));
        let texts = [
            "[audio audio/wav]",
            "[resource file:///a]",
            "inside",
            "[resource file:///c]",
        ];
        assert_eq!(content, texts.map(text_block));
        assert!(is_error);
    }
}
