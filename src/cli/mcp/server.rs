//! The state `zot mcp` shares between its threads, and the one place
//! that writes to the client.
//!
//! Ordering (docs/PROTOCOL.md#ordering): the host loop sends an extension's notes to the
//! event channel before it calls the reply for that extension's answer.
//! Events are only ever taken off that channel while the state lock is
//! held, and every reply drains the channel under the lock before it
//! writes; so a note written before a tool result reaches the client
//! before the result, and a 2026 request that opted in to log messages
//! is still in flight while its notes are judged.
//!
//! Lines for the client are appended to a buffer in the state, under
//! the lock, and the writer thread is woken only after the lock is
//! released: waking it while holding the lock would, on a busy CPU,
//! let it run while every other thread waits for the lock.
//!
//! Nothing here blocks on the host while holding the lock: replies run
//! on the host loop (the main thread) and take the same lock.
//!
//! Bounds (docs/PROTOCOL.md#limits-and-bounds, [`crate::cli::bounds`]): every line for the client
//! counts as unwritten until the writer wrote it, and the stdin reader
//! waits only while that is over the limit; requests served by the host
//! are at most `MAX_IN_FLIGHT`, beyond which one waits, as the line it
//! came as, until an earlier one is answered (then it is read again and
//! served from the host loop); only one that would overflow that queue
//! is refused at once.

use super::era::{self, Level};
use crate::cli::bounds::{self, Admit, Slots, Unwritten};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use zot_host::internal::jsonrpc::{self, Id, Message, RpcError};
use zot_host::{HostEvent, HostHandle, Request, Snapshot, Ticket};

/// Notes kept for a legacy client until `notifications/initialized`.
pub const BUFFERED_NOTES: usize = 100;

/// `subscriptions/listen` streams open at once, at most: each is kept
/// until the end and costs a notification per list change.
pub const MAX_LISTENS: usize = 64;

/// How far the legacy handshake got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handshake {
    None,
    Initializing,
    Initialized,
}

/// A `subscriptions/listen` stream (2026-07-28).
struct Listen {
    id: Id,
    tools: bool,
    prompts: bool,
}

/// What the tool and prompt lists looked like when last compared.
#[derive(PartialEq)]
struct Lists {
    tools: Vec<Value>,
    prompts: Vec<Value>,
}

struct State {
    ready: bool,
    /// Host requests that arrived before startup readiness, in order.
    deferred: Vec<Request>,
    handshake: Handshake,
    /// A 2026-07-28 request was served: notes nobody asked for are dropped.
    modern_seen: bool,
    /// Legacy `logging/setLevel` (default: everything).
    legacy_level: Level,
    buffered: VecDeque<(Level, Note)>,
    dropped_notes: u64,
    /// Notes dropped because the client did not read fast enough.
    unread_dropped: u64,
    /// Requests being served, by id key.
    in_flight: HashMap<String, InFlight>,
    /// The in-flight slots, and the requests waiting for one: each its
    /// id key and the line it came as.
    slots: Slots<(String, Vec<u8>)>,
    /// Requests that hold a slot and are being read (id keys): they are
    /// in flight once [`Server::begin`] takes them.
    handed: HashSet<String>,
    /// The graceful stop, held until no request waits for a slot.
    stop: Vec<Request>,
    listens: Vec<Listen>,
    lists: Option<Lists>,
    /// Lines not yet taken by the writer thread.
    out: Vec<u8>,
    /// Bytes of `out` and of what the writer took and has not written.
    unwritten: Arc<Unwritten>,
    /// Set at the end: the writer stops once `out` is empty.
    closed: bool,
}

/// A request the host is serving.
struct InFlight {
    /// The log level it opted in to (2026-07-28).
    log: Option<Level>,
    /// The client cancelled it: its answer is dropped when it comes. It
    /// stays until then, so its id is not taken by a new request that
    /// would get its answer.
    cancelled: bool,
    /// A tool call: what the host cancels it by (docs/PROTOCOL.md#cancellation).
    ticket: Option<Ticket>,
    /// It holds an in-flight slot, freed when it is answered.
    slot: bool,
}

