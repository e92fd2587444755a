//! `zot rpc`: the JSON-lines control interface (docs/PROTOCOL.md#zot-rpc).
//!
//! stdin carries requests, stdout responses and events, one JSON object
//! per line; diagnostics go to stderr. Requests are submitted to the
//! host loop without waiting, so a slow tool call never delays a ping.
//!
//! The main thread runs the host loop: the stdin reader only submits
//! requests (and answers the few it can itself). Replies reach the main
//! thread on one channel, which it waits on while it runs the loop, and
//! events on the host's; it puts them in the order the host produced
//! them (docs/PROTOCOL.md#ordering, see `zot_host::order`) and hands the lines to the
//! thread that writes stdout ([`super::stdout`]), so a client that does
//! not read never stops the loop.
//!
//! Memory stays bounded whoever stops reading (docs/PROTOCOL.md#limits-and-bounds, see
//! [`super::bounds`]): answers wait for stdout up to a byte bound (over
//! it stdin is not read), at most `MAX_IN_FLIGHT` requests are served
//! at once (beyond it a request waits in a queue bounded in bytes and
//! starts when an earlier one is answered; only one that would overflow
//! the queue is answered at once with an error), and events wait within
//! the host's event budget (beyond it they are dropped and counted).
//!
//! Answers the host waits for (`builtin_result`, the panel requests an
//! interactive tool waits for) have slots and a queue of their own: the
//! tool calls in flight cannot keep out what they wait for.

// The panel requests (the `panels` feature).
#[cfg(feature = "panels")]
mod panels;

use super::bounds::{self, Admit, Slots, Unwritten};
use super::common::{json, CliError, HostOpts};
use super::stdout::Stdout;
use crossbeam_channel::{select, Receiver, Sender};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use zot_host::internal::protocol::{
    event_payload, field_twice, parse_json, Line, LineReader, MAX_LINE,
};
use zot_host::internal::surface;
use zot_host::order::{InOrder, Ordered};
use zot_host::{
    EventPayload, HostError, HostEvent, HostHandle, InterceptEvent, InterceptRequest, Request,
    Ticket, ToolRequest,
};

/// The tickets of the tool calls in flight, by request id: what
/// `cancel {target}` cancels (docs/PROTOCOL.md#cancellation). An entry leaves when its
/// request is answered or a cancel takes it.
type Tickets = Arc<Mutex<HashMap<String, Ticket>>>;

/// `zot rpc --help`.
pub const HELP: &str = "\
usage: zot rpc [-e PATH]... [--no-ext] [--cwd DIR] [--tool-timeout SECS] [--command-timeout SECS]
               [--startup-timeout SECS] [--hello-timeout SECS] [--provider NAME] [--model NAME]
               [--session-id ID] [--confine] [--trust-project] [--journal PATH]

Reads one JSON request per line on stdin and writes responses and events
as JSON lines on stdout. Requests: ping, list, command, tool_call, cancel,
builtin_result, intercept, event, panel_key, panel_resize, panel_close,
reload, resume, abandon, shutdown (the panel requests, builtin_result,
resume and abandon only in a build with their feature). EOF on stdin, `shutdown`, Ctrl-C and SIGTERM shut down
gracefully: requests already read are answered first (a second Ctrl-C
skips that wait).
";

/// Requests served at once, never queued: a `ping` is answered here, a
/// `cancel` is a cancellation (`shutdown` is handled apart).
const ALWAYS_SERVED: [&str; 2] = ["ping", "cancel"];

/// Requests that answer what the host waits for: a tool call in flight
/// may wait for one, so they have slots of their own.
const ANSWERS: [&str; 4] = ["builtin_result", "panel_key", "panel_resize", "panel_close"];

/// The slots a request of type `kind` takes, if any.
fn class_of(kind: &str) -> Option<Class> {
    match kind {
        _ if ALWAYS_SERVED.contains(&kind) => None,
        _ if ANSWERS.contains(&kind) => Some(Class::Answer),
        _ => Some(Class::Work),
    }
}

