//! Hostile clients and inputs (the user's side, not the extensions'):
//! what reaches `zot mcp`, `zot rpc` and the session on stdin, and how
//! they behave when the client stops reading; and manifest files that
//! are not plain files or point out of their directory. Fixtures are in
//! `fixtures/hostile-inputs/`.

// Some tests need the `mcp` or `author` feature; their helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// `zot mcp --no-ext -e EXT...` over pipes, with its own ZOT_HOME.
fn mcp(t: &TempDir, exts: &[PathBuf]) -> Rpc {
    Rpc::spawn(&mut Rpc::mcp_command(t, exts, 30))
}

fn call_tool(rpc: &mut Rpc, id: u64, name: &str, arguments: Value) {
    rpc.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}}));
}

/// Closes stdin, expects exit 0, returns what was written to stderr.
fn end_by_eof(rpc: &mut Rpc, what: &str) -> String {
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "{what} exit status");
    let mut stderr = String::new();
    if let Some(mut e) = rpc.child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    stderr
}

/// Notes a flooding extension writes while the MCP client reads nothing.
const FLOOD_NOTES: u64 = 200_000;
const FLOOD_NOTE_BYTES: u64 = 1000;
/// Far below the ~200 MB the flood takes when it is kept.
const MCP_RSS_BOUND_KB: u64 = 64 * 1024;

#[cfg(feature = "mcp")]
#[test]
fn mcp_drops_notes_for_a_client_that_stops_reading_and_memory_stays_bounded() {
    let t = TempDir::new("hostile-mcp-unread");
    let done = t.join("flood.done");
    // A client that really stops reading: 64 lines ahead at most.
    let mut rpc = Rpc::spawn_within(
        &mut Rpc::mcp_command(&t, &[fixture_path("hostile-inputs/flood")], 30),
        Some(64),
    );
    rpc.mcp_initialize("2025-06-18");
    // From here on nothing is read until the flood is written.
    let args = json!({"count": FLOOD_NOTES, "size": FLOOD_NOTE_BYTES, "done": done});
    call_tool(&mut rpc, 1, "flood", args);
    wait_for_within("the flood to be written", Duration::from_secs(180), || {
        done.exists()
    });
    // What zot has not handled yet comes before the tool's answer.
    let r = rpc.mcp_response(&json!(1));
    assert_eq!(
        r["result"]["content"][0]["text"],
        format!("flooded {FLOOD_NOTES}"),
        "{r}"
    );
    let peak = peak_rss_kb(rpc.child.id()).expect("VmHWM of zot mcp");
    assert!(
        peak < MCP_RSS_BOUND_KB,
        "zot mcp peaked at {peak} kB while its client read nothing during a flood of \
         {FLOOD_NOTES} notes of {FLOOD_NOTE_BYTES} bytes: notes are kept without bound"
    );
    let delivered = |rpc: &Rpc| {
        rpc.seen
            .iter()
            .filter(|v| v["method"] == "notifications/message")
            .count() as u64
    };
    let before = delivered(&rpc);
    assert!(before < FLOOD_NOTES, "every note was kept, none dropped");
    // Reading again: notes get through again, and the count is told.
    call_tool(
        &mut rpc,
        2,
        "flood",
        json!({"count": 1, "size": 1, "done": done}),
    );
    rpc.mcp_response(&json!(2));
    assert_eq!(delivered(&rpc), before + 1, "the note after the flood");
    let stderr = end_by_eof(&mut rpc, "zot mcp");
    assert!(
        stderr.contains("zot mcp: notes come faster than the client reads them: some are dropped"),
        "stderr should say when notes start being dropped: {stderr}"
    );
    let total = format!(
        "zot mcp: {} notes dropped: they came faster than the client read them",
        FLOOD_NOTES - before
    );
    assert!(
        stderr.contains(&total),
        "stderr should end with {total:?}: {stderr}"
    );
}