/// Shared by the stdin thread, the main thread and the replies.
#[derive(Clone)]
pub struct Server {
    state: Arc<Mutex<State>>,
    events: Receiver<HostEvent>,
    host: HostHandle,
    /// Wakes the writer thread (one pending wake is enough).
    wake: Sender<()>,
    unwritten: Arc<Unwritten>,
    session_started: Arc<AtomicBool>,
    session_ended: Arc<AtomicBool>,
    /// Serves a request that waited for a slot: the method table's
    /// entry point, handed in by its caller so this file stays below it.
    serve: Serve,
}

/// Serves request `id` (`method` with `params`); true when it took its
/// slot and will be answered from the host loop.
pub type Serve = fn(&Server, Id, &str, Map<String, Value>) -> bool;

impl Server {
    pub fn new(
        events: Receiver<HostEvent>,
        host: HostHandle,
        wake: Sender<()>,
        serve: Serve,
    ) -> Server {
        let unwritten = Arc::new(Unwritten::default());
        Server {
            state: Arc::new(Mutex::new(State {
                ready: false,
                deferred: Vec::new(),
                handshake: Handshake::None,
                modern_seen: false,
                legacy_level: Level::Debug,
                buffered: VecDeque::new(),
                dropped_notes: 0,
                unread_dropped: 0,
                in_flight: HashMap::new(),
                slots: Slots::default(),
                handed: HashSet::new(),
                stop: Vec::new(),
                listens: Vec::new(),
                lists: None,
                out: Vec::new(),
                unwritten: unwritten.clone(),
                closed: false,
            })),
            events,
            host,
            wake,
            unwritten,
            session_started: Arc::new(AtomicBool::new(false)),
            session_ended: Arc::new(AtomicBool::new(false)),
            serve,
        }
    }

    /// Locks the state after handling every event already emitted, so
    /// whatever the caller writes next comes after them. Returns the
    /// requests to submit once the lock is released.
    fn lock(&self) -> (MutexGuard<'_, State>, Vec<Request>, bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut submit = Vec::new();
        let ended = loop {
            match self.events.try_recv() {
                Ok(event) => self.on_event(&mut state, event, &mut submit),
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
        };
        (state, submit, ended)
    }

    /// Releases the lock, then wakes the writer if there is output and
    /// submits whatever the events asked for.
    fn unlock(&self, state: MutexGuard<'_, State>, submit: Vec<Request>) {
        let wake = !state.out.is_empty() || state.closed;
        drop(state);
        if wake {
            let _ = self.wake.try_send(());
        }
        for request in submit {
            self.host.submit(request);
        }
    }

    /// Runs `f` under the lock, after the events emitted so far.
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (mut state, submit, _) = self.lock();
        let r = f(&mut state);
        self.unlock(state, submit);
        r
    }

    /// Handles the events emitted so far; true once the host has ended.
    pub fn pump(&self) -> bool {
        let (state, submit, ended) = self.lock();
        self.unlock(state, submit);
        ended
    }

    /// For the writer thread: the lines written so far, and whether
    /// that is the end. It calls [`Server::written`] once they are out.
    pub fn take_output(&self) -> (Vec<u8>, bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (std::mem::take(&mut state.out), state.closed)
    }

    /// For the writer thread: `n` bytes taken are written (or stdout is gone).
    pub fn written(&self, n: usize) {
        self.unwritten.written(n);
    }

    /// For the stdin reader: waits while the client does not read.
    pub fn wait_for_room(&self) {
        self.unwritten.wait_for_room(|| {
            let line = Unwritten::not_reading("zot mcp");
            let _ = writeln!(std::io::stderr(), "{line}");
        });
    }

    /// Nothing more will be written: the writer ends once it took all.
    pub fn close(&self) {
        self.with(|s| s.closed = true);
    }