/// Which [`Slots`] a request takes.
#[derive(Clone, Copy)]
enum Class {
    Work = 0,
    Answer = 1,
}

/// The two classes' slots, and the stop that waits for their queues.
#[derive(Default)]
struct Waiting {
    /// Indexed by [`Class`]; a waiting request is its line as read.
    slots: [Slots<Vec<u8>>; 2],
    /// A graceful stop held until no request waits: it is answered
    /// after every request read before it.
    stop: Option<Request>,
}

impl Waiting {
    fn nothing_waits(&self) -> bool {
        self.slots.iter().all(Slots::nothing_waits)
    }
}

/// A line for stdout from a reply.
enum Out {
    /// A response, to be written after the first `after` events.
    Response { after: u64, line: Vec<u8> },
    /// The response to `shutdown`: written after everything else.
    Last(Vec<u8>),
}

/// Where replies go: the writer's channel, with the two bounds' counts.
#[derive(Clone)]
struct Output {
    tx: Sender<Out>,
    /// Rung after each reply: the main thread may be running the loop.
    bell: Sender<()>,
    /// Bytes of responses sent to the writer and not yet written.
    unwritten: Arc<Unwritten>,
    /// Requests submitted to the host and not yet answered by it, and
    /// those waiting for a slot.
    waiting: Arc<Mutex<Waiting>>,
    /// What `cancel` finds tool calls in flight by.
    tickets: Tickets,
    host: HostHandle,
}

