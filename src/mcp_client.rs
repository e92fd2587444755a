//! MCP servers as extensions (SPEC 11): the host is the server's MCP
//! client, and this adapter translates at the frame layer so the host
//! loop never sees a second protocol.
//!
//! - Server -> host: the reader thread hands every JSON-RPC line to
//!   [`Adapter::from_server`], which answers what it can itself (the
//!   handshake, list pages, `ping`, refused server requests) and turns the
//!   rest into the [`ExtFrame`]s a zot extension would have sent.
//! - Host -> server: [`Adapter::from_host`] takes the frames the loop
//!   writes (`tool_call`, `command_invoked`, `shutdown`) and writes JSON-RPC.
//! - A timer thread fires the two deadlines only the adapter knows: the
//!   3 s `server/discover` probe and the cancellation of a request the
//!   host has given up on.
//!
//! Wire shapes follow the MCP specification (2025-11-25 lifecycle, tools,
//! prompts, logging, cancellation, pagination; 2026-07-28 `server/discover`,
//! the per-request `_meta` envelope and `subscriptions/listen`) as
//! implemented by the official Python SDK 2.x and TypeScript SDK.

use crate::log::ExtLog;
use crate::process::{Inbound, InboundMsg, OutChunk};
use crate::protocol::{check_depth, CommandResponse, ExtFrame, Line, LineReader, MAX_LINE};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Map, Value};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::io::{self, BufReader, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
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

/// One JSON-RPC request of ours that waits for its response.
enum Waiting {
    Discover,
    Initialize,
    Listen,
    Page(ListKind),
    Tool { host_id: String },
    Prompt { host_id: String },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ListKind {
    Tools,
    Prompts,
}

impl ListKind {
    fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
        }
    }

    fn field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
        }
    }
}

/// A list being fetched page by page.
#[derive(Default)]
struct Listing {
    items: Option<Vec<Value>>,
    /// A change was announced while this listing ran: list again after.
    again: bool,
    /// The cursors followed so far: a server that hands one out again
    /// would have the host list forever.
    cursors: Vec<String>,
}

/// A prompt as a command: its server name and declared arguments.
#[derive(Debug, Clone, PartialEq)]
struct PromptInfo {
    server_name: String,
    args: Vec<(String, bool)>,
}

#[derive(PartialEq, Eq)]
enum Phase {
    Probing,
    Initializing,
    Listing,
    Running,
}