/// `zot ext list --json` in `t` (project `t`, ZOT_HOME `t/home`).
fn list_json(t: &TempDir) -> Vec<Value> {
    let out = zot()
        .args(["ext", "list", "--json", "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .output()
        .expect("run zot ext list");
    list_rows(&out)
}

#[test]
fn broken_symlinked_extension_dirs_are_reported_not_skipped() {
    // Extension directories may be symlinks (a checkout being worked
    // on); one whose target moved away, or a link loop, is an invalid
    // extension to report, like any unreadable manifest.
    let t = TempDir::new("hostile-links");
    let exts = t.join("home/extensions");
    std::fs::create_dir_all(&exts).expect("extensions dir");
    std::os::unix::fs::symlink(t.join("moved-away"), exts.join("dangling")).expect("symlink");
    std::os::unix::fs::symlink("loop", exts.join("loop")).expect("symlink loop");
    ext_dir(&exts.join("good"), "good", json!({}));
    let rows = list_json(&t);
    let status = |dir: &str| {
        let row = rows
            .iter()
            .find(|r| r["dir"] == exts.join(dir).to_str().expect("utf-8 path"))
            .unwrap_or_else(|| panic!("{dir} is missing from zot ext list: {rows:?}"));
        row["status"].as_str().unwrap_or_default().to_string()
    };
    assert!(status("dangling").starts_with("invalid: "), "{rows:?}");
    assert!(status("loop").starts_with("invalid: "), "{rows:?}");
    assert_eq!(status("good"), "ok", "{rows:?}");

    let mut cmd = zot();
    cmd.args(["rpc", "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "60")
        .env("ZOT_STARTUP_TIMEOUT", "20");
    let mut rpc = Rpc::spawn(&mut cmd);
    let list = rpc.call("1", json!({"type": "list"}));
    let exts_listed = list["data"]["extensions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for name in ["dangling", "loop"] {
        let e = exts_listed
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} is missing from rpc list: {list}"));
        let error = e["error"].as_str().unwrap_or_default();
        assert!(
            e["state"] == "failed" && error.contains(&format!("{name}/extension.json")),
            "{name} should be failed, naming its manifest: {e}"
        );
    }
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc exit status");
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_refuses_a_request_whose_id_is_already_in_flight() {
    // MCP: "The request ID MUST NOT have been previously used by the
    // requestor within the same session". A client that reuses one
    // while the first is still running gets an error for the second,
    // not silence (its answer could not be told from the first's).
    let t = TempDir::new("hostile-mcp-dup-id");
    let mut rpc = mcp(&t, &[fixture_path("hostile-inputs/flood")]);
    rpc.mcp_initialize("2025-06-18");
    call_tool(&mut rpc, 7, "slow", json!({"ms": 3000}));
    call_tool(&mut rpc, 7, "slow", json!({"ms": 0}));
    rpc.send(json!({"jsonrpc": "2.0", "id": 8, "method": "ping"}));
    rpc.mcp_response(&json!(8));
    let ours = |rpc: &Rpc| -> Vec<Value> {
        rpc.seen
            .iter()
            .filter(|v| v["id"] == 7 && v.get("method").is_none())
            .cloned()
            .collect()
    };
    rpc.until_nth("two answers for id 7", 2, |v| {
        v["id"] == 7 && v.get("method").is_none()
    });
    let answers = ours(&rpc);
    assert_eq!(answers[0]["error"]["code"], -32600, "{answers:?}");
    let message = answers[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("already") && message.contains('7'),
        "{answers:?}"
    );
    assert_eq!(
        answers[1]["result"]["content"][0]["text"], "slow done",
        "{answers:?}"
    );
    end_by_eof(&mut rpc, "zot mcp");
    assert_eq!(
        ours(&rpc).len(),
        2,
        "one answer per request: {:?}",
        ours(&rpc)
    );
}

/// Runs `zot ARGS --no-ext -e flood` with stdin left open, sends
/// `before` (which must make the flood extension write its pid to
/// `pid`), reads stdout until a line containing `seen`, then closes
/// stdout and sends `after`: a client that is gone but whose stdin
/// pipe lingers. zot must notice, stop its extensions and exit 0.
fn gone_reader(args: &[&str], before: &str, seen: &str, after: &str) {
    use std::io::{BufRead, BufReader, Write};
    let t = TempDir::new("hostile-gone-reader");
    let pid_file = t.join("ext.pid");
    let mut child = zot()
        .args(args)
        .args(["--no-ext", "-e"])
        .arg(fixture_path("hostile-inputs/flood"))
        .arg("--cwd")
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "60")
        .env("ZOT_STARTUP_TIMEOUT", "20")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn zot");
    let mut stdin = child.stdin.take().expect("stdin");
    let before = before.replace("PID", pid_file.to_str().expect("utf-8 path"));
    writeln!(stdin, "{before}").expect("write the first line");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains(seen) {
        line.clear();
        let n = stdout.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "zot {args:?} ended before printing {seen:?}");
    }
    let ext = read_pid(&pid_file);
    drop(stdout); // the client stops reading: every write now fails
                  // Written until zot stops reading them (then the pipe breaks).
    for _ in 0..3 {
        let _ = writeln!(stdin, "{after}").and_then(|()| stdin.flush());
    }
    let (status, ended) = exit_within(&mut child, DEADLINE);
    assert!(
        ended,
        "zot {args:?} kept running after its stdout was closed (stdin still open)"
    );
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    assert_eq!(
        status.code(),
        Some(0),
        "zot {args:?}: {status}; stderr: {stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "zot {args:?} panicked: {stderr}"
    );
    wait_for("the extension to be stopped", || process_gone(ext));
    drop(stdin);
}

#[test]
fn rpc_ends_when_its_client_closes_stdout() {
    gone_reader(
        &["rpc"],
        r#"{"type":"tool_call","id":"1","name":"slow","args":{"pid":"PID"}}"#,
        "slow done",
        r#"{"type":"ping","id":"2"}"#,
    );
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_ends_when_its_client_closes_stdout() {
    gone_reader(
        &["mcp"],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"pid":"PID"}}}"#,
        "slow done",
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    );
}

