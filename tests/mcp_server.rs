//! `zot mcp` end to end: the four official MCP SDK clients (Python 1.x
//! and 2.x, TypeScript SDK 1.x and client 2.x) run their scripts in
//! fixtures/mcp-clients against the real binary, and raw JSON-RPC over
//! pipes covers bad input, cancellation, versions and the log rules.
//!
//! The SDKs come from `.ci/mcp-deps` (or `$ZOT_MCP_DEPS`); when they
//! cannot be had the client tests fail and say so, never skip.

#![cfg(feature = "mcp")]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `pid ppid` pairs written by the fixture extensions.
fn fixture_pids(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(dir).expect("fixture dir").flatten() {
        if entry.file_name().to_string_lossy().starts_with("pid-") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            // A parent of 1 means the host was already gone when the
            // extension started (a client killed it): nothing to check.
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok())
                    .filter(|p| *p > 1),
            );
        }
    }
    pids
}

/// Runs the client fixture `script` (in fixtures/mcp-clients) with `cmd`
/// against `zot mcp` started with `args` ([`run_client_script`]).
fn run_script(
    cmd: Command,
    script: &str,
    args: &Value,
    t: &TempDir,
) -> (std::process::ExitStatus, std::process::Output) {
    let script = fixture_path("mcp-clients").join(script);
    run_client_script(cmd, &script, args, t)
}

/// Runs one client script against `zot mcp` with the three fixture
/// extensions; checks every step passed and nothing is left running.
fn run_client(tag: &str, interpreter: PathBuf, script: &str) {
    let t = TempDir::new(tag);
    let fixture_dir = t.join("fixture");
    std::fs::create_dir_all(&fixture_dir).expect("fixture dir");
    // A generous startup grace: on a loaded machine three Python
    // extensions can take longer than the default 3 s to be ready, and
    // the first tools/list lists only those that made it.
    let args = json!([
        "mcp",
        "--no-ext",
        "--startup-timeout",
        "30",
        "--cwd",
        t.path(),
        "-e",
        fixture_path("mcp-clients/exts/demo"),
        "-e",
        fixture_path("mcp-clients/exts/guard"),
        "-e",
        fixture_path("mcp-clients/exts/quitter"),
    ]);
    assert!(
        interpreter.exists() || interpreter.components().count() == 1,
        "client interpreter {} is missing: run .ci/mcp-deps",
        interpreter.display()
    );
    let mut cmd = Command::new(&interpreter);
    cmd.env("MCP_FIXTURE_DIR", &fixture_dir);
    let (status, out) = run_script(cmd, script, &args, &t);
    let steps = [
        "tools/list",
        "tools/call",
        "guard block",
        "guard rewrite",
        "unknown tool",
        "prompts",
        "log message",
        "list_changed",
        "eof",
    ];
    assert_client_passed(script, status, &out, &steps);
    let pids = fixture_pids(&fixture_dir);
    assert!(
        pids.len() >= 4,
        "{script}: no extension pids recorded ({pids:?})"
    );
    for pid in pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        wait_for(
            &format!("{script}: process {pid} ({cmdline}) to be gone"),
            || process_gone(pid),
        );
    }
}

#[test]
fn python_sdk_1x_client() {
    run_client(
        "mcp-py1",
        mcp_deps().join("py1/bin/python"),
        "py1_client.py",
    );
}

#[test]
fn python_sdk_2x_client() {
    run_client(
        "mcp-py2",
        mcp_deps().join("py2/bin/python"),
        "py2_client.py",
    );
}

#[test]
fn typescript_sdk_1x_client() {
    run_client("mcp-ts1", PathBuf::from("node"), "ts_sdk1_client.cjs");
}

#[test]
fn typescript_client_2x() {
    run_client("mcp-ts2", PathBuf::from("node"), "ts_client2_client.cjs");
}

// ---- raw JSON-RPC ----

const V2026: &str = "2026-07-28";