struct State {
    next_id: u64,
    phase: Phase,
    modern: bool,
    waiting: HashMap<u64, Waiting>,
    /// Registered tool name -> the server's name.
    tools: BTreeMap<String, String>,
    prompts: BTreeMap<String, PromptInfo>,
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

/// What the timer thread fires.
enum Timer {
    Probe(u64),
    Cancel(u64, &'static str, Duration),
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
    timer: Sender<(Instant, Timer)>,
    state: Mutex<State>,
}

/// Creates the adapter for a freshly spawned server, starts its timer
/// thread and sends the `server/discover` probe.
pub fn start(
    key: u64,
    opts: McpOptions,
    log: ExtLog,
    inbound: Sender<InboundMsg>,
    stdin: Sender<OutChunk>,
    queued: Arc<AtomicUsize>,
) -> io::Result<Arc<Adapter>> {
    let (timer_tx, timer_rx) = crossbeam_channel::unbounded();
    let name = opts.name.clone();
    let adapter = Arc::new(Adapter {
        key,
        opts,
        log,
        inbound,
        stdin: Mutex::new(Some(stdin)),
        queued,
        timer: timer_tx,
        state: Mutex::new(State {
            next_id: 0,
            phase: Phase::Probing,
            modern: false,
            waiting: HashMap::new(),
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            listings: Default::default(),
            held: Vec::new(),
            held_notes: VecDeque::new(),
            dropped_notes: 0,
            server_version: None,
            refused_initialize: None,
        }),
    });
    let weak = Arc::downgrade(&adapter);
    std::thread::Builder::new()
        .name(format!("zot-mcp-{name}"))
        .stack_size(64 * 1024)
        .spawn(move || run_timer(&weak, &timer_rx))?;
    let mut st = adapter.lock();
    // The probe carries the 2026-07-28 envelope: without it the official
    // Python SDK server answers -32601 and locks the stream to legacy.
    let id = adapter.request(
        &mut st,
        "server/discover",
        json!({}),
        Waiting::Discover,
        true,
    );
    adapter.after(PROBE_TIMEOUT, Timer::Probe(id));
    drop(st);
    Ok(adapter)
}

/// The reader thread of an MCP server: stdout lines -> [`Adapter::from_server`].
pub fn read(adapter: &Adapter, stdout: impl Read) {
    let mut lines = LineReader::new(BufReader::with_capacity(8 * 1024, stdout), MAX_LINE);
    loop {
        let line = match lines.next_line() {
            Ok(Some(Line::Text(line))) => line,
            Ok(Some(Line::TooLong(len))) => {
                let why = format!("dropped a {len}-byte line: longer than {MAX_LINE} bytes");
                adapter.log.line(&why);
                let _ = adapter.inbound.send(InboundMsg {
                    key: adapter.key,
                    msg: Inbound::Unparsed(why),
                });
                continue;
            }
            Ok(None) => break,
            Err(e) => {
                adapter.log.line(&format!("reading stdout failed: {e}"));
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if !adapter.from_server(&line) {
            break;
        }
    }
    let _ = adapter.inbound.send(InboundMsg {
        key: adapter.key,
        msg: Inbound::Eof,
    });
}

fn run_timer(adapter: &Weak<Adapter>, rx: &Receiver<(Instant, Timer)>) {
    // Every request schedules a cancellation that usually outlives its
    // answer, so thousands may be pending: a heap, earliest first (the
    // sequence number keeps equal instants apart).
    let mut due: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut timers: HashMap<u64, Timer> = HashMap::new();
    let mut seq = 0u64;
    loop {
        let got = match due.peek() {
            Some(Reverse((at, _))) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok((at, timer)) => {
                seq += 1;
                due.push(Reverse((at, seq)));
                timers.insert(seq, timer);
            }
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        let mut fired = Vec::new();
        while let Some(&Reverse((at, n))) = due.peek() {
            if at > now {
                break;
            }
            due.pop();
            fired.extend(timers.remove(&n));
        }
        if fired.is_empty() {
            continue;
        }
        let Some(adapter) = adapter.upgrade() else {
            return;
        };
        for timer in fired {
            adapter.fire(timer);
        }
    }
}

impl Adapter {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-updated in a way
        // that matters more than stopping the server would.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes one JSON-RPC message to the server's stdin. False when
    /// stdin is closed.
    fn write(&self, msg: &Value) -> bool {
        let stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = stdin.as_ref() else {
            return false;
        };
        let mut line = serde_json::to_vec(msg).unwrap_or_default();
        line.push(b'\n');
        let len = line.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if tx.send(line).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Closes the server's stdin (the MCP stdio shutdown) once every
    /// queued line is written.
    pub fn close_stdin(&self) {
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn emit(&self, st: &mut State, frame: ExtFrame) {
        if st.phase == Phase::Running {
            self.send_inbound(frame);
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

    fn send_inbound(&self, frame: ExtFrame) {
        let _ = self.inbound.send(InboundMsg {
            key: self.key,
            msg: Inbound::Frame(frame),
        });
    }

    fn after(&self, delay: Duration, timer: Timer) {
        let at = Instant::now().checked_add(delay);
        if let Some(at) = at {
            let _ = self.timer.send((at, timer));
        }
    }

    /// The `_meta` envelope every 2026-07-28 request carries.
    fn envelope(&self) -> Value {
        json!({
            META_VERSION: MODERN_VERSION,
            META_CAPABILITIES: {},
            META_CLIENT_INFO: {"name": "zot", "version": self.opts.client_version},
        })
    }

    /// Sends a request and records what its response is for.
    fn request(
        &self,
        st: &mut State,
        method: &str,
        mut params: Value,
        waiting: Waiting,
        modern: bool,
    ) -> u64 {
        st.next_id += 1;
        let id = st.next_id;
        if modern {
            let mut meta = self.envelope();
            // 2026-07-28 servers send log messages only to requests that
            // opt in; legacy servers send them all, so ask for all.
            if matches!(waiting, Waiting::Tool { .. } | Waiting::Prompt { .. }) {
                meta[META_LOG_LEVEL] = json!("debug");
            }
            params["_meta"] = meta;
        }
        st.waiting.insert(id, waiting);
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn fire(&self, timer: Timer) {
        let mut st = self.lock();
        match timer {
            Timer::Probe(id) => {
                // The probe stays outstanding: a slow server (an SDK still
                // importing) may answer it after all, and that answer wins.
                if st.phase == Phase::Probing && st.waiting.contains_key(&id) {
                    self.log.line(&format!(
                        "server/discover: no answer within {} s; trying the legacy initialize",
                        PROBE_TIMEOUT.as_secs()
                    ));
                    self.initialize(&mut st);
                }
            }
            Timer::Cancel(id, method, after) => {
                if st.waiting.remove(&id).is_some() {
                    let reason = format!("timed out after {}", human(after));
                    self.log
                        .line(&format!("{method} request {id} {reason}: cancelled"));
                    self.write(&json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": reason},
                    }));
                }
            }
        }
    }

    fn initialize(&self, st: &mut State) {
        st.phase = Phase::Initializing;
        let params = json!({
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "zot", "version": self.opts.client_version},
        });
        self.request(st, "initialize", params, Waiting::Initialize, false);
    }

    /// Handles one line from the server. False when reading should stop
    /// (the handshake failed).
    pub fn from_server(&self, line: &[u8]) -> bool {
        let msg: Value = match check_depth(line)
            .and_then(|()| serde_json::from_slice::<Value>(line).map_err(|e| e.to_string()))
        {
            Ok(Value::Object(map)) => Value::Object(map),
            Ok(_) => return self.dropped(line, "not a JSON object"),
            Err(e) => return self.dropped(line, &e),
        };
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id").filter(|id| !id.is_null());
        match (method, id) {
            (Some(method), Some(id)) => self.server_request(method, id.clone()),
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
        let why = format!("dropped MCP message ({why}): {snippet}");
        self.log.line(&why);
        // As for a zot extension's bad line: `zot ext check` names it.
        let _ = self.inbound.send(InboundMsg {
            key: self.key,
            msg: Inbound::Unparsed(why),
        });
        true
    }

    /// Requests from the server: `ping` is answered; everything else
    /// (sampling, elicitation, roots) is refused: the host declares none
    /// of those capabilities.
    fn server_request(&self, method: &str, id: Value) {
        let reply = if method == "ping" {
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        } else {
            self.log.line(&format!(
                "refused the server's {method} request: zot declares no client capabilities"
            ));
            json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": METHOD_NOT_FOUND,
                "message": format!("Method not found: {method} (zot declares no client capabilities)"),
            }})
        };
        self.write(&reply);
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        let mut st = self.lock();
        match method {
            "notifications/message" => {
                let Some(note) = params.and_then(note_from_log) else {
                    return self
                        .log
                        .line("dropped notifications/message without a level");
                };
                self.emit(&mut st, note);
            }
            "notifications/tools/list_changed" => self.relist(&mut st, ListKind::Tools),
            "notifications/prompts/list_changed" => self.relist(&mut st, ListKind::Prompts),
            "notifications/subscriptions/acknowledged" => {
                let honored = params.and_then(|p| p.get("notifications"));
                self.log.line(&format!(
                    "subscriptions/listen acknowledged: {}",
                    honored.map_or_else(|| "{}".into(), Value::to_string)
                ));
            }
            _ => {}
        }
    }

    /// A list changed: fetch it again, or again after the running fetch.
    fn relist(&self, st: &mut State, kind: ListKind) {
        self.log
            .line(&format!("{} changed: listing it again", kind.field()));
        if st.phase != Phase::Running {
            // The initial listing has not finished; make it run once more.
            if st.phase == Phase::Listing {
                st.listings[kind as usize].again = true;
            }
            return;
        }
        let listing = &mut st.listings[kind as usize];
        if listing.items.is_some() {
            listing.again = true;
        } else {
            self.list(st, kind, None);
        }
    }

    fn list(&self, st: &mut State, kind: ListKind, cursor: Option<&str>) {
        let listing = &mut st.listings[kind as usize];
        match cursor {
            None => {
                listing.items = Some(Vec::new());
                listing.again = false;
                listing.cursors.clear();
            }
            Some(c) => listing.cursors.push(c.to_string()),
        }
        let params = match cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let modern = st.modern;
        self.request(st, kind.method(), params, Waiting::Page(kind), modern);
    }

    fn response(&self, id: &Value, msg: &Value) -> bool {
        let mut st = self.lock();
        let Some(waiting) = id.as_u64().and_then(|n| st.waiting.remove(&n)) else {
            self.log.line(&format!(
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
                let why = result
                    .err()
                    .unwrap_or_else(|| "closed by the server".into());
                self.log.line(&format!("subscriptions/listen ended: {why}"));
            }
            Waiting::Page(kind) => self.page(&mut st, kind, result),
            Waiting::Tool { host_id } => {
                let (content, is_error) = match result.and_then(complete) {
                    Ok(r) => tool_content(r),
                    Err(e) => (vec![json!({"type": "text", "text": e})], true),
                };
                self.emit(
                    &mut st,
                    ExtFrame::ToolResult {
                        id: host_id,
                        content: Some(content),
                        is_error: Some(is_error),
                    },
                );
            }
            Waiting::Prompt { host_id } => {
                let answer = match result.and_then(complete) {
                    Ok(r) => prompt_answer(r),
                    Err(e) => Err(e),
                };
                self.emit(&mut st, command_frame(host_id, answer));
            }
        }
        true
    }

    fn discovered(&self, st: &mut State, result: Result<&Value, String>) {
        let late = st.phase == Phase::Initializing;
        if st.phase != Phase::Probing && !late {
            return;
        }
        let modern = result.as_ref().ok().and_then(|r| {
            let supported = r.get("supportedVersions")?.as_array()?;
            supported.iter().any(|v| v == MODERN_VERSION).then_some(*r)
        });
        let Some(result) = modern else {
            if let Some(why) = st.refused_initialize.take() {
                return self.handshake_failed(why);
            }
            if late {
                return; // initialize is on its way already
            }
            let why = match result {
                Err(e) => e,
                Ok(_) => format!("{MODERN_VERSION} is not among its supportedVersions"),
            };
            self.log.line(&format!(
                "server/discover: {why}; using the legacy initialize ({LEGACY_VERSION})"
            ));
            return self.initialize(st);
        };
        if late {
            // Its answer to initialize (an error from a 2026-only server)
            // no longer matters.
            st.waiting.retain(|_, w| !matches!(w, Waiting::Initialize));
            st.refused_initialize = None;
        }
        st.modern = true;
        // The official SDKs put the identity in `_meta`; the
        // specification page shows a `serverInfo` field: take either.
        st.server_version = [
            "/_meta/io.modelcontextprotocol~1serverInfo/version",
            "/serverInfo/version",
        ]
        .iter()
        .find_map(|at| result.pointer(at)?.as_str())
        .map(str::to_string);
        self.log
            .line(&format!("speaking MCP {MODERN_VERSION} (server/discover)"));
        // The 2026 era announces list changes only on a listen stream.
        let filter =
            json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}});
        self.request(st, "subscriptions/listen", filter, Waiting::Listen, true);
        self.list_all(st, result.get("capabilities"));
    }

    fn initialized(&self, st: &mut State, result: Result<&Value, String>) -> bool {
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                let why = format!("initialize failed: {e}");
                let probing = st.waiting.values().any(|w| matches!(w, Waiting::Discover));
                if probing {
                    self.log
                        .line(&format!("{why}; waiting for the server/discover answer"));
                    st.refused_initialize = Some(why);
                    return true;
                }
                self.handshake_failed(why);
                return false;
            }
        };
        let version = result.get("protocolVersion").and_then(Value::as_str);
        self.log.line(&format!(
            "speaking MCP {} (initialize)",
            version.unwrap_or("of unknown version")
        ));
        st.server_version = result
            .pointer("/serverInfo/version")
            .and_then(Value::as_str)
            .map(str::to_string);
        self.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        self.list_all(st, result.get("capabilities"));
        true
    }