    /// Writes a response now (not tracked as in flight).
    pub fn respond(&self, id: &Id, result: Result<Value, RpcError>) {
        self.with(|s| write(s, &answer(id, result)));
    }

    /// A request the host serves, read as `line`: true when it holds
    /// an in-flight slot now (serve it, then [`Server::begin`] or
    /// [`Server::unused`]); false when it waits for one, or was answered
    /// (its id is in use, or the queue is full).
    pub fn admit(&self, id: &Id, line: Vec<u8>) -> bool {
        self.with(|s| {
            if s.id_in_use(id) {
                return false;
            }
            let key = id.key().to_string();
            let len = line.len();
            match s.slots.admit(Some(key.clone()), len, (key.clone(), line)) {
                Admit::Now(_) => s.handed.insert(key),
                Admit::Queued => false,
                Admit::Full(_) => {
                    let error = RpcError::new(jsonrpc::SERVER_BUSY, bounds::queue_full());
                    write(s, &answer::<()>(id, Err(error)));
                    false
                }
            }
        })
    }

    /// Request `id`, admitted, was answered at once: its slot is free.
    pub fn unused(&self, id: &Id) {
        if self.with(|s| s.handed.remove(id.key())) {
            self.release();
        }
    }

    /// A slot is free: the next waiting request takes it and is served
    /// (from here, the host loop), and once none waits the held stop
    /// is submitted.
    fn release(&self) {
        loop {
            let next = self.with(|s| {
                let (key, line) = s.slots.release()?;
                s.handed.insert(key.clone());
                Some((key, line))
            });
            let Some((key, line)) = next else { break };
            // It parsed before: it parses again the same way.
            let served = match Message::parse(&line) {
                Ok(Message::Request(r)) => (self.serve)(self, r.id, &r.method, r.params),
                _ => false,
            };
            if served {
                break;
            }
            self.with(|s| s.handed.remove(&key));
        }
        let stop = self.with(|s| match s.slots.nothing_waits() {
            true => std::mem::take(&mut s.stop),
            false => Vec::new(),
        });
        for request in stop {
            self.submit(request);
        }
    }

    /// Submits a request of the graceful stop once no request waits.
    pub fn after_waiting(&self, request: Request) {
        let now = self.with(|s| {
            if s.slots.nothing_waits() {
                return Some(request);
            }
            s.stop.push(request);
            None
        });
        if let Some(request) = now {
            self.submit(request);
        }
    }

    /// Records request `id` as in flight (with the log level it opted
    /// in to) and sends `request` to the host, or holds it until startup
    /// readiness. One that went through [`Server::admit`] holds its slot
    /// until answered.
    pub fn begin(&self, id: &Id, log: Option<Level>, request: Request) {
        let ticket = match &request {
            Request::Cancellable { ticket, .. } => Some(*ticket),
            _ => None,
        };
        let now = self.with(|s| {
            let slot = s.handed.remove(id.key());
            if !slot && s.id_in_use(id) {
                return None;
            }
            let cancelled = false;
            let request_state = InFlight {
                log,
                cancelled,
                ticket,
                slot,
            };
            s.in_flight.insert(id.key().into(), request_state);
            s.hold_until_ready(request)
        });
        if let Some(request) = now {
            self.host.submit(request);
        }
    }

    /// Writes the response of an in-flight request, unless the client
    /// cancelled it (then nothing is ever sent).
    pub fn finish(&self, id: &Id, result: Result<Value, RpcError>) {
        let slot = self.with(|s| {
            let request = s.in_flight.remove(id.key());
            if request.as_ref().is_some_and(|r| !r.cancelled) {
                write(s, &answer(id, result));
            }
            request.is_some_and(|r| r.slot)
        });
        if slot {
            self.release();
        }
    }