/// `zot mcp` over pipes with its own ZOT_HOME and fixture directory.
struct Mcp {
    rpc: Rpc,
    _home: TempDir,
    fixture_dir: PathBuf,
}

impl Mcp {
    fn start(tag: &str, exts: &[PathBuf]) -> Mcp {
        Mcp::start_with(tag, exts, &[])
    }

    /// [`Mcp::start`] with `env` set for `zot mcp`.
    fn start_with(tag: &str, exts: &[PathBuf], env: &[(&str, &str)]) -> Mcp {
        let t = TempDir::new(tag);
        let fixture_dir = t.join("fixture");
        std::fs::create_dir_all(&fixture_dir).expect("fixture dir");
        // Every extension in the first lists, however slow the machine:
        // a late one would change them (list_changed) mid-test.
        let mut cmd = Rpc::mcp_command(&t, exts, 60);
        cmd.env("MCP_FIXTURE_DIR", &fixture_dir)
            .envs(env.iter().copied());
        Mcp {
            rpc: Rpc::spawn(&mut cmd),
            _home: t,
            fixture_dir,
        }
    }

    fn demo(tag: &str) -> Mcp {
        Mcp::demo_with(tag, &[])
    }

    /// [`Mcp::demo`] with `env` set for `zot mcp`.
    fn demo_with(tag: &str, env: &[(&str, &str)]) -> Mcp {
        let exts = ["demo", "guard", "quitter"].map(|e| fixture_path("mcp-clients/exts").join(e));
        Mcp::start_with(tag, &exts, env)
    }

    fn send(&mut self, v: Value) {
        self.rpc.send(v);
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(&id)
    }

    fn response(&mut self, id: &Value) -> Value {
        let id = id.clone();
        self.rpc.until(&format!("response to {id}"), |v| {
            v.get("id") == Some(&id) && v.get("method").is_none()
        })
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn initialize(&mut self) {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18", "{r}");
        self.notify("notifications/initialized", json!({}));
    }

    fn position(&self, pred: impl Fn(&Value) -> bool) -> Option<usize> {
        self.rpc.seen.iter().position(pred)
    }

    fn notes(&self) -> Vec<Value> {
        self.rpc
            .seen
            .iter()
            .filter(|v| v["method"] == "notifications/message")
            .map(|v| v["params"].clone())
            .collect()
    }

    /// Closes stdin and waits: exit status 0, every extension gone.
    fn end_by_eof(mut self) -> Vec<Value> {
        self.rpc.close_stdin();
        self.finish()
    }

    fn finish(mut self) -> Vec<Value> {
        assert_eq!(self.rpc.wait(), Some(0), "zot mcp exit status");
        for pid in fixture_pids(&self.fixture_dir) {
            wait_for(&format!("process {pid} to be gone"), || process_gone(pid));
        }
        std::mem::take(&mut self.rpc.seen)
    }
}

fn modern(params: Value) -> Value {
    let mut params = params;
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(V2026);
    params
}

fn code(v: &Value) -> i64 {
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {v}"))
}

#[test]
fn bad_input_gets_json_rpc_errors_and_the_stream_goes_on() {
    let mut mcp = Mcp::start("mcp-bad", &[]);
    mcp.rpc.send_raw("{this is not json");
    let v = mcp.rpc.next().expect("answer to bad JSON");
    assert_eq!((v["id"].clone(), code(&v)), (Value::Null, -32700), "{v}");
    mcp.rpc
        .send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
    let v = mcp.rpc.next().expect("answer to a batch");
    assert_eq!((v["id"].clone(), code(&v)), (Value::Null, -32600), "{v}");
    mcp.rpc.send_raw("[]");
    assert_eq!(code(&mcp.rpc.next().expect("answer to []")), -32600);
    mcp.rpc.send_raw(r#"{"id":2,"method":"ping"}"#);
    let v = mcp.response(&json!(2));
    assert_eq!(code(&v), -32600, "missing jsonrpc: {v}");
    let v = mcp.request(json!(3), "no/such/method", json!({}));
    assert_eq!(code(&v), -32601, "{v}");
    let v = mcp.request(json!(4), "tools/call", json!({"arguments": {}}));
    assert_eq!(code(&v), -32602, "tools/call without a name: {v}");
    let v = mcp.request(
        json!(5),
        "tools/call",
        json!({"name": "echo", "arguments": [1]}),
    );
    assert_eq!(code(&v), -32602, "arguments not an object: {v}");
    let v = mcp.request(json!(6), "logging/setLevel", json!({"level": "loud"}));
    assert_eq!(code(&v), -32602, "{v}");
    let v = mcp.request(json!("p"), "ping", json!({}));
    assert_eq!(v, json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
    mcp.end_by_eof();
}

#[test]
fn unsupported_version_gets_32022_and_2026_results_are_stamped() {
    let mut mcp = Mcp::demo("mcp-versions");
    let v = mcp.request(
        json!(1),
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}),
    );
    assert_eq!(code(&v), -32022, "{v}");
    assert_eq!(v["error"]["data"]["requested"], "2099-01-01");
    let supported = v["error"]["data"]["supported"]
        .as_array()
        .expect("supported list");
    assert!(supported.contains(&json!(V2026)) && supported.contains(&json!("2024-11-05")));

    let d = mcp.request(json!(2), "server/discover", modern(json!({})));
    let r = &d["result"];
    assert_eq!(r["resultType"], "complete", "{d}");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "zot"
    );
    assert!(r["supportedVersions"]
        .as_array()
        .expect("versions")
        .contains(&json!(V2026)));
    assert!(r["ttlMs"].is_u64() && r["cacheScope"].is_string(), "{d}");