    /// The host fails the server with `why` (not the EOF that follows)
    /// and kills its process group.
    fn handshake_failed(&self, why: String) {
        self.log.line(&why);
        let _ = self.inbound.send(InboundMsg {
            key: self.key,
            msg: Inbound::Failed(why),
        });
    }

    /// Fetches the tools and prompts the server declares (both when it
    /// declares no capabilities at all).
    fn list_all(&self, st: &mut State, caps: Option<&Value>) {
        st.phase = Phase::Listing;
        let has = |key: &str| caps.is_none_or(|c| c.get(key).is_some());
        let mut any = false;
        for kind in [ListKind::Tools, ListKind::Prompts] {
            if has(kind.field()) {
                any = true;
                self.list(st, kind, None);
            }
        }
        if !any {
            self.finish_startup(st);
        }
    }

    fn page(&self, st: &mut State, kind: ListKind, result: Result<&Value, String>) {
        let listing = &mut st.listings[kind as usize];
        let Some(items) = listing.items.as_mut() else {
            return;
        };
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                self.log
                    .line(&format!("{}: {e}; keeping what was listed", kind.method()));
                listing.items = None;
                return self.listed(st);
            }
        };
        if let Some(list) = result.get(kind.field()).and_then(Value::as_array) {
            items.extend(list.iter().cloned());
        }
        let next = result.get("nextCursor").and_then(Value::as_str);
        let next = next.filter(|c| !c.is_empty()).filter(|c| {
            let repeated = listing.cursors.iter().any(|seen| seen == c);
            let why = if repeated {
                format!("the server repeated the cursor {c:?}")
            } else if listing.cursors.len() + 1 >= MAX_PAGES {
                format!("stopped after {MAX_PAGES} pages")
            } else {
                return true;
            };
            self.log.line(&format!(
                "{}: {why}; keeping the {} listed",
                kind.method(),
                items.len()
            ));
            false
        });
        match next {
            Some(cursor) => {
                let cursor = cursor.to_string();
                self.list(st, kind, Some(&cursor));
            }
            None => {
                let items = listing.items.take().unwrap_or_default();
                let again = std::mem::take(&mut listing.again);
                match kind {
                    ListKind::Tools => self.apply_tools(st, items),
                    ListKind::Prompts => self.apply_prompts(st, items),
                }
                if again && st.phase == Phase::Running {
                    self.list(st, kind, None);
                } else if again {
                    st.listings[kind as usize].again = true;
                }
                self.listed(st);
            }
        }
    }

    /// After a list completed: the first time both are in, say hello.
    fn listed(&self, st: &mut State) {
        let busy = st.listings.iter().any(|l| l.items.is_some());
        if st.phase == Phase::Listing && !busy {
            self.finish_startup(st);
        }
    }

    /// Sends what a zot extension sends on start: `hello`, its
    /// registrations (and notes that came meanwhile), `ready`.
    fn finish_startup(&self, st: &mut State) {
        st.phase = Phase::Running;
        self.send_inbound(ExtFrame::Hello {
            name: self.opts.name.clone(),
            version: st.server_version.clone(),
            capabilities: None,
        });
        for frame in std::mem::take(&mut st.held) {
            self.send_inbound(frame);
        }
        if st.dropped_notes > 0 {
            self.log.line(&format!(
                "dropped {} notes sent before the handshake ended (the oldest; {HELD_NOTES} kept)",
                st.dropped_notes
            ));
        }
        for frame in std::mem::take(&mut st.held_notes) {
            self.send_inbound(frame);
        }
        self.send_inbound(ExtFrame::Ready);
        // Changes announced during the first listing.
        for kind in [ListKind::Tools, ListKind::Prompts] {
            if std::mem::take(&mut st.listings[kind as usize].again) {
                self.list(st, kind, None);
            }
        }
    }

    fn apply_tools(&self, st: &mut State, items: Vec<Value>) {
        let mut now = BTreeMap::new();
        for tool in items {
            let Some(server_name) = tool.get("name").and_then(Value::as_str) else {
                self.log.line("tools/list: skipped a tool without a name");
                continue;
            };
            let name = format!("{}{server_name}", self.opts.prefix);
            let description =
                text_field(&tool, "description").or_else(|| text_field(&tool, "title"));
            let schema = tool.get("inputSchema").filter(|s| s.is_object()).cloned();
            self.emit(
                st,
                ExtFrame::RegisterTool {
                    name: name.clone(),
                    description,
                    schema,
                },
            );
            now.insert(name, server_name.to_string());
        }
        for gone in st
            .tools
            .keys()
            .filter(|n| !now.contains_key(*n))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.emit(st, ExtFrame::UnregisterTool { name: gone });
        }
        st.tools = now;
    }

    fn apply_prompts(&self, st: &mut State, items: Vec<Value>) {
        let mut now = BTreeMap::new();
        for prompt in items {
            let Some(server_name) = prompt.get("name").and_then(Value::as_str) else {
                self.log
                    .line("prompts/list: skipped a prompt without a name");
                continue;
            };
            let name = format!("{}{server_name}", self.opts.prefix);
            let description =
                text_field(&prompt, "description").or_else(|| text_field(&prompt, "title"));
            let args = prompt
                .get("arguments")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|a| {
                            let name = a.get("name")?.as_str()?.to_string();
                            let required = a.get("required").and_then(Value::as_bool);
                            Some((name, required.unwrap_or(false)))
                        })
                        .collect()
                })
                .unwrap_or_default();
            self.emit(
                st,
                ExtFrame::RegisterCommand {
                    name: name.clone(),
                    description,
                },
            );
            let info = PromptInfo {
                server_name: server_name.to_string(),
                args,
            };
            now.insert(name, info);
        }
        for gone in st
            .prompts
            .keys()
            .filter(|n| !now.contains_key(*n))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.emit(st, ExtFrame::UnregisterCommand { name: gone });
        }
        st.prompts = now;
    }

    /// Handles a chunk of frames the host loop wrote for this extension.
    /// False when stdin is closed.
    pub fn from_host(&self, chunk: &[u8]) -> bool {
        if self
            .stdin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            return false;
        }
        for line in chunk.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(frame) = serde_json::from_slice::<Value>(line) else {
                continue; // the host's own frames always parse
            };
            let str_of = |key: &str| frame.get(key).and_then(Value::as_str).unwrap_or("");
            match str_of("type") {
                "tool_call" => self.call_tool(str_of("id"), str_of("name"), frame.get("args")),
                "command_invoked" => self.get_prompt(str_of("id"), str_of("name"), str_of("args")),
                // MCP's stdio shutdown is closing stdin; acknowledging at
                // once lets the host do that and start its grace period.
                "shutdown" => self.send_inbound(ExtFrame::ShutdownAck),
                // hello_ack; events, intercepts and panels never apply.
                _ => {}
            }
        }
        true
    }

    fn call_tool(&self, host_id: &str, name: &str, args: Option<&Value>) {
        let mut st = self.lock();
        let fail = |text: String| ExtFrame::ToolResult {
            id: host_id.to_string(),
            content: Some(vec![json!({"type": "text", "text": text})]),
            is_error: Some(true),
        };
        let Some(server_name) = st.tools.get(name).cloned() else {
            return self.emit(&mut st, fail(format!("MCP server has no tool {name:?}")));
        };
        let arguments = match args {
            None | Some(Value::Null) => json!({}),
            Some(obj @ Value::Object(_)) => obj.clone(),
            Some(_) => {
                let why = "MCP tool arguments must be a JSON object".to_string();
                return self.emit(&mut st, fail(why));
            }
        };
        let modern = st.modern;
        let waiting = Waiting::Tool {
            host_id: host_id.to_string(),
        };
        let params = json!({"name": server_name, "arguments": arguments});
        let id = self.request(&mut st, "tools/call", params, waiting, modern);
        let after = self.opts.tool_timeout;
        self.after(after, Timer::Cancel(id, "tools/call", after));
    }

    fn get_prompt(&self, host_id: &str, name: &str, args: &str) {
        let mut st = self.lock();
        let Some(prompt) = st.prompts.get(name).cloned() else {
            let frame = command_frame(
                host_id.into(),
                Err(format!("MCP server has no prompt {name:?}")),
            );
            return self.emit(&mut st, frame);
        };
        let arguments = match prompt_arguments(&prompt.args, args) {
            Ok(a) => a,
            Err(e) => return self.emit(&mut st, command_frame(host_id.into(), Err(e))),
        };
        let modern = st.modern;
        let waiting = Waiting::Prompt {
            host_id: host_id.to_string(),
        };
        let params = json!({"name": prompt.server_name, "arguments": arguments});
        let id = self.request(&mut st, "prompts/get", params, waiting, modern);
        let after = self.opts.command_timeout;
        self.after(after, Timer::Cancel(id, "prompts/get", after));
    }
}

fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn text_field(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// `MCP error -32602: Invalid params`.
fn describe_error(e: &Value) -> String {
    let code = e.get("code").and_then(Value::as_i64);
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("(no message)");
    match code {
        Some(code) => format!("MCP error {code}: {message}"),
        None => format!("MCP error: {message}"),
    }
}

/// A final result, or why it is not: a 2026-07-28 server that needs
/// input first (`input_required`) asks for sampling, elicitation or
/// roots, none of which zot provides (the 2026 form of the server
/// requests refused with -32601).
fn complete(result: &Value) -> Result<&Value, String> {
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(result),
        Some(other) => {
            let wanted: Vec<&str> = result
                .get("inputRequests")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|requests| requests.values())
                .filter_map(|r| r.get("method")?.as_str())
                .collect();
            let wanted = if wanted.is_empty() {
                String::new()
            } else {
                format!(" ({})", wanted.join(", "))
            };
            Err(format!(
                "the MCP server answered with resultType {other:?}{wanted}, \
                 which zot does not provide"
            ))
        }
    }
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
    let message = match params.get("logger").and_then(Value::as_str) {
        Some(logger) if !logger.is_empty() => format!("{logger}: {data}"),
        _ => data,
    };
    Some(ExtFrame::Notify {
        level: Some(level.into()),
        message,
    })
}