    /// `notifications/cancelled`: the request it names is never
    /// answered (its entry stays until the host answers it; one still
    /// waiting for a slot leaves the queue), or the listen stream it
    /// names ends.
    pub fn cancel(&self, id: &Id) {
        let ticket = self.with(|s| {
            if s.slots.cancel(id.key()).is_some() {
                return None;
            }
            s.listens.retain(|l| l.id != *id);
            let request = s.in_flight.get_mut(id.key())?;
            let first = !std::mem::replace(&mut request.cancelled, true);
            request.ticket.filter(|_| first)
        });
        // A tool call is abandoned: its extension gets `tool_cancel`.
        if let Some(ticket) = ticket {
            self.submit(Request::Cancel {
                ticket,
                reply: Box::new(|_| {}),
            });
        }
    }

    /// A ticket to submit a cancellable tool call under.
    pub fn ticket(&self) -> Ticket {
        self.host.ticket()
    }

    /// Sends a request to the host, or holds it until startup readiness
    /// so the first `tools/list` sees every extension that made it.
    pub fn submit(&self, request: Request) {
        if let Some(request) = self.with(|s| s.hold_until_ready(request)) {
            self.host.submit(request);
        }
    }

    /// True the first time: `session_start` is emitted once.
    pub fn start_session(&self) -> bool {
        !self.session_started.swap(true, Ordering::Relaxed)
    }

    /// At the end (EOF, a signal): `session_end` once, if the session
    /// started, queued before the shutdown that follows (docs/PROTOCOL.md#events).
    pub fn end_session(&self) {
        let started = self.session_started.load(Ordering::Relaxed);
        if started && !self.session_ended.swap(true, Ordering::Relaxed) {
            let mut payload = zot_host::EventPayload::default();
            payload.extra.insert("reason".into(), "shutdown".into());
            self.after_waiting(Request::Emit {
                event: "session_end".into(),
                payload,
                reply: Box::new(|_| {}),
            });
        }
    }

    /// `initialize` was answered: notes wait for `notifications/initialized`.
    pub fn initializing(&self) {
        self.with(|s| {
            if s.handshake == Handshake::None {
                s.handshake = Handshake::Initializing;
            }
        });
    }

    /// `notifications/initialized`: the buffered notes go out.
    pub fn initialized(&self) {
        self.with(|s| {
            s.handshake = Handshake::Initialized;
            if s.dropped_notes > 0 {
                diagnostic(&format!(
                    "{} notes dropped before the client was initialized (at most {BUFFERED_NOTES} are kept)",
                    s.dropped_notes
                ));
                s.dropped_notes = 0;
            }
            for (level, note) in std::mem::take(&mut s.buffered) {
                if level >= s.legacy_level {
                    write(s, &note);
                }
            }
        });
    }

    /// A 2026-07-28 request was seen.
    pub fn modern(&self) {
        self.with(|s| s.modern_seen = true);
    }

    /// `logging/setLevel`.
    pub fn set_level(&self, level: Level) {
        self.with(|s| s.legacy_level = level);
    }

    /// Opens a listen stream and acknowledges it.
    pub fn listen(&self, id: &Id, tools: bool, prompts: bool) {
        self.with(|s| {
            if s.id_in_use(id) {
                return;
            }
            if s.listens.len() == MAX_LISTENS {
                let why =
                    format!("invalid request: at most {MAX_LISTENS} listen streams may be open");
                let error = RpcError::new(jsonrpc::INVALID_REQUEST, why);
                return write(s, &answer::<()>(id, Err(error)));
            }
            s.listens.push(Listen {
                id: id.clone(),
                tools,
                prompts,
            });
            let mut honored = Map::new();
            if tools {
                honored.insert("toolsListChanged".into(), true.into());
            }
            if prompts {
                honored.insert("promptsListChanged".into(), true.into());
            }
            let mut fields = Map::new();
            fields.insert("notifications".into(), honored.into());
            let method = "notifications/subscriptions/acknowledged";
            let params = subscription(fields, id, None);
            write(s, &Message::<_, ()>::notification(method, Some(params)));
        });
    }