    let list = mcp.request(json!(3), "tools/list", modern(json!({})));
    let r = &list["result"];
    assert_eq!(
        (
            r["resultType"].as_str(),
            r["ttlMs"].as_u64(),
            r["cacheScope"].as_str()
        ),
        (Some("complete"), Some(0), Some("private")),
        "{list}"
    );
    let call = mcp.request(
        json!(4),
        "tools/call",
        modern(json!({"name": "echo", "arguments": {"text": "x"}})),
    );
    assert_eq!(call["result"]["resultType"], "complete", "{call}");
    assert_eq!(call["result"]["content"][0]["text"], "echo: x");
    assert!(
        call["result"].get("ttlMs").is_none(),
        "a call result is not cacheable: {call}"
    );

    // The legacy handshake still works on the same stream.
    mcp.initialize();
    let legacy = mcp.request(json!(5), "tools/list", json!({}));
    assert!(legacy["result"].get("resultType").is_none(), "{legacy}");
    mcp.end_by_eof();
}

#[test]
fn cancelled_request_is_never_answered() {
    let mut mcp = Mcp::demo("mcp-cancel");
    mcp.initialize();
    mcp.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "slow", "arguments": {"ms": 800}}}));
    mcp.notify(
        "notifications/cancelled",
        json!({"requestId": 5, "reason": "changed my mind"}),
    );
    // The extension answers in order, so this answer comes after the
    // cancelled one would have.
    let later = mcp.request(
        json!(6),
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 10}}),
    );
    assert_eq!(later["result"]["content"][0]["text"], "finally");
    let ping = mcp.request(json!(7), "ping", json!({}));
    assert_eq!(ping["result"], json!({}));
    let seen = mcp.end_by_eof();
    assert!(
        !seen.iter().any(|v| v["id"] == 5),
        "a cancelled request was answered: {seen:?}"
    );
}