/// A `tools/call` result as zot content blocks and `is_error` (SPEC 11).
fn tool_content(result: &Value) -> (Vec<Value>, bool) {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let blocks = result.get("content").and_then(Value::as_array);
    let mut content: Vec<Value> = blocks.into_iter().flatten().map(map_block).collect();
    if content.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            content.push(json!({"type": "text", "text": structured.to_string()}));
        }
    }
    (content, is_error)
}

fn map_block(block: &Value) -> Value {
    let text = |t: String| json!({"type": "text", "text": t});
    let field = |b: &Value, key: &str| b.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    match block.get("type").and_then(Value::as_str).unwrap_or("") {
        "image" => json!({
            "type": "image",
            "mime_type": field(block, "mimeType"),
            "data": field(block, "data"),
        }),
        "audio" => text(format!("[audio {}]", field(block, "mimeType"))),
        "resource_link" => text(format!("[resource {}]", field(block, "uri"))),
        "resource" => {
            let resource = block.get("resource").unwrap_or(&Value::Null);
            match resource.get("text").and_then(Value::as_str) {
                Some(t) => text(t.to_string()),
                None => text(format!("[resource {}]", field(resource, "uri"))),
            }
        }
        // Text, and anything unknown: the host's own mapping reports it.
        _ => block.clone(),
    }
}