    /// At the end: how many notes were dropped for a slow client.
    pub fn report_dropped(&self) {
        self.with(|s| {
            if s.unread_dropped > 0 {
                diagnostic(&format!(
                    "{} notes dropped: they came faster than the client read them",
                    s.unread_dropped
                ));
            }
        });
    }

    /// At the end: answer every open listen request (the server's way
    /// to close a subscription gracefully).
    pub fn close_listens(&self) {
        self.with(|s| {
            for l in std::mem::take(&mut s.listens) {
                let mut fields = Map::new();
                fields.insert("resultType".into(), "complete".into());
                let result = subscription(fields, &l.id, Some(era::server_info()));
                write(s, &answer(&l.id, Ok(result)));
            }
        });
    }

    fn on_event(&self, s: &mut State, event: HostEvent, submit: &mut Vec<Request>) {
        match event {
            HostEvent::Notify {
                extension,
                level,
                message,
            } => self.note(s, &extension, level.as_str(), message),
            HostEvent::HostNote { level, message } => self.note(s, "zot", level.as_str(), message),
            // The host's own budget: notes came faster than we took them.
            HostEvent::EventsDropped { count } => dropped(s, count),
            // No panels and no prompt queue over MCP (upstream ignores
            // `submit` without an interactive editor too).
            HostEvent::ClearNotes { .. } => {}
            #[cfg(feature = "panels")]
            HostEvent::OpenPanel { .. }
            | HostEvent::PanelRender { .. }
            | HostEvent::PanelClose { .. }
            | HostEvent::Submit { .. }
            | HostEvent::SubmitSlash { .. } => {}
            #[cfg(feature = "ext-calls")]
            HostEvent::BuiltinCall { .. } => {}
            HostEvent::Ready { .. } => {
                s.ready = true;
                submit.append(&mut s.deferred);
                submit.push(self.relist());
            }
            // Registrations, exits, failures, restarts: the lists may
            // have changed; compare them.
            _ => submit.push(self.relist()),
        }
    }

    fn note(&self, s: &mut State, extension: &str, level: &str, message: String) {
        let level = Level::of_note(level);
        let params = json!({"level": level.name(), "logger": extension, "data": message});
        let note = Message::notification("notifications/message", Some(params));
        // 2026-07-28: only while a request that opted in is in flight.
        let live = s.in_flight.values().filter(|r| !r.cancelled);
        if live.filter_map(|r| r.log).any(|min| level >= min) {
            return write_note(s, &note);
        }
        match s.handshake {
            Handshake::Initialized if level >= s.legacy_level => write_note(s, &note),
            Handshake::Initialized => {}
            Handshake::None if s.modern_seen => {}
            Handshake::None | Handshake::Initializing => {
                if s.buffered.len() == BUFFERED_NOTES {
                    s.buffered.pop_front();
                    s.dropped_notes += 1;
                }
                s.buffered.push_back((level, note));
            }
        }
    }

    /// A `List` request whose answer is compared with the lists the
    /// client was last told about.
    fn relist(&self) -> Request {
        let server = self.clone();
        Request::List {
            reply: Box::new(move |snapshot| {
                if let Ok(snapshot) = snapshot {
                    server.with(|s| server.compare(s, &snapshot));
                }
            }),
        }
    }

    fn compare(&self, s: &mut State, snapshot: &Snapshot) {
        let now = Lists {
            tools: super::mapping::tools(snapshot),
            prompts: super::mapping::prompts(snapshot),
        };
        let Some(before) = s.lists.take() else {
            s.lists = Some(now);
            return; // the first look: nothing to compare with
        };
        let (tools, prompts) = (before.tools != now.tools, before.prompts != now.prompts);
        s.lists = Some(now);
        if tools {
            list_changed(s, "notifications/tools/list_changed", |l| l.tools);
        }
        if prompts {
            list_changed(s, "notifications/prompts/list_changed", |l| l.prompts);
        }
    }
}

