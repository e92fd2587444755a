//! The state `zot mcp` shares between its threads, and the one place
//! that writes to the client.
//!
//! Ordering (SPEC 3.17): the host loop sends an extension's notes to the
//! event channel before it calls the reply for that extension's answer.
//! Events are only ever taken off that channel while the state lock is
//! held, and every reply drains the channel under the lock before it
//! writes; so a note written before a tool result reaches the client
//! before the result, and a 2026 request that opted in to log messages
//! is still in flight while its notes are judged.
//!
//! Nothing here blocks on the host while holding the lock: replies run
//! on the host loop thread and take the same lock.

use super::era::{self, Level};
use super::jsonrpc::{self, id_key, RpcError};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use zot_host::{HostEvent, HostHandle, Request, Snapshot};

/// Notes kept for a legacy client until `notifications/initialized`.
pub const BUFFERED_NOTES: usize = 100;

/// How far the legacy handshake got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handshake {
    None,
    Initializing,
    Initialized,
}

/// A `subscriptions/listen` stream (2026-07-28).
struct Listen {
    id: Value,
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
    buffered: VecDeque<Value>,
    dropped_notes: u64,
    /// Requests being served, by id key: the log level each opted in to.
    in_flight: HashMap<String, Option<Level>>,
    listens: Vec<Listen>,
    lists: Option<Lists>,
    session_started: bool,
}

/// Shared by the stdin thread, the main thread and the replies.
#[derive(Clone)]
pub struct Server {
    state: Arc<Mutex<State>>,
    events: Receiver<HostEvent>,
    host: HostHandle,
    out: Sender<Vec<u8>>,
}