/// A `prompts/get` result as the text of a `prompt` action: its user
/// messages' text, joined by blank lines.
fn prompt_answer(result: &Value) -> Result<String, String> {
    let messages = result.get("messages").and_then(Value::as_array);
    let texts: Vec<&str> = messages
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .filter_map(|m| {
            let content = m.get("content")?;
            (content.get("type")?.as_str()? == "text").then_some(())?;
            content.get("text")?.as_str()
        })
        .collect();
    Ok(texts.join("\n\n"))
}

fn command_frame(id: String, answer: Result<String, String>) -> ExtFrame {
    let (action, prompt, display, error) = match answer {
        Ok(text) if !text.is_empty() => ("prompt", Some(text), None, None),
        Ok(_) => (
            "display",
            None,
            Some("(the prompt has no user message)".into()),
            None,
        ),
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

/// The arguments of `/name args` for a prompt declaring `declared`
/// (name, required) (SPEC 11): a JSON object; else nothing for a prompt
/// without arguments, the whole text for one with a single argument,
/// `key=value` pairs (values may be double-quoted) for several. Required
/// arguments are checked here: servers report them badly.
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
    } else if declared.len() == 1 {
        if !args.is_empty() {
            map.insert(declared[0].0.clone(), Value::String(args.to_string()));
        }
    } else if declared.len() > 1 {
        for (k, v) in key_values(args)? {
            if !declared.iter().any(|(name, _)| *name == k) {
                return Err(format!(
                    "unknown argument `{k}` (arguments: {})",
                    usage(declared)
                ));
            }
            map.insert(k, Value::String(v));
        }
    }
    if let Some((missing, _)) = declared
        .iter()
        .find(|(n, req)| *req && !map.contains_key(n))
    {
        return Err(format!(
            "missing required argument `{missing}` (arguments: {})",
            usage(declared)
        ));
    }
    Ok(map)
}