impl State {
    /// Whether `id` belongs to a request in flight or an open listen
    /// stream; if so the client is told (an answer to a second request
    /// with that id could not be told from the first one's).
    fn id_in_use(&mut self, id: &Id) -> bool {
        let key = id.key();
        let used = self.in_flight.contains_key(key)
            || self.slots.waits(key)
            || self.handed.contains(key)
            || self.listens.iter().any(|l| l.id == *id);
        if used {
            let why = format!("invalid request: id {id} is already used by a request in flight");
            write(
                self,
                &answer::<()>(id, Err(RpcError::new(jsonrpc::INVALID_REQUEST, why))),
            );
        }
        used
    }

    /// `request` when the host is ready for it, else `None` (held).
    fn hold_until_ready(&mut self, request: Request) -> Option<Request> {
        if self.ready {
            return Some(request);
        }
        self.deferred.push(request);
        None
    }
}

/// A note for the client (`notifications/message`).
type Note = Message<Value, ()>;

/// The response to `id`.
fn answer<R: Serialize>(id: &Id, result: Result<R, RpcError>) -> Message<(), R> {
    Message::response(id.clone(), result)
}

/// Appends one message line for the client.
fn write(s: &mut State, message: &impl Serialize) {
    let before = s.out.len();
    // Serialising a `Value` (or one beside an `Id`) cannot fail.
    let _ = serde_json::to_writer(&mut s.out, message);
    s.out.push(b'\n');
    s.unwritten.add(s.out.len() - before);
}

/// Appends a note for the client, unless more than the unwritten limit
/// already waits for it: then the note is dropped and counted.
fn write_note(s: &mut State, note: &Note) {
    if s.unwritten.over() {
        return dropped(s, 1);
    }
    write(s, note);
}

/// Counts notes dropped for a client that reads too slowly; stderr says
/// so once when it first happens and gives the total at the end (one
/// line each: a stderr nobody reads must not fill up either).
fn dropped(s: &mut State, count: u64) {
    if s.unread_dropped == 0 {
        diagnostic(
            "notes come faster than the client reads them: some are dropped \
             (the total is given at exit)",
        );
    }
    s.unread_dropped += count;
}

/// Tells the client that a list changed: a legacy client directly, each
/// 2026 listen stream that asked for it with its subscription id.
fn list_changed(s: &mut State, method: &str, wants: impl Fn(&Listen) -> bool) {
    if s.handshake != Handshake::None {
        write(s, &Message::<(), ()>::notification(method, None));
    }
    let ids: Vec<Id> = s
        .listens
        .iter()
        .filter(|l| wants(l))
        .map(|l| l.id.clone())
        .collect();
    for id in &ids {
        let params = subscription(Map::new(), id, None);
        write(s, &Message::<_, ()>::notification(method, Some(params)));
    }
}

/// `fields` and a `_meta` naming the listen stream `id` (2026-07-28).
fn subscription(
    fields: Map<String, Value>,
    id: &Id,
    server_info: Option<Value>,
) -> WithSubscription<'_> {
    let meta = SubscriptionMeta {
        server_info,
        subscription_id: id,
    };
    WithSubscription { fields, meta }
}

/// `fields` with `_meta` naming a listen stream by its id (2026-07-28),
/// and the server's identity when `server_info` is given.
#[derive(Serialize)]
struct WithSubscription<'a> {
    #[serde(flatten)]
    fields: Map<String, Value>,
    #[serde(rename = "_meta")]
    meta: SubscriptionMeta<'a>,
}

#[derive(Serialize)]
struct SubscriptionMeta<'a> {
    #[serde(
        rename = "io.modelcontextprotocol/serverInfo",
        skip_serializing_if = "Option::is_none"
    )]
    server_info: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/subscriptionId")]
    subscription_id: &'a Id,
}

/// One line on stderr; a closed stderr is no reason to stop serving.
pub fn diagnostic(message: &str) {
    let _ = writeln!(std::io::stderr(), "zot mcp: {message}");
}