impl Output {
    fn send(&self, out: Out) {
        let len = match &out {
            Out::Response { line, .. } => line.len(),
            Out::Last(_) => 0,
        };
        self.unwritten.add(len);
        if self.tx.send(out).is_err() {
            self.unwritten.written(len);
        }
        let _ = self.bell.try_send(());
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request of `class` was answered: the next one waiting for its
    /// slot starts, and once none waits a held stop is submitted.
    fn release(&self, class: Class) {
        loop {
            let Some(line) = self.waiting().slots[class as usize].release() else {
                break;
            };
            // It was read whole before: it parses again the same way.
            let started = match parse_request(&line) {
                Ok((id, kind, obj)) => start(&self.host, self, id, kind, obj),
                Err((id, why)) => {
                    respond(&self.host, self, id.as_deref(), "parse", Err(why));
                    false
                }
            };
            if started {
                break;
            }
        }
        let stop = {
            let mut waiting = self.waiting();
            match waiting.nothing_waits() {
                true => waiting.stop.take(),
                false => None,
            }
        };
        if let Some(stop) = stop {
            self.host.submit(stop);
        }
    }

    /// Submits a graceful stop once no request waits for a slot.
    fn stop_after_waiting(&self, stop: Request) {
        let mut waiting = self.waiting();
        if waiting.nothing_waits() {
            drop(waiting);
            return self.host.submit(stop);
        }
        waiting.stop = Some(stop);
    }
}

/// Runs the control interface until shutdown, EOF or a signal.
pub fn run(opts: HostOpts) -> Result<i32, CliError> {
    let host = super::common::start_host(&opts, |c| super::common::journal_origin(c, "rpc"))?;
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Out>();
    // What the main thread waits on while it runs the loop: a reply, or
    // the stdout thread's news (room again, stdout closed). The loop
    // selects on it with everything else.
    let (bell, rung) = crossbeam_channel::bounded(1);
    let out = Output {
        tx: out_tx,
        bell: bell.clone(),
        unwritten: Arc::default(),
        waiting: Arc::default(),
        tickets: Tickets::default(),
        host: host.handle(),
    };
    let unwritten = out.unwritten.clone();

    // Behind the requests waiting for a slot: they are answered first.
    let graceful = out.clone();
    super::common::stop_on_signal(
        "zot",
        move |r| graceful.stop_after_waiting(r),
        host.handle(),
    )?;

    let stdout = Stdout::start(move || {
        let _ = bell.try_send(());
    })
    .map_err(|e| CliError::Failed(format!("cannot start the output thread: {e}")))?;
    let handle = host.handle();
    std::thread::Builder::new()
        .name("zot-rpc-stdin".into())
        .spawn(move || read_requests(&handle, &out))
        .map_err(|e| CliError::Failed(format!("cannot start the input thread: {e}")))?;
    // Until the host loop ends, which is only after the graceful stop.
    write_output(&host, &out_rx, &unwritten, stdout, &rung);
    drop(host); // the loop has ended: nothing left to stop
    Ok(0)
}

/// Runs the host loop and writes events and responses to stdout until
/// the loop ends; the `shutdown` response, if any, goes last. While the
/// client does not read, events and replies wait where they are (the
/// host's event budget, the replies' byte bound: docs/PROTOCOL.md#limits-and-bounds) and the loop
/// runs on. A stdout that cannot be written (the client closed it) stops
/// the host as EOF would: nobody can read the answers any more.
fn write_output(
    host: &zot_host::Host,
    out: &Receiver<Out>,
    unwritten: &Unwritten,
    mut stdout: Stdout,
    rung: &Receiver<()>,
) {
    let events = host.events();
    let mut w = Writer {
        lines: Vec::new(),
        unwritten,
        order: Ordered::default(),
        last: None,
        after_ready: interrupted_event(host),
    };
    let mut stopping = false;
    let mut replies = out.clone();
    loop {
        let open = stdout.has_room();
        use crossbeam_channel::never;
        let (taking, answers) = match open {
            true => (events.clone(), replies.clone()),
            false => (never(), never()),
        };
        select! {
            recv(taking) -> event => match event {
                Ok(event) => w.host_event(event, &replies),
                Err(_) => break, // the host loop ended
            },
            recv(answers) -> msg => match msg {
                Ok(msg) => w.host_reply(msg, events),
                Err(_) => replies = never(),
            },
            // Nothing to write: run the loop until something comes.
            default => {
                let before = host.events_sent();
                let rang = surface::poll_with(host, rung, None).is_some();
                // Without a ring or a new event it returns only once the
                // host is done: with its last events waiting for room,
                // only the stdout thread's ring can change anything.
                if !rang && !open && host.events_sent() == before {
                    let _ = rung.recv();
                }
            },
        }
        stdout.write(std::mem::take(&mut w.lines));
        if stdout.broken() && !stopping {
            stopping = true;
            let _ = writeln!(io::stderr(), "zot rpc: stdout is closed, shutting down");
            host.submit(Request::Shutdown {
                reply: Box::new(|_| {}),
            });
        }
    }
    // Every reply of the loop is queued by now.
    w.drain(out, events);
    if let Some(line) = w.last.take() {
        w.lines.extend_from_slice(&line);
    }
    stdout.write(std::mem::take(&mut w.lines));
    stdout.finish();
}

/// stdout, with events and replies merged in the order the host loop
/// produced them (docs/PROTOCOL.md#ordering).
struct Writer<'a> {
    /// Lines for the stdout thread.
    lines: Vec<u8>,
    unwritten: &'a Unwritten,
    order: Ordered<Out>,
    /// The `shutdown` response, written at the very end.
    last: Option<Vec<u8>>,
    /// The `interrupted_calls` event, written after `ready`.
    after_ready: Option<Vec<u8>>,
}

#[cfg(feature = "journal")]
use super::journal::interrupted_event;

/// Without a journal there is no `interrupted_calls` event.
#[cfg(not(feature = "journal"))]
fn interrupted_event(_: &zot_host::Host) -> Option<Vec<u8>> {
    None
}