#[test]
fn a_cancelled_calls_late_answer_never_reaches_a_request_reusing_its_id() {
    let t = TempDir::new("mcp-cancel-reuse-ext");
    let (ext, pid_file) = held_tool(&t);
    let mut mcp = Mcp::start("mcp-cancel-reuse", &[ext]);
    mcp.initialize();
    let list = mcp.request(json!("list"), "tools/list", json!({}));
    assert_eq!(list["result"]["tools"][0]["name"], "held", "{list}");
    let call = |n: &str| json!({"name": "held", "arguments": {"n": n}});
    mcp.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call("first")}));
    mcp.notify("notifications/cancelled", json!({"requestId": 1}));
    // Still running: the id is taken.
    let reused = mcp.request(json!(1), "tools/call", call("second"));
    assert_eq!(code(&reused), -32600, "{reused}");
    release_held(&pid_file);
    // Once the cancelled call's answer came (and was dropped), the id is free.
    let mut seen = Vec::new();
    let third = poll_until(DEADLINE, || {
        seen.append(&mut mcp.rpc.seen); // answers to id 1 read so far
        let v = mcp.request(json!(1), "tools/call", call("third"));
        match v.get("error") {
            Some(e) if e["code"] == -32600 => Err(format!("id 1 still taken: {v}")),
            _ => Ok(v),
        }
    });
    assert_eq!(
        third["result"]["content"][0]["text"], "{\"n\": \"third\"}",
        "{third}"
    );
    seen.extend(mcp.end_by_eof());
    let leaked: Vec<&Value> = (seen.iter())
        .filter(|v| v.to_string().contains("first"))
        .collect();
    assert!(
        leaked.is_empty(),
        "the cancelled call was answered: {leaked:?}"
    );
}

/// `zot mcp` over pipes, its stdout lines raw (a `Value` would lose
/// the precision of big integers).
fn raw_mcp(
    t: &TempDir,
    ext: &Path,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    crossbeam_channel::Receiver<String>,
) {
    let mut cmd = Rpc::mcp_command(t, &[ext.to_path_buf()], 60);
    let (child, stdin, lines) = spawn_piped(cmd.stderr(Stdio::null()));
    (child, stdin.expect("stdin"), lines)
}

/// Reads raw lines until one contains `needle`; returns all read.
fn read_until(lines: &crossbeam_channel::Receiver<String>, seen: &mut Vec<String>, needle: &str) {
    while !seen.iter().any(|l| l.contains(needle)) {
        match lines.recv_timeout(DEADLINE) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line with {needle} before the deadline; seen {seen:#?}"),
        }
    }
}

