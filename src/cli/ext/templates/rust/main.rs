//! {{name}}: a zot extension in Rust, with serde_json only (made with
//! `zot ext new`).
//!
//! Build it first: cargo build --release --target-dir target
//! (the manifest runs ./target/release/{{crate}}; `--target-dir target`
//! keeps it there when CARGO_TARGET_DIR or build.target-dir says otherwise).
//!
//! zot starts it and speaks JSON lines with it: one JSON object per line,
//! frames from zot on our stdin, our frames on stdout. stdout is for frames
//! only (no println!); everything else goes to stderr, which zot keeps in
//! $ZOT_HOME/logs/ext-{{name}}.log (`zot ext logs {{name}}`).
//!
//!   /{{name}} [who]   a slash command: says hello
//!   {{tool}}          a tool the model can call: echoes `text`
//!
//! Try it:   zot -e .   then   /{{name}} you   and   /call {{tool}} {"text": "hi"}
//! Check it: zot ext check . --call {{tool}} '{"text": "hi"}' --command {{name}} you

use serde_json::{json, Value};
use std::io::{self, BufRead, Write};

const NAME: &str = "{{name}}";
const TOOL: &str = "{{tool}}";

/// The tool's arguments as a JSON Schema: the model reads it to know what to send.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the text to echo"},
            "upper": {"type": "boolean", "description": "echo it in capitals (default false)"}
        },
        "required": ["text"],
        "additionalProperties": false
    })
}

/// One frame: one JSON object on one line, flushed at once.
fn send(out: &mut impl Write, frame: Value) -> io::Result<()> {
    writeln!(out, "{frame}")?;
    out.flush()
}

/// Logs go to stderr: a stray println! on stdout would break the protocol.
fn log(message: &str) {
    eprintln!("[{NAME}] {message}");
}

/// The command's answer: display a note (or "prompt", "insert", "noop").
fn greet(args: &str) -> Value {
    let who = if args.is_empty() { "world" } else { args };
    json!({"action": "display", "display": format!("hello, {who}!")})
}

/// The tool. It checks the arguments first: the model can send anything.
fn echo(args: &Value) -> Result<String, String> {
    let args = args.as_object().ok_or("the arguments must be an object")?;
    let unknown: Vec<&str> = args
        .keys()
        .map(String::as_str)
        .filter(|k| !["text", "upper"].contains(k))
        .collect();
    if !unknown.is_empty() {
        return Err(format!("unknown argument(s): {}", unknown.join(", ")));
    }
    let text = args
        .get("text")
        .and_then(Value::as_str)
        .ok_or("`text` is required and must be a string")?;
    let upper = match args.get("upper") {
        None => false,
        Some(v) => v.as_bool().ok_or("`upper` must be true or false")?,
    };
    Ok(if upper { text.to_uppercase() } else { text.to_string() })
}

fn main() -> io::Result<()> {
    let mut out = io::stdout().lock();
    // 1. The first line we write is hello, with the manifest's name.
    send(
        &mut out,
        json!({"type": "hello", "name": NAME, "version": "0.1.0",
               "capabilities": ["commands", "tools"]}),
    )?;
    for line in io::stdin().lock().lines() {
        let frame: Value = match serde_json::from_str(&line?) {
            Ok(frame) => frame,
            Err(e) => {
                log(&format!("ignored a line that is not JSON: {e}"));
                continue;
            }
        };
        let (id, name) = (&frame["id"], frame["name"].as_str().unwrap_or(""));
        match frame["type"].as_str().unwrap_or("") {
            "hello_ack" => {
                // 2. Register after hello_ack, then say ready (zot stops
                //    waiting for us). frame["cwd"] is the user's project.
                send(
                    &mut out,
                    json!({"type": "register_command", "name": NAME,
                           "description": format!("say hello (try /{NAME} you)")}),
                )?;
                send(
                    &mut out,
                    json!({"type": "register_tool", "name": TOOL, "schema": schema(),
                           "description": "Echo `text` back, in capitals when `upper` is true."}),
                )?;
                send(&mut out, json!({"type": "ready"}))?;
                log("ready");
            }
            "command_invoked" => {
                // 3. Requests carry an id; the answer carries the same id.
                let mut reply = if name == NAME {
                    greet(frame["args"].as_str().unwrap_or(""))
                } else {
                    json!({"action": "noop", "error": format!("unknown command {name}")})
                };
                reply["type"] = json!("command_response");
                reply["id"] = id.clone();
                send(&mut out, reply)?;
            }
            "tool_call" => {
                let result = if name == TOOL {
                    echo(&frame["args"])
                } else {
                    Err(format!("unknown tool {name}"))
                };
                let (text, is_error) = match result {
                    Ok(text) => (text, false),
                    Err(text) => (text, true),
                };
                send(
                    &mut out,
                    json!({"type": "tool_result", "id": id, "is_error": is_error,
                           "content": [{"type": "text", "text": text}]}),
                )?;
            }
            "shutdown" => {
                // 4. Acknowledge and exit: zot stops whatever still runs after 2 s.
                send(&mut out, json!({"type": "shutdown_ack"}))?;
                log("bye");
                break;
            }
            // Other frames (event, event_intercept, ...) come only after a subscribe.
            _ => {}
        }
    }
    Ok(())
}
