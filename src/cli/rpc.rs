//! `zot rpc`: the JSON-lines control interface (SPEC section 7).
//!
//! stdin carries requests, stdout responses and events, one JSON object
//! per line; diagnostics go to stderr. Requests are submitted to the
//! host loop without waiting, so a slow tool call never delays a ping.
//! One writer thread owns stdout so lines never interleave.

use super::{CliError, HostOpts};
use crossbeam_channel::{select, Sender};
use serde_json::{json, Map, Value};
use std::io::{self, Write};
use zot_host::protocol::{Line, LineReader, MAX_LINE, PANEL_KEYS};
use zot_host::{EventPayload, HostHandle, InterceptRequest, Request, ToolRequest};

/// `zot rpc --help`.
pub const HELP: &str = "\
usage: zot rpc [-e PATH]... [--no-ext] [--cwd DIR] [--tool-timeout SECS] [--command-timeout SECS]
               [--provider NAME] [--model NAME]

Reads one JSON request per line on stdin and writes responses and events
as JSON lines on stdout. Requests: ping, list, command, tool_call,
intercept, event, panel_key, panel_close, reload, shutdown. EOF on stdin,
Ctrl-C and SIGTERM shut down gracefully.
";

/// Runs the control interface until shutdown, EOF or a signal.
pub fn run(opts: HostOpts) -> Result<i32, CliError> {
    let host = super::start_host(&opts)?;
    let (out_tx, out_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let writer = std::thread::Builder::new()
        .name("zot-rpc-stdout".into())
        .spawn(move || {
            let mut stdout = io::BufWriter::new(io::stdout().lock());
            // An empty line is the end: the stdin thread may still hold a
            // sender while it blocks on a read that never returns.
            while let Ok(line) = out_rx.recv() {
                let mut end = line.is_empty();
                let mut ok = stdout.write_all(&line).is_ok();
                while let Ok(more) = out_rx.try_recv() {
                    end |= more.is_empty();
                    ok = ok && stdout.write_all(&more).is_ok();
                }
                if !ok || stdout.flush().is_err() || end {
                    break;
                }
            }
        })
        .map_err(|e| CliError::Failed(format!("cannot start the output thread: {e}")))?;

    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<&'static str>(4);
    let on_signal = stop_tx.clone();
    ctrlc::set_handler(move || {
        let _ = on_signal.try_send("signal");
    })
    .map_err(|e| CliError::Failed(format!("cannot install the signal handler: {e}")))?;

    let handle = host.handle();
    let reader = {
        let (out, stop) = (out_tx.clone(), stop_tx);
        std::thread::Builder::new()
            .name("zot-rpc-stdin".into())
            .spawn(move || read_requests(&handle, &out, &stop))
            .map_err(|e| CliError::Failed(format!("cannot start the input thread: {e}")))?
    };
    let events = host.events().clone();
    let mut stopping = false;
    // Forward events until the host loop ends: it ends only after the
    // graceful stop, so every event and response before it is written.
    loop {
        select! {
            recv(events) -> event => match event {
                Ok(event) => send_json(&out_tx, &event),
                Err(_) => break,
            },
            recv(stop_rx) -> why => {
                if why == Ok("signal") {
                    eprintln!("zot: signal received, shutting down");
                }
                if !stopping {
                    stopping = true;
                    host.handle().submit(Request::Shutdown { reply: Box::new(|_| {}) });
                }
            }
        }
    }
    drop(host);
    drop(reader); // blocked on stdin at worst; the process exits anyway
    let _ = out_tx.send(Vec::new());
    let _ = writer.join();
    Ok(0)
}

fn send_json(out: &Sender<Vec<u8>>, value: &impl serde::Serialize) {
    let mut line = serde_json::to_vec(value).unwrap_or_default();
    line.push(b'\n');
    let _ = out.send(line);
}

fn respond(out: &Sender<Vec<u8>>, id: Option<&str>, command: &str, result: Result<Value, String>) {
    let mut resp = Map::new();
    resp.insert("type".into(), "response".into());
    if let Some(id) = id {
        resp.insert("id".into(), id.into());
    }
    resp.insert("command".into(), command.into());
    match result {
        Ok(data) => {
            resp.insert("success".into(), true.into());
            resp.insert("data".into(), data);
        }
        Err(error) => {
            resp.insert("success".into(), false.into());
            resp.insert("error".into(), error.into());
        }
    }
    send_json(out, &Value::Object(resp));
}

fn read_requests(host: &HostHandle, out: &Sender<Vec<u8>>, stop: &Sender<&'static str>) {
    let mut lines = LineReader::new(io::stdin().lock(), MAX_LINE);
    loop {
        let line = match lines.next_line() {
            Ok(Some(Line::Text(line))) => line,
            Ok(Some(Line::TooLong(n))) => {
                respond(
                    out,
                    None,
                    "parse",
                    Err(format!(
                        "request line of {n} bytes is longer than {MAX_LINE}"
                    )),
                );
                continue;
            }
            Ok(None) | Err(_) => break,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_request(&line) {
            Ok((id, kind, obj)) => {
                if kind == "shutdown" {
                    respond(out, id.as_deref(), "shutdown", Ok(json!({})));
                    break;
                }
                dispatch(host, out, id, kind, obj);
            }
            Err((id, why)) => respond(out, id.as_deref(), "parse", Err(why)),
        }
    }
    let _ = stop.send("eof");
}

type Parsed = (Option<String>, String, Map<String, Value>);

fn parse_request(line: &[u8]) -> Result<Parsed, (Option<String>, String)> {
    let value: Value = zot_host::protocol::check_depth(line)
        .and_then(|()| serde_json::from_slice(line).map_err(|e| e.to_string()))
        .map_err(|e| (None, format!("invalid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err((None, "a request must be a JSON object".into()));
    };
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err((None, "`id` must be a string".into())),
    };
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

/// Builds a reply that writes the response line for request `id`.
fn reply<T: serde::Serialize + 'static>(
    out: &Sender<Vec<u8>>,
    id: Option<String>,
    command: &str,
    shape: impl FnOnce(T) -> Value + Send + 'static,
) -> zot_host::Reply<T> {
    let (out, command) = (out.clone(), command.to_string());
    Box::new(move |result: Result<T, String>| {
        respond(&out, id.as_deref(), &command, result.map(shape))
    })
}

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn dispatch(
    host: &HostHandle,
    out: &Sender<Vec<u8>>,
    id: Option<String>,
    kind: String,
    obj: Map<String, Value>,
) {
    let request = match build(out, id.clone(), &kind, obj) {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(why) => return respond(out, id.as_deref(), &kind, Err(why)),
    };
    host.submit(request);
}

fn build(
    out: &Sender<Vec<u8>>,
    id: Option<String>,
    kind: &str,
    obj: Map<String, Value>,
) -> Result<Option<Request>, String> {
    let request = match kind {
        "ping" => {
            respond(out, id.as_deref(), kind, Ok(json!({"pong": true})));
            return Ok(None);
        }
        "list" => Request::List {
            reply: reply(out, id, kind, to_value),
        },
        "command" => {
            let name = required(&obj, "name")?;
            Request::Command {
                name: name.trim_start_matches('/').to_string(),
                args: field(&obj, "args")?.unwrap_or_default(),
                reply: reply(out, id, kind, to_value),
            }
        }
        "tool_call" => Request::Tool {
            call: ToolRequest {
                name: required(&obj, "name")?,
                args: obj.get("args").cloned().unwrap_or(Value::Null),
                tool_id: field(&obj, "tool_id")?,
            },
            pipeline: true,
            reply: reply(out, id, kind, to_value),
        },
        "intercept" => {
            let event = required(&obj, "event")?;
            Request::Intercept {
                request: InterceptRequest {
                    event,
                    payload: payload(obj)?,
                },
                reply: reply(out, id, kind, to_value),
            }
        }
        "event" => {
            let event = required(&obj, "event")?;
            Request::Emit {
                event,
                payload: payload(obj)?,
                reply: reply(
                    out,
                    id,
                    kind,
                    |names: Vec<String>| json!({"delivered_to": names}),
                ),
            }
        }
        "panel_key" => {
            let key = required(&obj, "key")?;
            if !PANEL_KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "unknown key {key:?} (one of {})",
                    PANEL_KEYS.join(" ")
                ));
            }
            Request::PanelKey {
                extension: required(&obj, "extension")?,
                panel_id: required(&obj, "panel_id")?,
                key,
                text: field(&obj, "text")?,
                reply: reply(out, id, kind, |()| json!({})),
            }
        }
        "panel_close" => Request::PanelClose {
            extension: required(&obj, "extension")?,
            panel_id: required(&obj, "panel_id")?,
            reply: reply(out, id, kind, |()| json!({})),
        },
        "reload" => Request::Reload {
            reply: reply(out, id, kind, to_value),
        },
        other => return Err(format!("unknown request type {other:?}")),
    };
    Ok(Some(request))
}

fn payload(obj: Map<String, Value>) -> Result<EventPayload, String> {
    serde_json::from_value(Value::Object(obj)).map_err(|e| format!("bad event fields: {e}"))
}