#[test]
fn integer_ids_of_any_size_come_back_as_they_went() {
    let t = TempDir::new("mcp-big-ids");
    let (ext, pid_file) = held_tool(&t);
    let (mut child, mut stdin, lines) = raw_mcp(&t, &ext);
    let mut seen = Vec::new();
    let mut send = |line: String| {
        use std::io::Write;
        let written = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
        written.expect("write to zot mcp");
    };
    send(r#"{"jsonrpc":"2.0","id":"list","method":"tools/list"}"#.into());
    read_until(&lines, &mut seen, r#""id":"list""#);
    let [a, b, c] = [
        "123456789012345678901234567890",
        "123456789012345678901234567891",
        "98765432109876543210987654321098765432109876543210",
    ];
    for id in [a, b] {
        send(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"held"}}}}"#
        ));
    }
    send(format!(r#"{{"jsonrpc":"2.0","id":{c},"method":"ping"}}"#));
    read_until(&lines, &mut seen, &format!(r#""id":{c},"result":{{}}"#));
    release_held(&pid_file);
    for id in [a, b] {
        read_until(&lines, &mut seen, &format!(r#""id":{id},"result""#));
    }
    assert!(
        !seen.iter().any(|l| l.contains("-32600")),
        "two distinct ids were taken for one: {seen:#?}"
    );
    drop(stdin); // EOF: the graceful stop
    assert_eq!(child.wait().expect("wait").code(), Some(0));
}

#[test]
fn a_built_in_tool_is_refused_before_the_pipeline() {
    let t = TempDir::new("mcp-builtin-ext");
    let record = t.join("record");
    let cfg = json!({
        "register": [tool("t"), subscribe(&["tool_call"], &["tool_call"])],
        "record": record,
    });
    let ext = ext_dir(&t.join("audit"), "audit", cfg);
    let mut mcp = Mcp::start("mcp-builtin", &[ext]);
    mcp.initialize();
    let refused = mcp.request(
        json!(1),
        "tools/call",
        json!({"name": "bash", "arguments": {"command": "ls"}}),
    );
    assert_eq!(code(&refused), -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool bash")),
        "{refused}"
    );
    // Events go out in order: once `t` is answered, an event for bash
    // would have been recorded before t's.
    let ran = mcp.request(
        json!(2),
        "tools/call",
        json!({"name": "t", "arguments": {}}),
    );
    assert!(ran.get("result").is_some(), "{ran}");
    let mut seen = Vec::new();
    for kind in ["event", "event_intercept"] {
        seen.extend(frames(&record, kind));
    }
    assert!(
        seen.iter().any(|f| f.to_string().contains("\"t\"")),
        "t's call went through the pipeline: {seen:?}"
    );
    let bash: Vec<&Value> = seen
        .iter()
        .filter(|f| f.to_string().contains("bash"))
        .collect();
    assert!(
        bash.is_empty(),
        "subscribers or guards saw the refused built-in call: {bash:?}"
    );
    mcp.end_by_eof();
}

#[test]
fn notes_before_initialized_are_buffered_up_to_100() {
    let t = TempDir::new("mcp-buffer-ext");
    let notes: Vec<Value> = (0..150)
        .map(|i| json!({"type": "notify", "level": "warn", "message": format!("note {i}")}))
        .collect();
    let noisy = ext_dir(
        &t.join("noisy"),
        "noisy",
        json!({"register": [command("hi")], "on_ready": notes,
               "commands": {"hi": {"action": "display", "display": "hello"}}}),
    );
    let mut mcp = Mcp::start("mcp-buffer", &[noisy]);
    let init = mcp.request(
        json!(0),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "raw", "version": "1"}}),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "zot");
    // Its answer comes after every note it wrote before (docs/PROTOCOL.md#ordering).
    let hi = mcp.request(json!(1), "prompts/get", json!({"name": "hi"}));
    assert_eq!(
        hi["result"]["messages"][0]["content"]["text"], "hello",
        "{hi}"
    );
    assert!(
        mcp.notes().is_empty(),
        "notes before notifications/initialized"
    );
    mcp.notify("notifications/initialized", json!({}));
    mcp.request(json!(2), "ping", json!({}));
    let notes = mcp.notes();
    assert_eq!(notes.len(), 100, "buffered notes: {notes:?}");
    assert_eq!(
        notes[0],
        json!({"level": "warning", "logger": "noisy", "data": "note 50"})
    );
    assert_eq!(notes[99]["data"], "note 149");
    mcp.end_by_eof();
}

#[test]
fn legacy_notes_follow_set_level_and_precede_the_result() {
    let mut mcp = Mcp::demo("mcp-legacy-notes");
    mcp.initialize();
    let call = |mcp: &mut Mcp, id: i64, text: &str| {
        mcp.request(
            json!(id),
            "tools/call",
            json!({"name": "shout", "arguments": {"text": text}}),
        )
    };
    call(&mut mcp, 1, "one");
    let note = mcp
        .position(|v| v["params"]["data"] == "shouting one")
        .expect("the note of a legacy call");
    let result = mcp.position(|v| v["id"] == 1).expect("result");
    assert!(
        note < result,
        "the note must come before the result (docs/PROTOCOL.md#ordering)"
    );
    let set = mcp.request(json!(2), "logging/setLevel", json!({"level": "warning"}));
    assert_eq!(set["result"], json!({}));
    call(&mut mcp, 3, "two");
    mcp.request(json!(4), "ping", json!({}));
    assert!(
        mcp.position(|v| v["params"]["data"] == "shouting two")
            .is_none(),
        "an info note passed setLevel warning"
    );
    mcp.end_by_eof();
}

#[test]
fn modern_notes_only_for_requests_that_opt_in() {
    let mut mcp = Mcp::demo("mcp-modern-notes");
    let shout = |text: &str, level: Option<&str>| {
        let mut params = modern(json!({"name": "shout", "arguments": {"text": text}}));
        if let Some(level) = level {
            params["_meta"]["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        params
    };
    mcp.request(json!(1), "tools/call", shout("none", None));
    mcp.request(json!(2), "tools/call", shout("warning", Some("warning")));
    mcp.request(json!(3), "tools/call", shout("info", Some("info")));
    let notes = mcp.notes();
    assert_eq!(
        notes,
        vec![json!({"level": "info", "logger": "mcpdemo", "data": "shouting info"})],
        "only the opted-in request at its level gets notes (and not the startup note)"
    );
    let note = mcp
        .position(|v| v["params"]["data"] == "shouting info")
        .expect("note");
    let result = mcp.position(|v| v["id"] == 3).expect("result");
    assert!(note < result, "the note must come before the result");
    mcp.end_by_eof();
}

#[test]
fn list_changes_reach_legacy_clients_and_listen_streams() {
    let mut mcp = Mcp::demo("mcp-listen");
    mcp.initialize();
    mcp.send(
        json!({"jsonrpc": "2.0", "id": "sub", "method": "subscriptions/listen",
                    "params": modern(json!({"notifications": {"toolsListChanged": true}}))}),
    );
    let ack = mcp.rpc.until("listen ack", |v| {
        v["method"] == "notifications/subscriptions/acknowledged"
    });
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub"
    );
    let bye = mcp.request(json!(1), "tools/call", json!({"name": "quit"}));
    assert_eq!(bye["result"]["content"][0]["text"], "bye");
    mcp.rpc.until("legacy list_changed", |v| {
        v["method"] == "notifications/tools/list_changed" && v.get("params").is_none()
    });
    mcp.rpc.until("list_changed on the listen stream", |v| {
        v["method"] == "notifications/tools/list_changed"
            && v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub"
    });
    mcp.rpc.until("prompts list_changed", |v| {
        v["method"] == "notifications/prompts/list_changed"
    });
    let tools = mcp.request(json!(2), "tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"quit") && names.contains(&"echo"),
        "{names:?}"
    );
    // The stream ends gracefully at shutdown: its request is answered.
    let seen = mcp.end_by_eof();
    let end = seen
        .iter()
        .find(|v| v["id"] == "sub")
        .expect("listen answered at shutdown");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub"
    );
    let changes = seen
        .iter()
        .filter(|v| v["method"] == "notifications/tools/list_changed" && v.get("params").is_none())
        .count();
    assert_eq!(changes, 1, "one change, one notification");
}

#[test]
fn cancelled_listen_gets_nothing_more() {
    let mut mcp = Mcp::demo("mcp-listen-cancel");
    mcp.send(
        json!({"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen",
                    "params": modern(json!({"notifications": {"toolsListChanged": true}}))}),
    );
    mcp.rpc.until("ack", |v| {
        v["method"] == "notifications/subscriptions/acknowledged"
    });
    mcp.notify("notifications/cancelled", json!({"requestId": 9}));
    mcp.request(json!(1), "tools/call", modern(json!({"name": "quit"})));
    // A later List is answered after the exit's comparison was made.
    mcp.request(json!(2), "tools/list", modern(json!({})));
    let seen = mcp.end_by_eof();
    assert!(
        !seen
            .iter()
            .any(|v| v["method"] == "notifications/tools/list_changed" || v["id"] == 9),
        "after cancelling, the stream got more: {seen:?}"
    );
}

#[test]
fn session_start_is_emitted_once() {
    let mut mcp = Mcp::demo("mcp-session");
    mcp.request(json!(1), "server/discover", modern(json!({})));
    mcp.initialize();
    mcp.request(json!(2), "tools/list", json!({}));
    let pid = mcp.rpc.child.id();
    let dir = mcp.fixture_dir.clone();
    // Keep the directory past the end: the extension writes there until it stops.
    let _keep = std::mem::replace(&mut mcp._home, TempDir::new("mcp-session-spare"));
    mcp.end_by_eof();
    let events = std::fs::read_to_string(dir.join(format!("events-{pid}"))).unwrap_or_default();
    assert_eq!(
        events.lines().filter(|l| *l == "session_start").count(),
        1,
        "events seen by mcpdemo: {events:?}"
    );
}

#[test]
fn sigterm_shuts_down_gracefully() {
    let mut mcp = Mcp::demo("mcp-sigterm");
    mcp.initialize();
    mcp.request(json!(1), "tools/list", json!({})); // after startup readiness
    let pids = fixture_pids(&mcp.fixture_dir);
    assert!(!pids.is_empty(), "extensions recorded their pids");
    mcp.rpc.signal(libc::SIGTERM);
    mcp.finish();
}

#[test]
fn requests_before_readiness_are_served_even_when_eof_follows() {
    let t = TempDir::new("mcp-early-ext");
    let slow = ext_dir(
        &t.join("slow"),
        "slow",
        json!({"hello_delay_ms": 400, "register": [tool("late_tool")]}),
    );
    let mut mcp = Mcp::start("mcp-early", &[slow]);
    mcp.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    mcp.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "late_tool", "arguments": {"a": 1}}}));
    let seen = mcp.end_by_eof();
    let list = seen
        .iter()
        .find(|v| v["id"] == 1)
        .expect("tools/list answered");
    assert_eq!(list["result"]["tools"][0]["name"], "late_tool", "{list}");
    let call = seen
        .iter()
        .find(|v| v["id"] == 2)
        .expect("tools/call answered");
    assert_eq!(call["result"]["isError"], false, "{call}");
}