/// `city=... [state=...]`.
fn usage(declared: &[(String, bool)]) -> String {
    let parts: Vec<String> = declared
        .iter()
        .map(|(n, req)| {
            if *req {
                format!("{n}=...")
            } else {
                format!("[{n}=...]")
            }
        })
        .collect();
    parts.join(" ")
}

/// `a=1 b="two words"` -> pairs; a word without `=` is an error.
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        if chars.next() != Some('=') || key.is_empty() {
            return Err(format!("expected key=value arguments, got `{key}`"));
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => {
                        if let Some(c) = chars.next() {
                            value.push(c);
                        }
                    }
                    Some(c) => value.push(c),
                    None => return Err(format!("unterminated quote in the value of `{key}`")),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        pairs.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(list: &[(&str, bool)]) -> Vec<(String, bool)> {
        list.iter().map(|(n, r)| (n.to_string(), *r)).collect()
    }

    #[test]
    fn prompt_argument_rules() {
        let none = declared(&[]);
        assert!(prompt_arguments(&none, "whatever text").unwrap().is_empty());
        let one = declared(&[("topic", true)]);
        assert_eq!(
            prompt_arguments(&one, "  rust async  ").unwrap()["topic"],
            "rust async"
        );
        let err = prompt_arguments(&one, "").unwrap_err();
        assert!(err.contains("missing required argument `topic`"), "{err}");
        let two = declared(&[("city", true), ("state", false)]);
        let got = prompt_arguments(&two, r#"city="New York" state=NY"#).unwrap();
        assert_eq!(
            (&got["city"], &got["state"]),
            (&json!("New York"), &json!("NY"))
        );
        let got = prompt_arguments(&two, r#"{"city": "Paris", "state": 3}"#).unwrap();
        assert_eq!(
            (&got["city"], &got["state"]),
            (&json!("Paris"), &json!("3"))
        );
        let err = prompt_arguments(&two, "state=NY").unwrap_err();
        assert!(err.contains("missing required argument `city`"), "{err}");
        assert!(prompt_arguments(&two, "Paris")
            .unwrap_err()
            .contains("key=value"));
        assert!(prompt_arguments(&two, "x=1 city=a")
            .unwrap_err()
            .contains("unknown argument `x`"));
        assert!(prompt_arguments(&two, "city=\"a")
            .unwrap_err()
            .contains("unterminated"));
    }

    #[test]
    fn content_mapping() {
        let (content, is_error) = tool_content(&json!({"content": [
            {"type": "text", "text": "t"},
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "file:///c", "blob": "aGk="}},
        ], "isError": true}));
        assert!(is_error);
        assert_eq!(
            content,
            [
                json!({"type": "text", "text": "t"}),
                json!({"type": "image", "mime_type": "image/png", "data": "aGk="}),
                json!({"type": "text", "text": "[audio audio/wav]"}),
                json!({"type": "text", "text": "[resource file:///a]"}),
                json!({"type": "text", "text": "inside"}),
                json!({"type": "text", "text": "[resource file:///c]"}),
            ]
        );
        let (content, is_error) = tool_content(&json!({"structuredContent": {"t": 1}}));
        assert_eq!(
            (content, is_error),
            (vec![json!({"type": "text", "text": "{\"t\":1}"})], false)
        );
    }

    #[test]
    fn log_levels() {
        let level = |l: &str| match note_from_log(&json!({"level": l, "data": "d"})) {
            Some(ExtFrame::Notify { level, .. }) => level.unwrap_or_default(),
            _ => String::new(),
        };
        for (mcp, zot) in [
            ("debug", "info"),
            ("info", "info"),
            ("notice", "info"),
            ("warning", "warn"),
            ("error", "error"),
            ("critical", "error"),
            ("emergency", "error"),
        ] {
            assert_eq!(level(mcp), zot, "{mcp}");
        }
        let Some(ExtFrame::Notify { message, .. }) =
            note_from_log(&json!({"level": "info", "logger": "db", "data": {"rows": 2}}))
        else {
            panic!("no note");
        };
        assert_eq!(message, r#"db: {"rows":2}"#);
    }
}