impl Server {
    pub fn new(events: Receiver<HostEvent>, host: HostHandle, out: Sender<Vec<u8>>) -> Server {
        Server {
            state: Arc::new(Mutex::new(State {
                ready: false,
                deferred: Vec::new(),
                handshake: Handshake::None,
                modern_seen: false,
                legacy_level: Level::Debug,
                buffered: VecDeque::new(),
                dropped_notes: 0,
                in_flight: HashMap::new(),
                listens: Vec::new(),
                lists: None,
                session_started: false,
            })),
            events,
            host,
            out,
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

    fn submit_all(&self, requests: Vec<Request>) {
        for request in requests {
            self.host.submit(request);
        }
    }

    /// Runs `f` under the lock (after pending events), then submits
    /// whatever the events asked for.
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (mut state, submit, _) = self.lock();
        let r = f(&mut state);
        drop(state);
        self.submit_all(submit);
        r
    }

    /// Handles the events emitted so far; true once the host has ended.
    pub fn pump(&self) -> bool {
        let (state, submit, ended) = self.lock();
        drop(state);
        self.submit_all(submit);
        ended
    }

    fn write(&self, value: &Value) {
        let mut line = serde_json::to_vec(value).unwrap_or_default();
        line.push(b'\n');
        let _ = self.out.send(line);
    }

    /// Writes a response now (not tracked as in flight).
    pub fn respond(&self, id: &Value, result: Result<Value, RpcError>) {
        let line = match result {
            Ok(r) => jsonrpc::result_line(id, r),
            Err(e) => jsonrpc::error_line(id, &e),
        };
        self.with(|_| self.write(&line));
    }

    /// Records a request as in flight before it goes to the host.
    pub fn begin(&self, id: &Value, log: Option<Level>) {
        self.with(|s| s.in_flight.insert(id_key(id), log));
    }

    /// Writes the response of an in-flight request, unless the client
    /// cancelled it (then nothing is ever sent).
    pub fn finish(&self, id: &Value, result: Result<Value, RpcError>) {
        self.with(|s| {
            if s.in_flight.remove(&id_key(id)).is_some() {
                let line = match result {
                    Ok(r) => jsonrpc::result_line(id, r),
                    Err(e) => jsonrpc::error_line(id, &e),
                };
                self.write(&line);
            }
        });
    }

    /// `notifications/cancelled`: forget the request or end the listen
    /// stream it names; neither is answered.
    pub fn cancel(&self, id: &Value) {
        self.with(|s| {
            s.in_flight.remove(&id_key(id));
            s.listens.retain(|l| l.id != *id);
        });
    }

    /// Sends a request to the host, or holds it until startup readiness
    /// so the first `tools/list` sees every extension that made it.
    pub fn submit(&self, request: Request) {
        let now = self.with(|s| {
            if s.ready {
                Some(request)
            } else {
                s.deferred.push(request);
                None
            }
        });
        if let Some(request) = now {
            self.host.submit(request);
        }
    }

    /// True the first time: `session_start` is emitted once.
    pub fn start_session(&self) -> bool {
        self.with(|s| !std::mem::replace(&mut s.session_started, true))
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
                eprintln!(
                    "zot mcp: {} notes dropped before the client was initialized (at most {BUFFERED_NOTES} are kept)",
                    s.dropped_notes
                );
                s.dropped_notes = 0;
            }
            for (level, note) in std::mem::take(&mut s.buffered).into_iter().map(split) {
                if level >= s.legacy_level {
                    self.write(&note);
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
    pub fn listen(&self, id: &Value, tools: bool, prompts: bool) {
        self.with(|s| {
            s.listens.push(Listen {
                id: id.clone(),
                tools,
                prompts,
            });
            let mut honored = serde_json::Map::new();
            if tools {
                honored.insert("toolsListChanged".into(), true.into());
            }
            if prompts {
                honored.insert("promptsListChanged".into(), true.into());
            }
            self.write(&jsonrpc::notification_line(
                "notifications/subscriptions/acknowledged",
                Some(json!({
                    "notifications": honored,
                    "_meta": {era::META_SUBSCRIPTION_ID: id},
                })),
            ));
        });
    }

    /// At the end: answer every open listen request (the server's way
    /// to close a subscription gracefully).
    pub fn close_listens(&self) {
        self.with(|s| {
            for l in std::mem::take(&mut s.listens) {
                let result = json!({
                    "resultType": "complete",
                    "_meta": {
                        era::META_SERVER_INFO: era::server_info(),
                        era::META_SUBSCRIPTION_ID: l.id,
                    },
                });
                self.write(&jsonrpc::result_line(&l.id, result));
            }
        });
    }

    fn on_event(&self, s: &mut State, event: HostEvent, submit: &mut Vec<Request>) {
        match event {
            HostEvent::Notify {
                extension,
                level,
                message,
            } => self.note(s, &extension, &level, message),
            HostEvent::ClearNotes { .. }
            | HostEvent::PanelRender { .. }
            | HostEvent::PanelClose { .. } => {}
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
        let note = jsonrpc::notification_line(
            "notifications/message",
            Some(json!({"level": level.name(), "logger": extension, "data": message})),
        );
        // 2026-07-28: only while a request that opted in is in flight.
        if s.in_flight.values().flatten().any(|min| level >= *min) {
            return self.write(&note);
        }
        match s.handshake {
            Handshake::Initialized if level >= s.legacy_level => self.write(&note),
            Handshake::Initialized => {}
            Handshake::None if s.modern_seen => {}
            Handshake::None | Handshake::Initializing => {
                if s.buffered.len() == BUFFERED_NOTES {
                    s.buffered.pop_front();
                    s.dropped_notes += 1;
                }
                s.buffered.push_back(note);
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
        let Some(before) = s.lists.replace(now) else {
            return; // the first look: nothing to compare with
        };
        let Some(now) = &s.lists else { return };
        if before.tools != now.tools {
            self.list_changed(s, "notifications/tools/list_changed", |l| l.tools);
        }
        if before.prompts != now.prompts {
            self.list_changed(s, "notifications/prompts/list_changed", |l| l.prompts);
        }
    }

    fn list_changed(&self, s: &State, method: &str, wants: impl Fn(&Listen) -> bool) {
        if s.handshake != Handshake::None {
            self.write(&jsonrpc::notification_line(method, None));
        }
        for l in s.listens.iter().filter(|l| wants(l)) {
            let params = json!({"_meta": {era::META_SUBSCRIPTION_ID: l.id}});
            self.write(&jsonrpc::notification_line(method, Some(params)));
        }
    }
}

/// A buffered note and its level.
fn split(note: Value) -> (Level, Value) {
    let level = note["params"]["level"]
        .as_str()
        .and_then(Level::parse)
        .unwrap_or(Level::Info);
    (level, note)
}