impl InOrder for Writer<'_> {
    type Reply = Out;

    fn ordered(&mut self) -> &mut Ordered<Out> {
        &mut self.order
    }

    fn after(reply: &Out) -> u64 {
        match reply {
            Out::Response { after, .. } => *after,
            Out::Last(_) => 0,
        }
    }

    fn handle_event(&mut self, event: HostEvent) {
        let ready = matches!(event, HostEvent::Ready { .. });
        self.lines.extend_from_slice(&json(&event));
        self.lines.push(b'\n');
        if let Some(line) = self.after_ready.take().filter(|_| ready) {
            self.lines.extend_from_slice(&line);
            self.lines.push(b'\n');
        }
    }

    fn handle_reply(&mut self, reply: Out) {
        match reply {
            Out::Response { line, .. } => {
                self.lines.extend_from_slice(&line);
                // Counted off even when stdout is gone.
                self.unwritten.written(line.len());
            }
            Out::Last(line) => self.last = Some(line),
        }
    }
}

/// A response line; `result` holds the JSON text of its `data`.
fn response(id: Option<&str>, command: &str, result: Result<Vec<u8>, String>) -> Vec<u8> {
    // Sized up front: a line grown by doubling holds up to twice its
    // bytes while it waits for stdout.
    let data = result.as_ref().map_or_else(|e| e.len() + 8, Vec::len);
    let mut line = Vec::with_capacity(64 + id.map_or(0, str::len) + command.len() + data);
    line.extend_from_slice(br#"{"type":"response","#);
    if let Some(id) = id {
        line.extend_from_slice(br#""id":"#);
        line.append(&mut json(&id));
        line.push(b',');
    }
    line.extend_from_slice(br#""command":"#);
    line.append(&mut json(&command));
    match result {
        Ok(mut data) => {
            line.extend_from_slice(br#","success":true,"data":"#);
            line.append(&mut data);
        }
        Err(error) => {
            line.extend_from_slice(br#","success":false,"error":"#);
            line.append(&mut json(&error));
        }
    }
    line.extend_from_slice(b"}\n");
    line
}

/// Sends a response made outside the host loop: it follows the events
/// the host has sent by now (e.g. `ready` before a `ping`'s answer).
fn respond(
    host: &HostHandle,
    out: &Output,
    id: Option<&str>,
    command: &str,
    result: Result<Vec<u8>, String>,
) {
    let after = host.events_sent();
    let line = response(id, command, result);
    out.send(Out::Response { after, line });
}

fn read_requests(host: &HostHandle, out: &Output) {
    let mut lines = LineReader::new(io::stdin().lock(), MAX_LINE);
    let mut after_shutdown = false;
    loop {
        // A client that does not read stdout is not read either.
        out.unwritten.wait_for_room(|| {
            let _ = writeln!(io::stderr(), "{}", Unwritten::not_reading("zot rpc"));
        });
        let line = match lines.next_line() {
            Ok(Some(Line::Text(line))) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Some(line)) => line,
            Ok(None) | Err(_) => break,
        };
        let line = match line {
            Line::Text(line) => line,
            Line::TooLong(n) => {
                let why = format!("request line of {n} bytes is longer than {MAX_LINE}");
                respond(host, out, None, "parse", Err(why));
                continue;
            }
        };
        match parse_request(&line) {
            Ok((id, kind, _)) if after_shutdown => {
                let why = "the extension host is shutting down: request after `shutdown`";
                respond(host, out, id.as_deref(), &kind, Err(why.into()));
            }
            Ok((id, kind, _)) if kind == "shutdown" => {
                after_shutdown = true;
                // Answered once every earlier request is answered and
                // the extensions have stopped: the last line.
                let answer = out.clone();
                out.stop_after_waiting(Request::Shutdown {
                    reply: Box::new(move |_| {
                        let line = response(id.as_deref(), "shutdown", Ok(b"{}".to_vec()));
                        answer.send(Out::Last(line));
                    }),
                });
            }
            Ok((id, kind, obj)) => dispatch(host, out, id, kind, obj, line),
            Err((id, why)) => respond(host, out, id.as_deref(), "parse", Err(why)),
        }
    }
    if !after_shutdown {
        out.stop_after_waiting(Request::Shutdown {
            reply: Box::new(|_| {}),
        });
    }
}

type Parsed = (Option<String>, String, Map<String, Value>);

fn parse_request(line: &[u8]) -> Result<Parsed, (Option<String>, String)> {
    let value: Value = parse_json(line).map_err(|e| (None, format!("invalid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err((None, "a request must be a JSON object".into()));
    };
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err((None, "`id` must be a string".into())),
    };
    // JSON readers differ on which of two counts: refused, as in frames.
    if let Some(key) = ["id", "type"].into_iter().find(|k| field_twice(line, k)) {
        let id = id.filter(|_| key == "type");
        return Err((id, format!("`{key}` is given twice: a request has one")));
    }
    match obj.get("type") {
        Some(Value::String(kind)) => Ok((id, kind.clone(), obj.clone())),
        _ => Err((id, "a request needs a string `type`".into())),
    }
}

fn field(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

fn required(obj: &Map<String, Value>, key: &str) -> Result<String, String> {
    field(obj, key)?.ok_or_else(|| format!("missing string field `{key}`"))
}

/// `call` with a `tool_call`'s `operation_key` and `reconcile`
/// (docs/PROTOCOL.md#replay-and-reconcile).
#[cfg(feature = "journal")]
fn durable(obj: &Map<String, Value>, call: ToolRequest) -> Result<ToolRequest, String> {
    let call = ToolRequest {
        operation_key: field(obj, "operation_key")?,
        reconcile: match obj.get("reconcile") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("`reconcile` must be a boolean".into()),
        },
        ..call
    };
    if call.reconcile && call.operation_key.is_none() {
        return Err("`reconcile` needs an `operation_key`".into());
    }
    Ok(call)
}

/// Without the `journal` feature a `tool_call` asking for `reconcile` or
/// giving an `operation_key` is refused, naming the feature: a reconcile
/// call must only report, never run the tool, and a caller passing a key
/// counts on the extension seeing it to run the operation at most once.
#[cfg(not(feature = "journal"))]
fn durable(obj: &Map<String, Value>, call: ToolRequest) -> Result<ToolRequest, String> {
    for key in ["reconcile", "operation_key"] {
        match obj.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(_) => return Err(super::common::not_in_build(key, "journal")),
        }
    }
    Ok(call)
}

/// Builds a reply that writes the response line for request `id`, after
/// the events the host sent before replying (docs/PROTOCOL.md#ordering).
fn reply<T: serde::Serialize + 'static>(
    host: &HostHandle,
    out: &Output,
    id: Option<String>,
    command: &str,
    shape: impl FnOnce(T) -> Vec<u8> + Send + 'static,
) -> zot_host::Reply<T> {
    let (host, out, command) = (host.clone(), out.clone(), command.to_string());
    Box::new(move |result: Result<T, HostError>| {
        // Runs on the host loop: the count `respond` takes is exact.
        let result = result.map(shape).map_err(|e| e.to_string());
        respond(&host, &out, id.as_deref(), &command, result);
        if let Some(class) = class_of(&command) {
            out.release(class);
        }
    })
}

/// The data of a response that is the reply itself.
fn as_is<T: serde::Serialize>(reply: T) -> Vec<u8> {
    json(&reply)
}

/// Serves a request read as `line`: one the host answers takes an
/// in-flight slot, which its reply frees, or waits for one in order
/// (docs/PROTOCOL.md#limits-and-bounds).
fn dispatch(
    host: &HostHandle,
    out: &Output,
    id: Option<String>,
    kind: String,
    obj: Map<String, Value>,
    line: Vec<u8>,
) {
    let Some(class) = class_of(&kind) else {
        start(host, out, id, kind, obj);
        return;
    };
    // A waiting tool call can be cancelled by its id.
    let key = id.clone().filter(|_| kind == "tool_call");
    let admitted = out.waiting().slots[class as usize].admit(key, line.len(), line);
    match admitted {
        Admit::Now(_) => {
            if !start(host, out, id, kind, obj) {
                out.release(class);
            }
        }
        Admit::Queued => {}
        Admit::Full(_) => respond(host, out, id.as_deref(), &kind, Err(bounds::queue_full())),
    }
}

/// Submits a request; false when it was answered at once instead (the
/// caller frees its slot, if it holds one).
fn start(
    host: &HostHandle,
    out: &Output,
    id: Option<String>,
    kind: String,
    obj: Map<String, Value>,
) -> bool {
    match build(host, out, id.clone(), &kind, obj) {
        Ok(Some(request)) => {
            host.submit(request);
            true
        }
        Ok(None) => false,
        Err(why) => {
            respond(host, out, id.as_deref(), &kind, Err(why));
            false
        }
    }
}

fn build(
    host: &HostHandle,
    out: &Output,
    id: Option<String>,
    kind: &str,
    obj: Map<String, Value>,
) -> Result<Option<Request>, String> {
    let request = match kind {
        "ping" => {
            // Like every request, after startup readiness (docs/PROTOCOL.md#readiness).
            host.wait_ready();
            respond(
                host,
                out,
                id.as_deref(),
                kind,
                Ok(br#"{"pong":true}"#.to_vec()),
            );
            return Ok(None);
        }
        "list" => Request::List {
            reply: reply(host, out, id, kind, as_is),
        },
        #[cfg(feature = "journal")]
        "resume" | "abandon" => {
            let key = required(&obj, "call")?;
            if host.journal_path().is_none() {
                return Err("this zot rpc has no journal: start it with --journal PATH".into());
            }
            // Its in-flight slot is freed when it is taken off here.
            let (answer, out, kind) = (host.clone(), out.clone(), kind.to_string());
            let resume = kind == "resume";
            super::journal::resolve(host.clone(), resume, key, move |result| {
                respond(&answer, &out, id.as_deref(), &kind, result)
            })?;
            return Ok(None);
        }
        "command" => {
            let name = required(&obj, "name")?;
            Request::Command {
                name: name.trim_start_matches('/').to_string(),
                args: field(&obj, "args")?.unwrap_or_default(),
                reply: reply(host, out, id, kind, as_is),
            }
        }
        "tool_call" => {
            let name = required(&obj, "name")?;
            // MCP's name for them: the tool would run with no arguments.
            if obj.contains_key("arguments") {
                return Err("a tool_call's arguments go in `args`, not `arguments`".into());
            }
            let args = obj.get("args").cloned().unwrap_or(Value::Null);
            let call = ToolRequest {
                tool_id: field(&obj, "tool_id")?,
                ..ToolRequest::new(name, args)
            };
            let call = durable(&obj, call)?;
            let Some(key) = id.clone() else {
                // Without an id it cannot be named by a cancel.
                let reply = reply(host, out, id, kind, as_is::<zot_host::ToolOutcome>);
                return Ok(Some(Request::Tool {
                    call,
                    pipeline: true,
                    reply,
                }));
            };
            let mut held = lock(&out.tickets);
            // A cancel names a call by its id: two in flight could not
            // be told apart.
            if held.contains_key(&key) {
                return Err(format!("a tool_call with id {key:?} is already in flight"));
            }
            let ticket = host.ticket();
            held.insert(key.clone(), ticket);
            drop(held);
            let answer = reply(host, out, id, kind, as_is::<zot_host::ToolOutcome>);
            let tickets = out.tickets.clone();
            let reply: zot_host::Reply<_> = Box::new(move |result| {
                let mut held = lock(&tickets);
                if held.get(&key) == Some(&ticket) {
                    held.remove(&key);
                }
                drop(held);
                answer(result);
            });
            Request::Cancellable {
                ticket,
                request: Box::new(Request::Tool {
                    call,
                    pipeline: true,
                    reply,
                }),
            }
        }
        "cancel" => {
            let target = required(&obj, "target")?;
            let shape = |cancelled: bool| format!(r#"{{"cancelled":{cancelled}}}"#).into_bytes();
            // Taken out of the table: a second cancel of the same call is
            // answered here, so cancels the host must serve are at most
            // one per tool call in flight, however many a client sends.
            let Some(ticket) = lock(&out.tickets).remove(&target) else {
                // A call still waiting for a slot leaves the queue and is
                // never answered (the cancel's answer says it was taken);
                // it never reaches an extension.
                let waiting = out.waiting().slots[Class::Work as usize].cancel(&target);
                respond(host, out, id.as_deref(), kind, Ok(shape(waiting.is_some())));
                return Ok(None);
            };
            // Not counted against the in-flight bound: no slot to free.
            let (host, out) = (host.clone(), out.clone());
            Request::Cancel {
                ticket,
                reply: Box::new(move |result: Result<bool, HostError>| {
                    let result = result.map(shape).map_err(|e| e.to_string());
                    respond(&host, &out, id.as_deref(), "cancel", result);
                }),
            }
        }
        #[cfg(feature = "ext-calls")]
        "builtin_result" => {
            let call_id = required(&obj, "call_id")?;
            let content = match obj.get("content") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(blocks)) => blocks.clone(),
                Some(_) => return Err("`content` must be an array of blocks".into()),
            };
            let is_error = match obj.get("is_error") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("`is_error` must be a boolean".into()),
            };
            let (host, out, call) = (host.clone(), out.clone(), call_id.clone());
            Request::BuiltinResult {
                call_id,
                content,
                is_error,
                reply: Box::new(move |taken: Result<bool, HostError>| {
                    let result = match taken {
                        Ok(true) => Ok(b"{}".to_vec()),
                        Ok(false) => Err(format!(
                            "no built-in call {call:?} is waiting (answered, timed out or cancelled)"
                        )),
                        Err(e) => Err(e.to_string()),
                    };
                    respond(&host, &out, id.as_deref(), "builtin_result", result);
                    out.release(Class::Answer);
                }),
            }
        }
        "intercept" => {
            let name = required(&obj, "event")?;
            let payload = payload(obj)?;
            let event: InterceptEvent = name.parse().map_err(|e: HostError| e.to_string())?;
            // before_agent_start answers the prompt alone (docs/PROTOCOL.md#system-prompt).
            let start = event == InterceptEvent::BeforeAgentStart;
            Request::Intercept {
                request: InterceptRequest { event, payload },
                reply: reply(
                    host,
                    out,
                    id,
                    kind,
                    move |o: zot_host::InterceptOutcome| match start {
                        true => json(&json!({"system_prompt": o.system_prompt})),
                        false => json(&o),
                    },
                ),
            }
        }
        "event" => {
            let event = required(&obj, "event")?;
            Request::Emit {
                event,
                payload: payload(obj)?,
                reply: reply(host, out, id, kind, |names: Vec<String>| {
                    json(&json!({"delivered_to": names}))
                }),
            }
        }
        #[cfg(not(feature = "ext-calls"))]
        "builtin_result" => return Err(super::common::not_in_build(kind, "ext-calls")),
        #[cfg(feature = "panels")]
        "panel_key" | "panel_resize" | "panel_close" => out.panel_request(host, id, kind, &obj)?,
        #[cfg(not(feature = "panels"))]
        "panel_key" | "panel_resize" | "panel_close" => {
            return Err(super::common::not_in_build(kind, "panels"));
        }
        "reload" => Request::Reload {
            reply: reply(host, out, id, kind, as_is),
        },
        other => return Err(format!("unknown request type {other:?}")),
    };
    Ok(Some(request))
}

/// The tickets table, poison ignored: the table stays usable.
fn lock(tickets: &Tickets) -> std::sync::MutexGuard<'_, HashMap<String, Ticket>> {
    tickets.lock().unwrap_or_else(|p| p.into_inner())
}

/// The payload of an `event` or `intercept` request: its fields but the
/// request's own (`type`, `id`, `event`), which name the request.
fn payload(mut obj: Map<String, Value>) -> Result<EventPayload, String> {
    for key in ["type", "id", "event"] {
        obj.remove(key);
    }
    event_payload(obj).map_err(|e| format!("bad event fields: {e}"))
}