#[test]
fn the_session_ends_when_its_stdout_is_closed() {
    gone_reader(&[], r#"/call slow {"pid":"PID"}"#, "slow done", "/tools");
}

#[cfg(feature = "mcp")]
#[test]
fn rpc_and_mcp_answer_request_ids_of_every_json_type() {
    let t = TempDir::new("hostile-ids");
    // zot rpc: ids are strings (docs/PROTOCOL.md#zot-rpc); `null` is no id; any other type
    // is refused by name, and each line still gets exactly one answer.
    let mut rpc = Rpc::start(&t, &[]);
    for id in [json!(1), json!({"a": 1}), json!([1]), json!(true)] {
        rpc.send(json!({"type": "ping", "id": id}));
        let v = rpc.until("the answer to a ping with a non-string id", |v| {
            v["type"] == "response" && v["command"] == "parse"
        });
        assert_eq!(v["error"], "`id` must be a string", "id {id}: {v}");
        assert!(v.get("id").is_none(), "id {id}: {v}");
        rpc.seen.clear();
    }
    rpc.send(json!({"type": "ping", "id": null}));
    let v = rpc.until("the answer to a ping with id null", |v| {
        v["command"] == "ping"
    });
    assert!(v.get("id").is_none() && v["data"]["pong"] == true, "{v}");
    let v = rpc.call("", json!({"type": "ping"}));
    assert_eq!(v["data"]["pong"], true, "an empty string is an id: {v}");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc exit status");

    // zot mcp: string and integer ids are echoed; MCP forbids null, and
    // JSON-RPC other types: -32600 with id null.
    let mut mcp = mcp(&t, &[]);
    for id in [json!("s"), json!(-3), json!(1.5)] {
        mcp.send(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
        let v = mcp.mcp_response(&id);
        assert_eq!(v["result"], json!({}), "id {id}: {v}");
    }
    for id in [json!(null), json!({"a": 1}), json!([1]), json!(false)] {
        mcp.send(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
        let v = mcp.mcp_response(&json!(null));
        assert_eq!(v["error"]["code"], -32600, "id {id}: {v}");
        mcp.seen.clear();
    }
    mcp.send(json!({"jsonrpc": "2.0", "id": "end", "method": "ping"}));
    mcp.mcp_response(&json!("end"));
    end_by_eof(&mut mcp, "zot mcp");
}

#[cfg(feature = "mcp")]
#[test]
fn rpc_and_mcp_refuse_lines_over_16_mib_and_go_on() {
    let t = TempDir::new("hostile-long-lines");
    let mut long = br#"{"type":"ping","id":"long","pad":""#.to_vec();
    long.extend(std::iter::repeat_n(b'x', 17 << 20));
    long.extend(b"\"}\n");
    let mut rpc = Rpc::start(&t, &[]);
    rpc.send_bytes(&long);
    rpc.send(json!({"type": "ping", "id": "after"}));
    let v = rpc.until("the parse error for the long line", |v| {
        v["command"] == "parse"
    });
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("longer than 16777216"), "{v}");
    assert_eq!(rpc.response("after")["data"]["pong"], true);
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc exit status");

    let mut mcp = mcp(&t, &[]);
    mcp.send_bytes(&long);
    mcp.send(json!({"jsonrpc": "2.0", "id": "after", "method": "ping"}));
    let v = mcp.mcp_response(&json!(null));
    assert_eq!(v["error"]["code"], -32600, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("longer than 16777216"), "{v}");
    mcp.mcp_response(&json!("after"));
    end_by_eof(&mut mcp, "zot mcp");
}

#[test]
fn a_relative_zot_home_works_for_installed_extensions() {
    // `ZOT_HOME=state zot ...`: the extension's `exec` is relative to its
    // directory, which is relative to where zot runs, not to where the
    // extension runs (its own directory).
    let t = TempDir::new("hostile-relative-home");
    let out = zot()
        .args(["ext", "install"])
        .arg(fixture_path("hostile-inputs/flood"))
        .current_dir(t.path())
        .env("ZOT_HOME", "state")
        .output()
        .expect("run zot ext install");
    assert_ok(&out);
    assert!(
        t.join("state/extensions/flood/flood.py").exists(),
        "not installed"
    );
    let mut cmd = zot();
    cmd.arg("rpc")
        .current_dir(t.path())
        .env("ZOT_HOME", "state")
        .env("ZOT_HELLO_TIMEOUT", "60")
        .env("ZOT_STARTUP_TIMEOUT", "20");
    let mut rpc = Rpc::spawn(&mut cmd);
    let list = rpc.call("1", json!({"type": "list"}));
    let flood = &list["data"]["extensions"][0];
    assert_eq!(flood["state"], "ready", "the installed extension: {list}");
    assert_eq!(
        flood["dir"],
        t.join("state/extensions/flood").to_str().expect("utf-8"),
        "{list}"
    );
    let r = rpc.call(
        "2",
        json!({"type": "tool_call", "name": "slow", "args": {}}),
    );
    assert_eq!(r["data"]["content"][0]["text"], "slow done", "{r}");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc exit status");
    assert!(
        t.join("state/logs/ext-flood.log").exists(),
        "the log goes under the relative ZOT_HOME"
    );
}

#[test]
fn a_nul_byte_in_exec_or_args_makes_the_manifest_invalid() {
    // No program name or argument can hold a NUL: such a manifest can
    // never start, so it is invalid, naming the field, not "ok" in
    // `zot ext list` and then failing to start without naming it.
    let t = TempDir::new("hostile-nul-exec");
    for (dir, manifest) in [
        (
            "exec-nul",
            json!({"name": "exec-nul", "exec": "/bin/ec\u{0}ho"}),
        ),
        (
            "args-nul",
            json!({"name": "args-nul", "exec": "/bin/echo", "args": ["a", "b\u{0}c"]}),
        ),
    ] {
        let dir = t.join("home/extensions").join(dir);
        write_manifest(&dir, &manifest);
    }
    let rows = list_json(&t);
    for (name, field) in [("exec-nul", "exec"), ("args-nul", "args")] {
        let row = rows
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} is missing from zot ext list: {rows:?}"));
        assert_eq!(
            row["status"],
            format!("invalid: field `{field}` contains a NUL byte"),
            "{row}"
        );
    }
}

#[test]
fn a_zot_home_that_is_a_file_costs_the_logs_not_the_host() {
    // Logs cannot be written under a ZOT_HOME that is a file: zot says
    // which log on stderr, writes its log lines there, and keeps working.
    let t = TempDir::new("hostile-home-file");
    std::fs::write(t.join("home"), "not a directory").expect("write the file");
    let mut rpc = Rpc::start(&t, &[fixture_path("hostile-inputs/flood")]);
    let r = rpc.call(
        "1",
        json!({"type": "tool_call", "name": "slow", "args": {}}),
    );
    assert_eq!(r["data"]["content"][0]["text"], "slow done", "{r}");
    let stderr = end_by_eof(&mut rpc, "zot rpc");
    let log = t.join("home/logs/ext-flood.log");
    assert!(
        stderr.contains(&format!(
            "zot: cannot open log {}: Not a directory",
            log.display()
        )) && stderr.contains("ext-flood: started"),
        "stderr should name the log and carry its lines: {stderr}"
    );
}

#[test]
fn a_second_ctrl_c_to_rpc_leaves_nothing_running() {
    // docs/PROTOCOL.md#shutdown: the second Ctrl-C skips the wait for a tool call that
    // never ends, from an extension that ignores `shutdown` and SIGTERM
    // and has a child of its own: zot still exits 0, both are gone.
    let t = TempDir::new("hostile-ctrl-c-twice");
    let gc = t.join("gc.pid");
    let ext = ext_dir(
        &t.join("stuck"),
        "stuck",
        json!({"tools": {"t": {"hang": true}}, "ignore_shutdown": true, "grandchild": gc}),
    );
    // The stop that follows is the graces' 2 s and 1 s, not the subject.
    let mut rpc = Rpc::spawn(Rpc::command(&t, &[ext]).env("ZOT_SHUTDOWN_GRACE", SHORT_STOP));
    let list = rpc.call("l", json!({"type": "list"}));
    let pid = list["data"]["extensions"][0]["pid"].as_u64().expect("pid") as u32;
    let grandchild = read_pid(&gc);
    rpc.send(json!({"type": "tool_call", "id": "t", "name": "t"}));
    rpc.signal(libc::SIGINT);
    // The first must have taken effect (new requests refused) before
    // the second, or the two may arrive as one.
    let mut n = 0;
    wait_for("the first Ctrl-C to start the shutdown", || {
        n += 1;
        rpc.call(&format!("p{n}"), json!({"type": "list"}))["success"] == false
    });
    rpc.signal(libc::SIGINT);
    let r = rpc.response("t");
    assert_eq!(r["success"], false, "the hung call fails at once: {r}");
    assert_eq!(rpc.wait(), Some(0), "zot rpc exit status");
    wait_for("the extension to be gone", || process_gone(pid));
    wait_for("its child to be gone", || process_gone(grandchild));
}

/// Params for a 2026-07-28 `subscriptions/listen` to tool list changes.
fn listen_params() -> Value {
    json!({"notifications": {"toolsListChanged": true},
           "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}})
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_bounds_listen_streams_and_refuses_their_ids_twice() {
    // Each open `subscriptions/listen` stream is kept until the end and
    // costs a notification per list change: a client opening them by
    // the thousand would grow zot mcp and its output without bound.
    const MAX_LISTENS: usize = 64;
    let t = TempDir::new("hostile-mcp-listens");
    let mut mcp = mcp(&t, &[]);
    let listen = |mcp: &mut Rpc, id: Value| {
        mcp.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                        "params": listen_params()}),
        );
    };
    let acked = |mcp: &Rpc| {
        mcp.seen
            .iter()
            .filter(|v| v["method"] == "notifications/subscriptions/acknowledged")
            .count()
    };
    listen(&mut mcp, json!("a"));
    listen(&mut mcp, json!("a"));
    let v = mcp.mcp_response(&json!("a"));
    assert_eq!(v["error"]["code"], -32600, "a second listen with id a: {v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("already used"),
        "{v}"
    );
    mcp.seen.clear();
    mcp.send(json!({"jsonrpc": "2.0", "id": "a", "method": "tools/list", "params": {}}));
    let v = mcp.mcp_response(&json!("a"));
    assert_eq!(
        v["error"]["code"], -32600,
        "a request with an open listen's id: {v}"
    );
    for n in 1..MAX_LISTENS {
        listen(&mut mcp, json!(n));
    }
    listen(&mut mcp, json!("one too many"));
    let v = mcp.mcp_response(&json!("one too many"));
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 64"),
        "{v}"
    );
    assert_eq!(
        acked(&mcp),
        MAX_LISTENS - 1,
        "acknowledged before the refusal"
    );
    mcp.send(json!({"jsonrpc": "2.0", "id": "end", "method": "ping"}));
    mcp.mcp_response(&json!("end"));
    end_by_eof(&mut mcp, "zot mcp");
    let closed = mcp
        .seen
        .iter()
        .filter(|v| {
            v["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_string()
                || v["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_number()
        })
        .count();
    assert_eq!(
        closed, MAX_LISTENS,
        "every open stream is answered at the end"
    );
}

/// Control characters an extension's files can hold (a directory name,
/// a manifest's `version`): OSC 52 (writes the clipboard), a screen
/// clear, a carriage return, C1 CSI and DEL; no `/`, so a directory can
/// be named with it.
const EVIL: &str = "\u{1b}]52;c;aGk=\u{7}\u{1b}[2J\r\u{9b}1m\u{7f}";
/// How zot shows it.
const EVIL_SHOWN: &str = "^[]52;c;aGk=^G^[[2J^M\\u{9b}1m^?";

/// Fails if a control character (other than a newline or a tab) reached
/// `out`'s stdout or stderr, or if `EVIL` is not shown there at all.
fn assert_inert(what: &str, out: &std::process::Output) {
    let (stdout, stderr) = (stdout_of(out), stderr_of(out));
    for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        let raw: Vec<&str> = (text.split('\n'))
            .filter(|l| l.contains(|c: char| c.is_control() && c != '\t'))
            .collect();
        assert!(
            raw.is_empty(),
            "{what}: control characters reached the terminal on {stream}: {raw:?}"
        );
    }
    assert!(
        stdout.contains(EVIL_SHOWN) || stderr.contains(EVIL_SHOWN),
        "{what} should show {EVIL_SHOWN}:\nstdout: {stdout}\nstderr: {stderr}"
    );
}

#[cfg(feature = "author")]
#[cfg(feature = "mcp")]
#[test]
fn text_from_extension_files_reaches_the_terminal_inert() {
    // A cloned project can hold an extension directory named with
    // escape sequences, and any manifest may hold them in its fields:
    // zot prints both (startup errors, tables, reports), so an installed
    // extension could clear the user's screen or write their clipboard
    // before it ever runs. Every such text is shown in caret notation.
    let t = TempDir::new("hostile-escapes-in-files");
    let project = t.join(".zot/extensions").join(EVIL);
    write_manifest_text(&project, r#"{"name": "#);
    let src = t.join("src");
    let manifest = json!({"name": "evil", "exec": "./missing", "version": EVIL,
                          "description": EVIL, "enabled": false});
    write_manifest(&src, &manifest);
    let run = |args: &[&std::ffi::OsStr]| {
        zot()
            .args(args)
            .current_dir(t.path())
            .env("ZOT_HOME", t.join("home"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run zot")
    };
    let install = run(&["ext".as_ref(), "install".as_ref(), src.as_os_str()]);
    assert_ok(&install);
    assert_inert("zot ext install", &install);
    let list = run(&["ext".as_ref(), "list".as_ref()]);
    assert_ok(&list);
    assert_inert("zot ext list", &list);
    let check = run(&["ext".as_ref(), "check".as_ref(), src.as_os_str()]);
    assert_inert("zot ext check", &check);
    let refused = run(&["ext".as_ref(), "install".as_ref(), project.as_os_str()]);
    assert_fails_naming(&refused, &["cannot install", "invalid JSON"]);
    assert_inert("zot ext install of an invalid manifest", &refused);
    // The invalid project manifest is reported at every host's startup.
    // (The stdout of rpc and mcp is JSON, escaped by serde, for programs.)
    for (what, args) in [
        ("zot rpc", &["rpc"][..]),
        ("zot mcp", &["mcp"]),
        ("zot", &[]),
    ] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let mut out = run(&args);
        assert_ok(&out);
        let stderr = stderr_of(&out);
        assert!(stderr.contains("invalid manifest"), "{what}: {stderr}");
        if what != "zot" {
            out.stdout.clear();
        }
        assert_inert(what, &out);
    }
}

#[test]
fn zot_ext_says_plainly_that_a_zot_home_file_is_not_a_directory() {
    // Not "no extensions installed": the user must learn that their
    // ZOT_HOME is wrong, not that their extensions are gone.
    let t = TempDir::new("hostile-home-file-ext");
    let home = t.join("home");
    std::fs::write(&home, "not a directory").expect("write the file");
    let want = format!("$ZOT_HOME ({}) is not a directory", home.display());
    let flood = fixture_path("hostile-inputs/flood");
    let flood = flood.to_str().expect("utf-8 path");
    for args in [
        &["ext", "list"][..],
        &["ext", "list", "--json"],
        &["ext", "install", flood],
        &["ext", "remove", "flood", "--yes"],
        &["ext", "disable", "flood"],
        &["ext", "logs", "flood"],
    ] {
        let out = zot()
            .args(args)
            .current_dir(t.path())
            .env("ZOT_HOME", &home)
            .output()
            .expect("run zot ext");
        assert_fails_naming(&out, &[&want]);
        assert_eq!(stdout_of(&out), "", "zot {args:?} prints nothing on stdout");
    }
}

/// An embedder's relative `HostConfig::ext_paths` entry (such as
/// `./my-ext`) starts: the host makes its paths
/// absolute when it starts, before any child runs in its own directory.
#[test]
fn a_relative_ext_path_from_an_embedder_starts() {
    let t = TempDir::new("hostile-relative-ext");
    // Integration tests run in the package root.
    let relative = PathBuf::from("./fixtures/hostile-inputs/flood");
    assert!(
        relative.join("extension.json").is_file(),
        "not run from the package root"
    );
    let host = start_ready(config(&t, &[relative]));
    let list = host.list().expect("list");
    assert_eq!(
        list.extensions[0].dir,
        fixture_path("hostile-inputs/flood"),
        "made absolute"
    );
    let call = zot_host::ToolRequest::new("slow", json!({}));
    let done = host.call_tool(call).expect("the tool answers").result();
    assert_eq!(done.content[0].text(), Some("slow done"), "{done:?}");
    host.shutdown();
}

/// An `exec` found through a relative `$PATH` entry is relative to
/// zot's directory, not the extension's, where it runs: the error says
/// so instead of blaming the `#!` line.
#[test]
fn a_relative_exec_is_named_as_the_cause_when_it_cannot_start() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new("hostile-relative-exec");
    std::fs::create_dir_all(t.join("bin")).expect("mkdir bin");
    let script = t.join("bin/relext");
    std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dir = t.join("e");
    let manifest = json!({"name": "e", "exec": "relext", "restart": "never"});
    write_manifest(&dir, &manifest);
    let mut cmd = zot();
    cmd.args(["rpc", "--no-ext", "-e"])
        .arg(&dir)
        .current_dir(t.path())
        .env("PATH", "bin")
        .env("ZOT_HOME", t.join("home"));
    let mut rpc = Rpc::spawn(&mut cmd);
    let list = rpc.call("1", json!({"type": "list"}));
    let ext = &list["data"]["extensions"][0];
    let error = ext["error"].as_str().unwrap_or_default();
    assert_eq!(ext["state"], "failed", "{list}");
    assert!(
        error.contains("a relative path") && error.contains(dir.to_str().expect("utf-8")),
        "{error}"
    );
    assert!(!error.contains("#!"), "{error}");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

/// Project extensions that must not be read: `evil` (a symlink to
/// /dev/zero), `fifo` (a FIFO), `big` (over 1 MiB); and `bom`, a good
/// one whose manifest starts with a UTF-8 byte order mark.
fn hostile_project(w: &Project) {
    let evil = w.project_ext("evil");
    fs::create_dir_all(&evil).expect("evil dir");
    std::os::unix::fs::symlink("/dev/zero", evil.join("extension.json")).expect("symlink");
    let fifo = w.project_ext("fifo");
    fs::create_dir_all(&fifo).expect("fifo dir");
    mkfifo(&fifo.join("extension.json"));
    let big = w.project_ext("big");
    let padded = format!(
        "{}{}",
        manifest_text("big"),
        " ".repeat(2 << 20) // valid JSON, just too large
    );
    write_manifest_text(&big, &padded);
    // Its program lies in the project, so that trusting it can bind it.
    let bom = w.project_ext("bom");
    fs::create_dir_all(&bom).expect("bom dir");
    fs::copy(fixture(), bom.join("ext.py")).expect("copy the fixture");
    let manifest =
        json!({"name": "bom", "exec": "./ext.py", "args": [json!({"name": "bom"}).to_string()]});
    write_manifest_text(&bom, &format!("\u{feff}{manifest}"));
}

#[test]
fn ext_list_refuses_manifests_that_are_not_small_regular_files() {
    let w = Project::new("list-hostile");
    hostile_project(&w);
    // Trusting every project extension reads the same hostile files: it
    // skips the invalid ones and trusts the rest, without hanging.
    let trusted = w.zot(&["ext", "trust", "--yes"]);
    assert_ok(&trusted);
    assert!(
        stderr_of(&trusted).contains("skipped (invalid manifest)"),
        "{trusted:?}"
    );
    let statuses = w.statuses();
    let evil = status_of(&statuses, "evil");
    assert!(
        evil.starts_with("invalid: ") && evil.contains("not a regular file (a device)"),
        "{evil}"
    );
    let fifo = status_of(&statuses, "fifo");
    assert!(fifo.contains("not a regular file (a FIFO)"), "{fifo}");
    let big = status_of(&statuses, "big");
    assert!(big.contains("larger than 1048576 bytes"), "{big}");
    assert_eq!(status_of(&statuses, "bom"), "ok");
    // The text listing names the file too.
    let out = w.zot(&["ext", "list"]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("not a regular file"), "{text}");
}

#[test]
fn rpc_list_reports_hostile_manifests_and_starts_the_rest() {
    let w = Project::new("rpc-hostile");
    hostile_project(&w);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -d {MEMORY_LIMIT_KB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_zot"))
        .args(["rpc", "--trust-project"])
        .current_dir(w.proj())
        .env("ZOT_HOME", w.home())
        .env("ZOT_STARTUP_TIMEOUT", STARTUP);
    let mut rpc = Rpc::spawn(&mut cmd);
    let ready = rpc.until("ready event", |v| v["type"] == "ready");
    assert_eq!(ready["extensions"], json!(["bom"]), "{ready}");
    let list = rpc.call("1", json!({"type": "list"}));
    assert_eq!(list["success"], true, "{list}");
    let exts = list["data"]["extensions"].as_array().expect("extensions");
    let find = |name: &str| {
        exts.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from list: {list}"))
    };
    for (name, why) in [
        ("evil", "not a regular file (a device)"),
        ("fifo", "not a regular file (a FIFO)"),
        ("big", "larger than 1048576 bytes"),
    ] {
        let e = find(name);
        assert_eq!(e["state"], "failed", "{e}");
        let error = e["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(why) && error.contains("extension.json"),
            "{name}: {e}"
        );
    }
    assert_eq!(find("bom")["state"], "ready", "{list}");
    // SIGTERM still works: the host was never stuck in discovery.
    rpc.signal(libc::SIGTERM);
    assert_eq!(rpc.wait(), Some(0), "zot rpc should stop on SIGTERM");
}

#[test]
fn ext_install_refuses_a_manifest_that_is_not_a_small_regular_file() {
    let w = Project::new("install-hostile");
    let src = w.tmp.join("src-zero");
    fs::create_dir_all(&src).expect("src");
    std::os::unix::fs::symlink("/dev/zero", src.join("extension.json")).expect("symlink");
    let out = w.zot(&["ext", "install", src.to_str().expect("utf-8 path")]);
    assert_fails_naming(
        &out,
        &[
            "extension.json",
            "not a regular file",
            "nothing was installed",
        ],
    );

    let big = w.tmp.join("src-big");
    write_manifest_text(&big, &" ".repeat(2 << 20));
    let out = w.zot(&["ext", "install", big.to_str().expect("utf-8 path")]);
    assert_fails_naming(&out, &["extension.json", "larger than 1048576 bytes"]);

    let fifo = w.tmp.join("src-fifo");
    fs::create_dir_all(&fifo).expect("src");
    mkfifo(&fifo.join("extension.json"));
    let out = w.zot(&["ext", "install", fifo.to_str().expect("utf-8 path")]);
    assert_fails_naming(&out, &["extension.json", "nothing was installed"]);
    assert!(w.installed().is_empty(), "left behind: {:?}", w.installed());

    let bom = w.tmp.join("src-bom");
    let text = format!("\u{feff}{}", manifest_text("bommed"));
    write_manifest_text(&bom, &text);
    assert_ok(&w.zot(&["ext", "install", bom.to_str().expect("utf-8 path")]));
    assert_eq!(w.installed(), ["bommed"]);
    // And disable keeps the mark while editing the field.
    assert_ok(&w.zot(&["ext", "disable", "bommed"]));
    let edited = fs::read(w.global_ext("bommed").join("extension.json")).expect("manifest");
    assert!(
        edited.starts_with(b"\xEF\xBB\xBF"),
        "byte order mark dropped"
    );
    let statuses = w.statuses();
    assert_eq!(status_of(&statuses, "bommed"), "disabled");
}

#[test]
fn disable_never_writes_through_a_symlink_out_of_the_extension() {
    let w = Project::new("symlink-write");
    let outside = w.tmp.join("precious.json");
    fs::write(&outside, manifest_text("linky")).expect("outside file");
    let before = fs::read(&outside).expect("read");
    let inode = fs::metadata(&outside).expect("stat").ino();
    let dir = w.global_ext("linky");
    fs::create_dir_all(&dir).expect("dir");
    std::os::unix::fs::symlink(&outside, dir.join("extension.json")).expect("symlink");

    let out = w.zot(&["ext", "disable", "linky"]);
    assert_fails_naming(
        &out,
        &[
            "refusing to edit",
            "outside the extension directory",
            "precious.json",
        ],
    );
    assert_eq!(
        fs::read(&outside).expect("read"),
        before,
        "outside file changed"
    );
    assert_eq!(
        fs::metadata(&outside).expect("stat").ino(),
        inode,
        "replaced"
    );
    let leftovers: Vec<_> = fs::read_dir(w.tmp.path())
        .expect("read tmp")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary files outside: {leftovers:?}"
    );

    // A symlink that stays inside the directory is edited where it points.
    let inside = w.global_ext("inside");
    fs::create_dir_all(inside.join("conf")).expect("dir");
    fs::write(inside.join("conf/real.json"), manifest_text("inside")).expect("real");
    std::os::unix::fs::symlink("conf/real.json", inside.join("extension.json")).expect("link");
    assert_ok(&w.zot(&["ext", "disable", "inside"]));
    let real: Value =
        serde_json::from_slice(&fs::read(inside.join("conf/real.json")).expect("read"))
            .expect("json");
    assert_eq!(real["enabled"], false);
    assert!(fs::symlink_metadata(inside.join("extension.json"))
        .expect("stat")
        .file_type()
        .is_symlink());
}