/// Sends a `slow` call and waits until its pipeline reached the
/// extension (mcpdemo records the `tool_call` event it gets).
fn start_slow_call(mcp: &mut Mcp, ms: u64) {
    mcp.initialize();
    mcp.request(json!(1), "tools/list", json!({}));
    mcp.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "slow", "arguments": {"ms": ms}}}));
    let events = mcp
        .fixture_dir
        .join(format!("events-{}", mcp.rpc.child.id()));
    wait_for("the slow call to reach the extension", || {
        std::fs::read_to_string(&events).is_ok_and(|e| e.contains("tool_call"))
    });
}

#[test]
fn sigterm_lets_an_accepted_call_finish() {
    let mut mcp = Mcp::demo("mcp-sigterm-drain");
    start_slow_call(&mut mcp, 1500);
    mcp.rpc.signal(libc::SIGTERM);
    let seen = mcp.finish();
    let answer = seen
        .iter()
        .find(|v| v["id"] == 5)
        .expect("the accepted call is answered");
    assert_eq!(
        answer["result"]["content"][0]["text"], "finally",
        "{answer}"
    );
}

#[test]
fn a_second_sigterm_stops_at_once() {
    // The demo extension, busy with the call, outlasts `shutdown`: its
    // stop's graces are not the subject.
    let mut mcp = Mcp::demo_with("mcp-sigterm-twice", &[("ZOT_SHUTDOWN_GRACE", SHORT_STOP)]);
    // Longer than the test's deadline: only the second signal ends it in time.
    start_slow_call(&mut mcp, 50_000);
    // The first signal took effect once zot says so on stderr.
    let mut stderr = std::io::BufReader::new(mcp.rpc.child.stderr.take().expect("stderr"));
    mcp.rpc.signal(libc::SIGTERM);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).expect("read stderr");
    assert!(line.contains("signal received"), "stderr: {line}");
    mcp.rpc.signal(libc::SIGTERM);
    let seen = mcp.finish();
    drop(stderr);
    let answer = seen
        .iter()
        .find(|v| v["id"] == 5)
        .expect("the call is answered");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
}

