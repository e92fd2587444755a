//! `zot rpc` end to end: the real binary over pipes.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

fn demo(t: &TempDir, rec: &std::path::Path) -> std::path::PathBuf {
    ext_dir(
        &t.join("demo"),
        "demo",
        json!({
            "record": rec,
            "register": [command("hi"), tool("slow"), tool("echo"),
                         subscribe(&["turn_end"], &["tool_call"])],
            "on_ready": [{"type": "notify", "level": "success", "message": "loaded"}],
            "commands": {"hi": {"action": "display", "display": "hello"}},
            "tools": {"slow": {"sleep_ms": 1500, "content": [{"type": "text", "text": "finally"}]}},
            "guard": {"block_if": "forbidden", "reason": "no forbidden things"},
        }),
    )
}

#[test]
fn ready_event_then_ping_list_and_command() {
    let t = TempDir::new("rpc-basic");
    let rec = t.join("rec");
    let mut rpc = Rpc::start(&t, &[demo(&t, &rec)]);
    let ready = rpc.until("ready event", |v| v["type"] == "ready");
    assert_eq!(ready, json!({"type": "ready", "extensions": ["demo"]}));
    rpc.until("notify event", |v| {
        *v == json!({"type": "notify", "extension": "demo", "level": "success", "message": "loaded"})
    });
    let pong = rpc.call("1", json!({"type": "ping"}));
    assert_eq!(
        pong,
        json!({"type": "response", "id": "1", "command": "ping", "success": true, "data": {"pong": true}})
    );
    let list = rpc.call("2", json!({"type": "list"}));
    let ext = &list["data"]["extensions"][0];
    assert_eq!(
        (
            ext["name"].as_str(),
            ext["state"].as_str(),
            ext["scope"].as_str()
        ),
        (Some("demo"), Some("ready"), Some("explicit"))
    );
    assert!(ext["pid"].is_u64());
    assert_eq!(
        list["data"]["commands"],
        json!([{"name": "hi", "description": "hi command", "extension": "demo"}])
    );
    assert_eq!(
        list["data"]["tools"][0]["schema"],
        json!({"type": "object", "properties": {}})
    );
    let hi = rpc.call(
        "3",
        json!({"type": "command", "name": "hi", "args": "there"}),
    );
    assert_eq!(
        hi["data"],
        json!({"extension": "demo", "action": "display", "display": "hello"})
    );
    let unknown = rpc.call("4", json!({"type": "command", "name": "nope"}));
    assert_eq!(
        (unknown["success"].as_bool(), unknown["error"].as_str()),
        (Some(false), Some("unknown command /nope"))
    );
    rpc.call("5", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    assert!(recorded(&rec).iter().any(|f| f["type"] == "shutdown"));
}

#[test]
fn requests_run_concurrently_and_answer_out_of_order() {
    let t = TempDir::new("rpc-concurrent");
    let rec = t.join("rec");
    // The slow tool lives in its own (single-threaded) extension, so only
    // the host's concurrency decides whether the others wait for it.
    let slowpoke = ext_dir(
        &t.join("slowpoke"),
        "slowpoke",
        json!({"register": [tool("slower")],
               "tools": {"slower": {"sleep_ms": 6000, "content": [{"type": "text", "text": "finally"}]}}}),
    );
    let mut rpc = Rpc::start(&t, &[slowpoke, demo(&t, &rec)]);
    rpc.until("ready event", |v| v["type"] == "ready");
    rpc.send(json!({"type": "tool_call", "id": "slow", "name": "slower"}));
    rpc.send(json!({"type": "ping", "id": "fast"}));
    rpc.send(json!({"type": "command", "id": "cmd", "name": "hi"}));
    let mut order = Vec::new();
    while order.len() < 3 {
        let v = rpc.next().expect("a response");
        if v["type"] == "response" {
            order.push(v["id"].as_str().unwrap_or_default().to_string());
        }
    }
    assert_eq!(
        order.last().map(String::as_str),
        Some("slow"),
        "the slow tool answers last: {order:?}"
    );
    let slow = rpc.response("slow");
    assert_eq!(
        slow["data"]["content"],
        json!([{"type": "text", "text": "finally"}])
    );
}

#[test]
fn malformed_lines_get_parse_errors_and_the_host_keeps_going() {
    let t = TempDir::new("rpc-parse");
    let mut rpc = Rpc::start(&t, &[]);
    rpc.send_raw("this is not json");
    let err = rpc.until("parse error", |v| v["command"] == "parse");
    assert_eq!(err["success"], false);
    assert!(
        err["error"].as_str().unwrap().starts_with("invalid JSON"),
        "{err}"
    );
    rpc.send_raw("[1,2]");
    rpc.send_raw(r#"{"id":"x","type":5}"#);
    rpc.send_raw(r#"{"id":"y","type":"teleport"}"#);
    let typed = rpc.response("x");
    assert_eq!(
        (typed["command"].as_str(), typed["error"].as_str()),
        (Some("parse"), Some("a request needs a string `type`"))
    );
    rpc.send_raw(r#"{"id":"d","type":"ping","type":"shutdown"}"#);
    let twice = rpc.response("d");
    assert_eq!(twice["error"], "`type` is given twice: a request has one");
    rpc.send_raw(r#"{"id":"e","type":"ping","id":"f"}"#);
    let ids = rpc.until("duplicated id", |v| {
        v["error"] == "`id` is given twice: a request has one"
    });
    assert_eq!(ids.get("id"), None, "{ids}");
    let unknown = rpc.response("y");
    assert_eq!(unknown["error"], "unknown request type \"teleport\"");
    let mcp_like = rpc.call(
        "m",
        json!({"type": "tool_call", "name": "echo", "arguments": {"a": 1}}),
    );
    assert_eq!(
        mcp_like["error"],
        "a tool_call's arguments go in `args`, not `arguments`"
    );
    let missing = rpc.call("z", json!({"type": "command"}));
    assert_eq!(missing["error"], "missing string field `name`");
    assert_eq!(rpc.call("p", json!({"type": "ping"}))["success"], true);
    let arrays = rpc
        .seen
        .iter()
        .filter(|v| v["error"] == "a request must be a JSON object")
        .count();
    assert_eq!(arrays, 1);
}

#[test]
fn tool_call_intercept_and_event_requests() {
    let t = TempDir::new("rpc-tools");
    let rec = t.join("rec");
    let mut rpc = Rpc::start(&t, &[demo(&t, &rec)]);
    rpc.until("ready event", |v| v["type"] == "ready");
    let ok = rpc.call(
        "1",
        json!({"type": "tool_call", "name": "echo", "args": {"q": 1}, "tool_id": "t1"}),
    );
    assert_eq!(
        ok["data"],
        json!({"extension": "demo", "content": [{"type": "text", "text": "{\"q\": 1}"}], "is_error": false, "blocked": false})
    );
    let blocked = rpc.call(
        "2",
        json!({"type": "tool_call", "name": "echo", "args": {"q": "forbidden"}}),
    );
    assert_eq!(blocked["data"]["blocked"], true);
    assert_eq!(blocked["data"]["is_error"], true);
    assert_eq!(blocked["data"]["reason"], "no forbidden things");
    let verdict = rpc.call("3", json!({"type": "intercept", "event": "tool_call", "tool_name": "bash", "tool_args": {"command": "forbidden"}}));
    assert_eq!(
        verdict["data"],
        json!({"block": true, "reason": "no forbidden things"})
    );
    let allow = rpc.call(
        "4",
        json!({"type": "intercept", "event": "tool_call", "tool_name": "bash", "tool_args": {}}),
    );
    assert_eq!(allow["data"], json!({"block": false}));
    let bad = rpc.call("5", json!({"type": "intercept", "event": "turn_end"}));
    assert_eq!(bad["success"], false);
    let ev = rpc.call(
        "6",
        json!({"type": "event", "event": "turn_end", "stop": "end_turn"}),
    );
    assert_eq!(ev["data"], json!({"delivered_to": ["demo"]}));
    let none = rpc.call("7", json!({"type": "event", "event": "session_start"}));
    assert_eq!(none["data"], json!({"delivered_to": []}));
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    let frames = recorded(&rec);
    // Beside its payload an event carries the host's identifiers (docs/PROTOCOL.md#events).
    assert!(frames
        .iter()
        .any(|f| f["type"] == "event" && f["event"] == "turn_end" && f["stop"] == "end_turn"));
    let call = frames.iter().find(|f| f["type"] == "tool_call").unwrap();
    assert_eq!(call["args"], json!({"q": 1}));
}

#[test]
fn eof_and_signals_shut_down_gracefully() {
    for signal in [None, Some(libc::SIGTERM), Some(libc::SIGINT)] {
        let t = TempDir::new("rpc-stop");
        let rec = t.join("rec");
        let gc = t.join("gc.pid");
        let a = ext_dir(&t.join("a"), "a", json!({"record": rec, "grandchild": gc}));
        let mut rpc = Rpc::start(&t, &[a]);
        rpc.until("ready event", |v| v["type"] == "ready");
        let list = rpc.call("l", json!({"type": "list"}));
        let pid = list["data"]["extensions"][0]["pid"].as_u64().unwrap() as u32;
        let grandchild = read_pid(&gc);
        match signal {
            Some(sig) => rpc.signal(sig),
            None => rpc.close_stdin(),
        }
        assert_eq!(rpc.wait(), Some(0), "signal {signal:?}");
        assert!(
            recorded(&rec).iter().any(|f| f["type"] == "shutdown"),
            "signal {signal:?}"
        );
        assert!(process_gone(pid));
        wait_for("grandchild to die", || process_gone(grandchild));
    }
}

#[test]
fn only_json_on_stdout_diagnostics_on_stderr() {
    let t = TempDir::new("rpc-stdout");
    std::fs::create_dir_all(t.join("broken")).unwrap();
    std::fs::write(t.join("broken/extension.json"), "{").unwrap();
    let mut rpc = Rpc::start(&t, &[t.join("broken")]);
    let failed = rpc.until("extension_failed", |v| v["type"] == "extension_failed");
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("invalid manifest"),
        "{failed}"
    );
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    // Every line was parsed as JSON by `Rpc::next`.
    assert!(rpc.seen.iter().any(|v| v["type"] == "ready"));
}

#[test]
fn reload_restarts_and_picks_up_changes() {
    let t = TempDir::new("rpc-reload");
    let dir = t.join("a");
    ext_dir(&dir, "a", json!({"register": [command("old")]}));
    std::fs::create_dir_all(t.join("broken")).unwrap();
    std::fs::write(t.join("broken/extension.json"), r#"{"name": "broken"}"#).unwrap();
    // The reload report counts who was ready within the startup grace:
    // give Python on a loaded machine more than the 3 s default.
    let mut cmd = Rpc::command(&t, &[dir.clone(), t.join("broken")]);
    let mut rpc = Rpc::spawn(cmd.args(["--startup-timeout", "20"]));
    rpc.until("ready event", |v| v["type"] == "ready");
    let before = rpc.call("1", json!({"type": "list"}));
    let old_pid = before["data"]["extensions"][0]["pid"].as_u64().unwrap() as u32;
    ext_dir(
        &dir,
        "a",
        json!({"register": [command("new")], "commands": {"new": {"action": "display", "display": "fresh"}}}),
    );
    let report = rpc.call("2", json!({"type": "reload"}));
    let errors = report["data"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1);
    // Without the `bundles` feature a manifest without `exec` names it.
    let why = match cfg!(feature = "bundles") {
        true => "provides nothing: no `exec`",
        false => "no `exec`: a bundle (skills, a theme, no process) is not in this build: it needs the `bundles` feature",
    };
    assert!(errors[0].as_str().unwrap().contains(why), "{errors:?}");
    assert_eq!(
        (
            report["data"]["stopped"].as_u64(),
            report["data"]["loaded"].as_u64(),
            report["data"]["ready"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    assert!(process_gone(old_pid));
    rpc.until("registered after the reload", |v| {
        *v == json!({"type": "registered", "extension": "a"})
    });
    let fresh = rpc.call("3", json!({"type": "command", "name": "new"}));
    assert_eq!(fresh["data"]["display"], "fresh");
    let gone = rpc.call("4", json!({"type": "command", "name": "old"}));
    assert_eq!(gone["error"], "unknown command /old");
}

/// A command answer with an error is the error alone: the action it
/// came with is not carried out (as upstream).
#[test]
fn a_command_error_comes_without_its_action() {
    let t = TempDir::new("rpc-cmd-error");
    let ext = ext_dir(
        &t.join("e"),
        "e",
        json!({"register": [command("half")],
               "commands": {"half": {"action": "insert", "insert": "draft", "error": "it broke"}}}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    let half = rpc.call("1", json!({"type": "command", "name": "half"}));
    assert_eq!(
        half["data"],
        json!({"extension": "e", "action": "noop", "error": "it broke"}),
        "{half}"
    );
    rpc.call("2", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
}

/// A reload stops extensions as a shutdown does (docs/PROTOCOL.md#reload,
/// docs/PROTOCOL.md#shutdown): the requests already accepted are finished
/// first, also by an extension that exits as soon as it reads `shutdown`, as
/// upstream's SDK does.
#[test]
fn reload_finishes_the_requests_already_accepted() {
    let t = TempDir::new("rpc-reload-drain");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"tools": ["t"], "delay_ms": 500}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready event", |v| v["type"] == "ready");
    for i in 0..8 {
        let id = format!("t{i}");
        rpc.send(json!({"type": "tool_call", "id": id, "name": "t", "args": {"n": i}}));
    }
    rpc.send(json!({"type": "reload", "id": "r"}));
    for i in 0..8 {
        let r = rpc.response(&format!("t{i}"));
        assert_eq!(
            r["success"], true,
            "call {i} accepted before the reload: {r}"
        );
        let want = format!("t: {{\"n\": {i}}}");
        assert_eq!(r["data"]["content"][0]["text"], want.as_str(), "{r}");
    }
    let reload = rpc.response("r");
    assert_eq!(reload["success"], true, "{reload}");
    assert_eq!(reload["data"]["stopped"], 1, "{reload}");
    rpc.call("s", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
}

/// An extension that has not said hello has nothing to finish: a reload
/// stops it at once instead of waiting for its hello deadline (60 s
/// here, far beyond the test's deadline), and requests go on.
#[test]
fn reload_does_not_wait_for_the_hello_deadline_of_a_silent_extension() {
    let t = TempDir::new("rpc-reload-silent");
    let silent = ext_dir(&t.join("s"), "silent", json!({"hello": false}));
    let good = ext_dir(&t.join("g"), "good", json!({"register": [tool("echo")]}));
    // Startup and the reload each wait their startup grace for the silent
    // one: 1 s instead of 3 s, far below its hello limit (60 s here).
    let mut cmd = Rpc::command(&t, &[silent, good]);
    let mut rpc = Rpc::spawn(cmd.env("ZOT_STARTUP_TIMEOUT", "1"));
    rpc.until("ready event", |v| v["type"] == "ready");
    let reload = rpc.call("r", json!({"type": "reload"}));
    assert_eq!(reload["success"], true, "{reload}");
    assert_eq!(reload["data"]["stopped"], 2, "{reload}");
    rpc.until("good registered after the reload", |v| {
        *v == json!({"type": "registered", "extension": "good"})
    });
    let echo = rpc.call(
        "1",
        json!({"type": "tool_call", "name": "echo", "args": {"k": 1}}),
    );
    assert_eq!(echo["success"], true, "{echo}");
}

fn identity_fixture() -> PathBuf {
    fixture_path("identity")
}

/// `hello_ack` as the echo extension reports it through `zot rpc`
/// started with `args` (options before and after `rpc`).
fn ack_over_rpc(w: &Project, before: &[&str], after: &[&str]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zot"));
    cmd.args(before)
        .arg("rpc")
        .args(after)
        .args(["--no-ext", "-e"])
        .arg(identity_fixture())
        .current_dir(w.proj())
        .env("ZOT_HOME", w.home());
    let mut rpc = Rpc::spawn(&mut cmd);
    let reply = rpc.call("1", json!({"type": "command", "name": "ack"}));
    assert_eq!(reply["success"], true, "{reply}");
    let display = reply["data"]["display"].as_str().expect("display");
    let note = rpc.until("the note", |v| v["type"] == "notify");
    assert_eq!(
        note["message"].as_str(),
        Some(display),
        "note and display agree"
    );
    let ack = serde_json::from_str(display).expect("the ack as JSON");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc should end at EOF");
    ack
}

#[test]
fn provider_and_model_reach_hello_ack() {
    let w = Project::new("identity");
    let ack = ack_over_rpc(&w, &[], &["--provider", "anthropic", "--model", "claude-x"]);
    assert_eq!(ack, json!({"provider": "anthropic", "model": "claude-x"}));
    // Before `rpc` too, as every shared option.
    let ack = ack_over_rpc(&w, &["--model", "m2", "--provider", "p2"], &[]);
    assert_eq!(ack, json!({"provider": "p2", "model": "m2"}));
    // Not given: empty strings, as upstream sends.
    let ack = ack_over_rpc(&w, &[], &[]);
    assert_eq!(ack, json!({"provider": "", "model": ""}));

    // The interactive session.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("printf '/ack\\n' | \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_zot"))
        .args(["--no-ext", "--provider", "openai", "--model", "gpt-y", "-e"])
        .arg(identity_fixture())
        .current_dir(w.proj())
        .env("ZOT_HOME", w.home());
    let out = run_bounded(&mut cmd, "--provider openai --model gpt-y");
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r#"[/ack] {"model": "gpt-y", "provider": "openai"}"#),
        "{text}"
    );
    // A missing value is a usage error.
    let out = w.zot(&["rpc", "--model"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
}

#[test]
fn a_frame_with_a_lone_surrogate_escape_is_read_with_the_replacement_character() {
    let t = TempDir::new("rpc-surrogate-frame");
    // Python's json.dumps writes a str holding a lone surrogate (a file
    // name that is not UTF-8) as `\udce9`; the fixture echoes this text
    // in its tool result and a note.
    let cfg = json!({
        "name": "fnames",
        "register": [tool("fname")],
        "tools": {"fname": {"content": [{"type": "text", "text": "cafSURROGATE.txt"}]}},
    });
    let arg = cfg.to_string().replace("SURROGATE", "\\udce9");
    let manifest = json!({"name": "fnames", "exec": fixture(), "args": [arg]});
    let dir = write_manifest(&t.join("fnames"), &manifest);
    let mut rpc = Rpc::start(&t, &[dir]);
    rpc.wait_ready(1);
    let r = rpc.call("1", json!({"type": "tool_call", "name": "fname"}));
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(
        r["data"]["content"][0]["text"], "caf\u{fffd}.txt",
        "answered at once, not after the tool timeout: {r}"
    );
}