#[test]
fn prompts_and_tool_results_map_as_specified() {
    let mut mcp = Mcp::demo("mcp-mapping");
    mcp.initialize();
    let prompts = mcp.request(json!(1), "prompts/list", json!({}));
    let hi = prompts["result"]["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["name"] == "hi")
        .cloned()
        .expect("/hi listed");
    assert_eq!(hi["description"], "Say hello");
    assert_eq!(hi["arguments"][0]["name"], "args");
    assert_eq!(hi["arguments"][0]["required"], false);

    let unknown = mcp.request(json!(2), "prompts/get", json!({"name": "nope"}));
    assert_eq!(code(&unknown), -32602, "{unknown}");
    let broken = mcp.request(json!(3), "prompts/get", json!({"name": "broken"}));
    assert_eq!(broken["error"]["message"], "broken on purpose", "{broken}");
    let nothing = mcp.request(json!(4), "prompts/get", json!({"name": "nothing"}));
    assert_eq!(nothing["result"]["messages"], json!([]), "{nothing}");
    assert!(nothing["result"]["description"].is_string());

    let picture = mcp.request(json!(5), "tools/call", json!({"name": "picture"}));
    let block = &picture["result"]["content"][0];
    assert_eq!(
        (block["type"].as_str(), block["mimeType"].as_str()),
        (Some("image"), Some("image/png")),
        "{picture}"
    );
    assert!(block["data"].as_str().is_some_and(|d| !d.is_empty()));
    let fail = mcp.request(json!(6), "tools/call", json!({"name": "fail"}));
    assert_eq!(fail["result"]["isError"], true, "{fail}");
    assert_eq!(fail["result"]["content"][0]["text"], "it failed");
    // Built-in tool names are the agent's, not served here.
    let builtin = mcp.request(
        json!(7),
        "tools/call",
        json!({"name": "bash", "arguments": {}}),
    );
    assert_eq!(code(&builtin), -32602, "{builtin}");
    mcp.end_by_eof();
}

/// Runs a client script that cancels a slow call of the tools fixture's
/// `slow` tool; the extension must get `tool_cancel` (docs/PROTOCOL.md#cancellation).
fn run_cancel_client(tag: &str, interpreter: PathBuf, script: &str) {
    let t = TempDir::new(tag);
    let record = t.join("slow.rec");
    let cfg = json!({"name": "slow", "record": record, "tools": {"slow": {"kind": "slow"}}});
    let ext = tools_ext(&t.join("slow"), "slow", cfg);
    let args = json!([
        "mcp",
        "--no-ext",
        "--startup-timeout",
        "30",
        "--cwd",
        t.path(),
        "-e",
        ext
    ]);
    let mut cmd = Command::new(&interpreter);
    cmd.env("TOOLS_RECORD", &record);
    let (status, out) = run_script(cmd, script, &args, &t);
    let steps = [
        "initialize",
        "slow call running",
        "tool_cancel",
        "still serving",
    ];
    assert_client_passed(script, status, &out, &steps);
    let calls = frames(&record, "tool_call");
    let cancels = frames(&record, "tool_cancel");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["id"], calls[0]["id"]);
}

#[test]
fn python_sdk_client_cancels_a_slow_call() {
    run_cancel_client(
        "mcp-py-cancel",
        mcp_deps().join("py1/bin/python"),
        "py_cancel_client.py",
    );
}

#[test]
fn typescript_sdk_client_cancels_a_slow_call() {
    run_cancel_client(
        "mcp-ts-cancel",
        PathBuf::from("node"),
        "ts_cancel_client.cjs",
    );
}
