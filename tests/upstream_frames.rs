//! Upstream's newer frames (SPEC 14.1-14.5): spontaneous panels,
//! `panel_resize`, `submit` / `submit_slash`, `before_agent_start`, the
//! new event names with `sequence` / `session_id` / `cwd`, and
//! case-insensitive command names, through the library, `zot rpc`,
//! `zot mcp` and the session. The extension is `fixtures/frames/ext.py`.

// Some tests need the `mcp` or `author` feature; their helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use zot_host::{EventPayload, ExtensionState, HostError};

fn frames_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/frames/ext.py")
}

/// An extension directory `t/name` running the frames fixture with `cfg`.
fn frames_ext(t: &TempDir, name: &str, cfg: Value) -> PathBuf {
    configured_ext(&t.join(name), name, &frames_fixture(), cfg)
}

/// The `event` frames recorded in `record`, as (event, frame).
fn events_in(record: &Path) -> Vec<Value> {
    frames(record, "event")
}

fn payload(fields: Value) -> EventPayload {
    serde_json::from_value(fields).expect("payload")
}

// ----- 14.4: event names and identifiers ----------------------------

#[test]
fn every_event_carries_sequence_session_id_and_cwd_and_extra_fields_pass() {
    let t = TempDir::new("frames-seq");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "obs",
        json!({"record": record, "events": ["session_end", "tool_result", "subagent_start"]}),
    );
    let mut cfg = config(&t, &[ext]);
    cfg.session_id = "session-123".into();
    let host = start_ready(cfg);
    // Events nobody subscribed to count too: one counter over all events.
    host.emit("turn_start", EventPayload::default()).unwrap();
    let fields = json!({"status": "completed", "executed": true, "tool_id": "c1",
                        "result": {"content": [], "is_error": false}});
    let to = host.emit("tool_result", payload(fields)).unwrap();
    assert_eq!(to, ["obs"]);
    let sub = json!({"agent_id": "a1", "agent_run_id": "r1", "name": "a1",
                     "session_id": "parent-9"});
    host.emit("subagent_start", payload(sub)).unwrap();
    host.emit("session_end", payload(json!({"reason": "shutdown"})))
        .unwrap();
    wait_for("three events recorded", || events_in(&record).len() == 3);
    let got = events_in(&record);
    let seq: Vec<u64> = got
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seq, [2, 3, 4], "one counter over every event: {got:?}");
    let cwd = t.path().to_string_lossy();
    assert_eq!(got[0]["session_id"], "session-123");
    assert_eq!(got[0]["cwd"], *cwd);
    assert_eq!(got[0]["status"], "completed");
    assert_eq!(got[0]["executed"], true);
    assert_eq!(got[0]["result"], json!({"content": [], "is_error": false}));
    // A payload's own session_id (a subagent's parent) passes unchanged.
    assert_eq!(got[1]["session_id"], "parent-9");
    assert_eq!(got[1]["agent_run_id"], "r1");
    assert_eq!(got[2]["reason"], "shutdown");
}

#[test]
fn a_payload_cannot_set_sequence_and_the_host_goes_on() {
    let t = TempDir::new("frames-seq-override");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "obs",
        json!({"record": record, "events": ["pre_compact"]}),
    );
    let host = start_ready(config(&t, &[ext]));
    let err = host
        .emit("pre_compact", payload(json!({"sequence": 999})))
        .unwrap_err();
    assert_eq!(err, HostError::ReservedField("sequence".into()));
    assert!(
        err.to_string()
            .contains("`sequence` is the host's event counter"),
        "{err}"
    );
    let err = host
        .emit("pre_compact", payload(json!({"type": "x"})))
        .unwrap_err();
    assert!(err.to_string().contains("`type`"), "{err}");
    host.emit("pre_compact", payload(json!({"compaction_id": "c1"})))
        .unwrap();
    wait_for("the event", || events_in(&record).len() == 1);
    let got = &events_in(&record)[0];
    assert_eq!(got["compaction_id"], "c1");
    assert_eq!(got["sequence"], 1, "refused events took no number: {got}");
}

#[test]
fn generated_session_ids_differ_between_hosts() {
    let t = TempDir::new("frames-sid");
    let ids: Vec<String> = (0..2)
        .map(|i| {
            let record = t.join(&format!("rec{i}"));
            let ext = frames_ext(
                &t,
                &format!("e{i}"),
                json!({"record": record, "events": ["session_start"]}),
            );
            let host = start_ready(config(&t, &[ext]));
            host.emit("session_start", EventPayload::default()).unwrap();
            wait_for("the event", || events_in(&record).len() == 1);
            events_in(&record)[0]["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(ids[0].len(), 36, "a UUID: {}", ids[0]);
}

#[test]
fn observational_events_cannot_be_intercepted() {
    let t = TempDir::new("frames-observe");
    let ext = frames_ext(
        &t,
        "g",
        json!({"intercept": ["session_end", "user_prompt_submit"]}),
    );
    let host = start_ready(config(&t, &[ext]));
    let list = host.list().unwrap();
    assert!(list.extensions[0].intercept.is_empty(), "{list:?}");
    let log = log_of(&t, "g");
    assert!(
        log.contains("cannot intercept \"session_end\" (and 1 more): an observational event"),
        "{log}"
    );
    let err = "tool_result"
        .parse::<zot_host::InterceptEvent>()
        .unwrap_err();
    assert!(err.to_string().contains("cannot be intercepted"), "{err}");
}

#[test]
fn rpc_events_take_the_session_id_option_and_refuse_sequence() {
    let t = TempDir::new("frames-rpc-seq");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "obs",
        json!({"record": record, "events": ["post_compact"]}),
    );
    let mut cmd = zot();
    cmd.args(["rpc", "--no-ext", "--session-id", "rpc-sess", "--cwd"])
        .arg(t.path())
        .arg("-e")
        .arg(&ext)
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "60");
    let mut rpc = Rpc::spawn(&mut cmd);
    // Subscribed only once ready, however slow its start.
    rpc.wait_ready(1);
    let bad = rpc.call(
        "1",
        json!({"type": "event", "event": "post_compact", "sequence": 5}),
    );
    assert_eq!(bad["success"], false, "{bad}");
    assert!(
        bad["error"].as_str().unwrap().contains("`sequence`"),
        "{bad}"
    );
    let ok = rpc.call(
        "2",
        json!({"type": "event", "event": "post_compact", "status": "failed", "error": "e",
               "message_count": 3}),
    );
    assert_eq!(ok["data"]["delivered_to"], json!(["obs"]), "{ok}");
    wait_for("the event", || events_in(&record).len() == 1);
    let got = &events_in(&record)[0];
    assert_eq!(got["session_id"], "rpc-sess");
    assert_eq!(
        (got["status"].clone(), got["message_count"].clone()),
        (json!("failed"), json!(3))
    );
    assert_eq!(got["sequence"], 1);
    assert!(
        got.get("id").is_none(),
        "the request's id is not a payload field: {got}"
    );
}

#[test]
fn the_session_emits_user_prompt_submit_and_session_end() {
    let t = TempDir::new("frames-session-events");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "obs",
        json!({"record": record,
               "events": ["session_start", "user_prompt_submit", "turn_start", "session_end"]}),
    );
    let mut z = Zot::start(&t, &[ext], &["--session-id", "s-42"]);
    z.send("hello there");
    z.expect("would submit: hello there");
    z.send("/quit");
    assert_eq!(z.wait(), Some(0));
    let got: Vec<(String, Value)> = events_in(&record)
        .into_iter()
        .map(|e| (e["event"].as_str().unwrap_or("").to_string(), e))
        .collect();
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "session_start",
            "user_prompt_submit",
            "turn_start",
            "session_end"
        ]
    );
    assert_eq!(got[1].1["text"], "hello there");
    assert_eq!(got[3].1["reason"], "shutdown");
    assert!(
        got.iter().all(|(_, e)| e["session_id"] == "s-42"),
        "{got:?}"
    );
    let shutdown_after = recorded(&record)
        .iter()
        .position(|f| f["type"] == "shutdown")
        .expect("shutdown recorded");
    let end_at = recorded(&record)
        .iter()
        .position(|f| f["event"] == "session_end")
        .unwrap();
    assert!(end_at < shutdown_after, "session_end before shutdown");
}

#[cfg(feature = "mcp")]
#[test]
fn zot_mcp_emits_session_end_at_its_end() {
    let t = TempDir::new("frames-mcp-end");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "obs",
        json!({"record": record, "events": ["session_start", "session_end"]}),
    );
    let mut cmd = zot();
    cmd.args(["mcp", "--no-ext", "--session-id", "m-1", "--cwd"])
        .arg(t.path())
        .arg("-e")
        .arg(&ext)
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "60");
    let mut mcp = Rpc::spawn(&mut cmd);
    mcp.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "t", "version": "1"}}}));
    mcp.until("initialize result", |v| v["id"] == 1);
    mcp.close_stdin();
    assert_eq!(mcp.wait(), Some(0));
    let names: Vec<Value> = events_in(&record)
        .iter()
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(names, [json!("session_start"), json!("session_end")]);
    let end = &events_in(&record)[1];
    assert_eq!(
        (end["reason"].clone(), end["session_id"].clone()),
        (json!("shutdown"), json!("m-1"))
    );
}

// ----- 14.5: case-insensitive command names --------------------------

/// An extension registering `Greet`, then `greet` (a conflict), and `hello`.
fn greeter(t: &TempDir, record: &Path) -> PathBuf {
    frames_ext(
        t,
        "greeter",
        json!({"record": record, "commands": ["Greet", "greet", "hello"]}),
    )
}

fn invoked_names(record: &Path) -> Vec<Value> {
    frames(record, "command_invoked")
        .iter()
        .map(|f| f["name"].clone())
        .collect()
}

#[test]
fn command_names_are_case_insensitive_in_the_library() {
    let t = TempDir::new("frames-case");
    let record = t.join("rec");
    let other = frames_ext(&t, "late", json!({"commands": ["HELLO"]}));
    let host = start_ready(config(&t, &[greeter(&t, &record), other]));
    assert_eq!(display_of(&host, "HELLO").as_deref(), Some("ran hello "));
    assert_eq!(display_of(&host, "greet").as_deref(), Some("ran Greet "));
    assert_eq!(invoked_names(&record), [json!("hello"), json!("Greet")]);
    let list = host.list().unwrap();
    let names: Vec<(&str, &str)> = (list.commands.iter())
        .map(|c| (c.name.as_str(), c.extension.as_str()))
        .collect();
    assert_eq!(names, [("Greet", "greeter"), ("hello", "greeter")]);
    let log = log_of(&t, "greeter");
    assert!(
        log.contains("command /greet ignored: /Greet is registered already"),
        "{log}"
    );
    let log = log_of(&t, "late");
    // "is shadowed" or "is now shadowed", as the registrations arrived.
    assert!(log.contains("command /HELLO is "), "{log}");
    assert!(
        log.contains("shadowed by extension greeter's /hello"),
        "{log}"
    );
}

#[cfg(feature = "mcp")]
#[test]
fn command_names_are_case_insensitive_in_rpc_mcp_and_the_session() {
    let t = TempDir::new("frames-case-surfaces");
    let record = t.join("rec");
    let ext = greeter(&t, &record);
    let mut rpc = Rpc::start(&t, std::slice::from_ref(&ext));
    let r = rpc.call(
        "1",
        json!({"type": "command", "name": "/HeLLo", "args": "x"}),
    );
    assert_eq!(r["data"]["display"], "ran hello x", "{r}");
    drop(rpc);

    let mut cmd = zot();
    cmd.args(["mcp", "--no-ext", "--cwd"])
        .arg(t.path())
        .arg("-e")
        .arg(&ext)
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "60");
    let mut mcp = Rpc::spawn(&mut cmd);
    mcp.send(json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                    "params": {"name": "GREET", "arguments": {"args": "y"},
                               "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}));
    let got = mcp.until("prompts/get result", |v| v["id"] == 1);
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"], "ran Greet y",
        "{got}"
    );
    drop(mcp);

    let mut z = Zot::start(&t, &[ext], &[]);
    z.send("/HELLO world");
    z.expect("ran hello world");
    z.send("/HELP");
    z.expect("/reload-ext");
    z.send("/QUIT");
    assert_eq!(z.wait(), Some(0));
    assert_eq!(
        invoked_names(&record),
        [json!("hello"), json!("Greet"), json!("hello")]
    );
}

#[cfg(feature = "author")]
#[test]
fn zot_ext_check_folds_command_names() {
    let t = TempDir::new("frames-case-check");
    let ext = greeter(&t, &t.join("rec"));
    let out = zot()
        .args(["ext", "check", "--json", "--command", "HELLO", "z"])
        .arg(&ext)
        .env("ZOT_STARTUP_TIMEOUT", "60")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let text = report.to_string();
    assert!(
        text.contains("command /greet differs from /Greet only in case"),
        "{text}"
    );
    assert!(text.contains("ran hello z"), "the probe ran /hello: {text}");
}

// ----- 14.1, 14.2: spontaneous panels, panel_resize, submit ---------

/// A spontaneous `open_panel` frame.
fn open_panel(id: &str, title: &str) -> Value {
    json!({"type": "open_panel", "panel": {"id": id, "title": title, "lines": ["one", "two"]}})
}

fn submit(kind: &str, text: &str) -> Value {
    json!({"type": kind, "text": text})
}

#[test]
fn spontaneous_panels_and_submits_reach_the_library() {
    let t = TempDir::new("frames-lib-panel");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "p",
        json!({"record": record, "commands": ["go"], "on_command": {"go": [
            {"type": "open_panel", "panel": {"title": "no id"}},
            {"type": "open_panel", "panel": {"id": " "}},
            open_panel("board", "Board"),
            submit("submit", "  "),
            submit("submit_slash", "no slash"),
            submit("submit", "summarize"),
            submit("submit_slash", "/HELLO world"),
        ]}}),
    );
    let host = start_ready(config(&t, &[ext]));
    assert_eq!(display_of(&host, "go").as_deref(), Some("ran go "));
    let opened = wait_event(&host, "open_panel", |e| {
        matches!(e, zot_host::HostEvent::OpenPanel { .. })
    });
    let zot_host::HostEvent::OpenPanel { extension, panel } = opened else {
        unreachable!()
    };
    assert_eq!((extension.as_str(), panel.id.as_str()), ("p", "board"));
    assert_eq!(panel.title.as_deref(), Some("Board"));
    let sub = wait_event(&host, "submit", |e| {
        matches!(e, zot_host::HostEvent::Submit { .. })
    });
    assert_eq!(
        sub,
        zot_host::HostEvent::Submit {
            extension: "p".into(),
            text: "summarize".into()
        }
    );
    let slash = wait_event(&host, "submit_slash", |e| {
        matches!(e, zot_host::HostEvent::SubmitSlash { .. })
    });
    assert_eq!(
        slash,
        zot_host::HostEvent::SubmitSlash {
            extension: "p".into(),
            text: "/HELLO world".into()
        }
    );
    host.panel_resize("p", "board", 120, 40).unwrap();
    wait_for("panel_resize recorded", || {
        !frames(&record, "panel_resize").is_empty()
    });
    assert_eq!(
        frames(&record, "panel_resize")[0],
        json!({"type": "panel_resize", "panel_id": "board", "width": 120, "height": 40})
    );
    let err = host.panel_resize("nobody", "board", 1, 1).unwrap_err();
    assert_eq!(err, HostError::NoSuchExtension("nobody".into()));
    let log = log_of(&t, "p");
    for want in [
        "dropped frame (field `panel`: missing field `id`)",
        "open_panel with an empty `panel.id`: not opened",
        "submit with empty text: ignored",
        "submit_slash text must start with `/`: \"no slash\" ignored",
    ] {
        assert!(log.contains(want), "log lacks {want:?}:\n{log}");
    }
    assert_eq!(
        display_of(&host, "go").as_deref(),
        Some("ran go "),
        "still works"
    );
}

#[test]
fn open_panel_before_hello_fails_the_handshake_and_submit_before_ready_is_ignored() {
    let t = TempDir::new("frames-early");
    let early = frames_ext(&t, "early", json!({"before_hello": [open_panel("x", "X")]}));
    let eager = frames_ext(
        &t,
        "eager",
        json!({"early": [submit("submit", "too soon")]}),
    );
    let host = start(config(&t, &[early, eager]));
    let list = host.list().unwrap();
    let early = list.extension("early").unwrap();
    assert!(
        matches!(early.state, ExtensionState::Failed { .. }),
        "{:?}",
        early.state
    );
    let why = early.state.error().unwrap_or("");
    assert!(
        why.contains("first frame was `open_panel`, expected `hello`"),
        "{why}"
    );
    wait_ext_ready(&host, "eager");
    let log = log_of(&t, "eager");
    assert!(log.contains("submit before `ready`: ignored"), "{log}");
    assert!(
        !host
            .events()
            .try_iter()
            .any(|e| matches!(e, zot_host::HostEvent::Submit { .. })),
        "a submit before ready reached the embedder"
    );
}

#[test]
fn rpc_surfaces_open_panel_submit_and_takes_panel_resize() {
    let t = TempDir::new("frames-rpc-panel");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "p",
        json!({"record": record, "commands": ["go"], "on_command": {"go": [
            open_panel("board", "Board"), submit("submit", "hi"), submit("submit_slash", "/go")]}}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.call("1", json!({"type": "command", "name": "go"}));
    let opened = rpc.until("open_panel event", |v| v["type"] == "open_panel");
    assert_eq!(opened["extension"], "p");
    assert_eq!(
        opened["panel"],
        json!({"id": "board", "title": "Board", "lines": ["one", "two"]})
    );
    let sub = rpc.until("submit event", |v| v["type"] == "submit");
    assert_eq!(
        sub,
        json!({"type": "submit", "extension": "p", "text": "hi"})
    );
    let slash = rpc.until("submit_slash event", |v| v["type"] == "submit_slash");
    assert_eq!(slash["text"], "/go");
    let ok = rpc.call(
        "2",
        json!({"type": "panel_resize", "extension": "p", "panel_id": "board", "width": 90, "height": 30}),
    );
    assert_eq!(
        (ok["success"].clone(), ok["data"].clone()),
        (json!(true), json!({})),
        "{ok}"
    );
    let bad = rpc.call(
        "3",
        json!({"type": "panel_resize", "extension": "p", "panel_id": "board", "width": -1, "height": 30}),
    );
    assert_eq!(bad["success"], false);
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("`width` must be a whole number"),
        "{bad}"
    );
    wait_for("panel_resize", || {
        !frames(&record, "panel_resize").is_empty()
    });
    assert_eq!(frames(&record, "panel_resize")[0]["width"], 90);
}

/// The session's extension: `/board` opens a panel by itself, `/sub`
/// submits a prompt and slash lines, `/flood` submits 20 prompts; after
/// its panel is closed it renders it again.
fn session_ext(t: &TempDir, record: &Path) -> PathBuf {
    let flood: Vec<Value> = (0..20)
        .map(|i| submit("submit", &format!("flood {i}")))
        .collect();
    frames_ext(
        t,
        "s",
        json!({"record": record, "commands": ["board", "sub", "flood", "hello"],
               "on_command": {
                   "board": [open_panel("board", "Board")],
                   "sub": [submit("submit", "from the extension"),
                           submit("submit_slash", "/quit"),
                           submit("submit_slash", "/HELLO there")],
                   "flood": flood},
               "react": {"panel_close": [
                   {"type": "panel_render", "panel_id": "board", "lines": ["ghost"]}]}}),
    )
}

#[test]
fn the_session_shows_spontaneous_panels_and_runs_submits_through_a_pipe() {
    let t = TempDir::new("frames-session-pipe");
    let record = t.join("rec");
    let mut z = Zot::start(&t, &[session_ext(&t, &record)], &[]);
    z.send("/board");
    z.expect("Board");
    wait_for("panel_resize on open", || {
        !frames(&record, "panel_resize").is_empty()
    });
    let resize = &frames(&record, "panel_resize")[0];
    assert_eq!(resize["panel_id"], "board");
    assert!(resize["width"].as_u64().unwrap() > 0, "{resize}");
    z.send("/key esc");
    z.expect("panel closed: s/board");
    // Its render after the close is not shown (logged).
    wait_for("the render after close is logged", || {
        log_of(&t, "s").contains("panel_render for panel \"board\", which is not open")
    });
    z.send("/sub");
    z.expect("would submit: from the extension");
    z.expect("extension s sent /quit: an extension cannot end the session");
    z.expect("ran hello there");
    z.send("/flood");
    z.expect("16 submissions of s wait already: dropped (1 so far)");
    z.expect("would submit: flood 15");
    z.send("/hello after");
    z.expect("ran hello after");
    z.send("/quit");
    assert_eq!(z.wait(), Some(0));
    z.assert_never_shown("ghost");
    z.assert_never_shown("flood 16");
    let submitted = events_in(&record).len();
    assert_eq!(submitted, 0, "nothing subscribed");
    let log = log_of(&t, "s");
    assert!(log.contains("sent /quit"), "{log}");
}

#[test]
fn the_session_on_a_terminal_resizes_panels_and_runs_submits() {
    let t = TempDir::new("frames-session-pty");
    let record = t.join("rec");
    let ext = session_ext(&t, &record);
    let rec = record.to_string_lossy().into_owned();
    let steps = json!([
        ["expect", "ready: s"],
        ["send", "/board"],
        ["expect", "Board"],
        ["wait_file", rec, "\"width\":80,\"height\":24"],
        ["size", 40, 132],
        ["wait_file", rec, "\"width\":132,\"height\":40"],
        ["send", "/sub"],
        ["expect", "would submit: from the extension"],
        ["expect", "ran hello there"],
        ["send", "/quit"],
    ]);
    let out = std::process::Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/frames/pty_drive.py"),
    )
    .arg(steps.to_string())
    .arg("--")
    .arg(env!("CARGO_BIN_EXE_zot"))
    .args(["--no-ext", "--cwd"])
    .arg(t.path())
    .arg("-e")
    .arg(&ext)
    .env("ZOT_HOME", t.join("home"))
    .env("ZOT_STARTUP_TIMEOUT", "20")
    .env("NO_COLOR", "1")
    .output()
    .expect("run the pty driver");
    let stdout = stdout_of(&out);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "{stdout}\n{}",
        stderr_of(&out)
    );
    let sizes: Vec<(Value, Value)> = frames(&record, "panel_resize")
        .iter()
        .map(|f| (f["width"].clone(), f["height"].clone()))
        .collect();
    assert_eq!(sizes, [(json!(80), json!(24)), (json!(132), json!(40))]);
}

// ----- 14.3: before_agent_start ---------------------------------------

fn intercepts_in(record: &Path) -> Vec<Value> {
    frames(record, "event_intercept")
}

fn host_notes(host: &zot_host::Host) -> Vec<String> {
    host.events()
        .try_iter()
        .filter_map(|e| match e {
            zot_host::HostEvent::HostNote { message, .. } => Some(message),
            _ => None,
        })
        .collect()
}

#[test]
fn before_agent_start_chains_replacements_serially_in_precedence_order() {
    let t = TempDir::new("frames-bas");
    let (r1, r2) = (t.join("r1"), t.join("r2"));
    let guard = |name: &str, record: &Path, prompt: Value| {
        frames_ext(
            &t,
            name,
            json!({"record": record, "intercept": ["before_agent_start"], "prompt": prompt}),
        )
    };
    let exts = [
        guard("g1", &r1, json!({"append": " +g1"})),
        // `block` means nothing here: its prompt counts.
        guard("g2", &r2, json!({"append": " +g2", "block": true})),
        frames_ext(&t, "bystander", json!({})),
    ];
    let mut cfg = config(&t, &exts);
    cfg.session_id = "sess-1".into();
    let host = start_ready(cfg);
    assert_eq!(host.before_agent_start("base").unwrap(), "base +g1 +g2");
    let asked = &intercepts_in(&r2)[0];
    assert_eq!(
        asked["system_prompt"], "base +g1",
        "each guard gets the previous result"
    );
    assert_eq!(asked["event"], "before_agent_start");
    for (key, want) in [
        ("session_id", json!("sess-1")),
        ("agent_run_id", json!("run-1")),
        ("provider", json!("test-provider")),
        ("model", json!("test-model")),
        ("cwd", json!(t.path())),
    ] {
        assert_eq!(asked[key], want, "{key} in {asked}");
    }
    assert_eq!(host.before_agent_start("").unwrap(), " +g1 +g2");
    assert_eq!(
        intercepts_in(&r1)[1]["agent_run_id"],
        "run-2",
        "a new pass, a new id"
    );
    assert_eq!(
        intercepts_in(&r1)[1]["system_prompt"],
        "",
        "an empty prompt is sent"
    );
    assert!(host_notes(&host).is_empty());
}

#[test]
fn before_agent_start_keeps_the_prompt_on_every_unusable_answer_and_says_why() {
    let t = TempDir::new("frames-bas-bad");
    let record = t.join("rec");
    let guard = |name: &str, cfg: Value| {
        let mut cfg = cfg;
        cfg["intercept"] = json!(["before_agent_start"]);
        frames_ext(&t, name, cfg)
    };
    let exts = [
        guard("number", json!({"prompt": {"set": 7}})),
        guard("huge", json!({"prompt": {"huge": 2 << 20}})),
        guard("slow", json!({"prompt": {"sleep_ms": 3000, "set": "late"}})),
        guard("quitter", json!({"exit_on_prompt": 3})),
        guard("eraser", json!({"prompt": {"set": ""}})),
        guard("good", json!({"record": record, "prompt": {"append": "!"}})),
    ];
    set_manifest_field(&exts[3], "restart", json!("never"));
    let mut cfg = config(&t, &exts);
    cfg.timeouts.intercept = Duration::from_millis(1000);
    let host = start_ready(cfg);
    assert_eq!(host.before_agent_start("keep me").unwrap(), "!");
    assert_eq!(
        intercepts_in(&record)[0]["system_prompt"],
        "",
        "\"\" removed it"
    );
    let notes = host_notes(&host).join("\n");
    for want in [
        "extension number answered a system_prompt that is a number, not a string: the system prompt is kept",
        "extension huge answered a system_prompt of 2097154 bytes, over the 1 MiB limit",
        "extension slow could not answer (no answer within 1 s)",
        "extension quitter could not answer",
    ] {
        assert!(notes.contains(want), "notes lack {want:?}:\n{notes}");
    }
    assert!(log_of(&t, "number").contains("a number, not a string"));
    // The late answer is dropped, and the host goes on.
    assert_eq!(host.before_agent_start("again").unwrap(), "!");
}

#[test]
fn rpc_intercept_before_agent_start_answers_the_prompt() {
    let t = TempDir::new("frames-bas-rpc");
    let g = frames_ext(
        &t,
        "g",
        json!({"intercept": ["before_agent_start"], "prompt": {"append": " (g)"}}),
    );
    let n = frames_ext(
        &t,
        "n",
        json!({"intercept": ["before_agent_start"], "prompt": {"set": [1]}}),
    );
    let mut rpc = Rpc::start(&t, &[g, n]);
    // Both guards are in the chain only once both are ready.
    rpc.wait_ready(2);
    let r = rpc.call(
        "1",
        json!({"type": "intercept", "event": "before_agent_start", "system_prompt": "sys"}),
    );
    assert_eq!(r["data"], json!({"system_prompt": "sys (g)"}), "{r}");
    let note = rpc.until("host note", |v| v["type"] == "host_note");
    assert!(
        note["message"]
            .as_str()
            .unwrap()
            .contains("an array, not a string"),
        "{note}"
    );
    let bad = rpc.call(
        "2",
        json!({"type": "intercept", "event": "before_agent_start", "system_prompt": 5}),
    );
    assert_eq!(bad["success"], false, "{bad}");
    assert!(
        bad["error"].as_str().unwrap().contains("bad event fields"),
        "{bad}"
    );
}

#[test]
fn the_session_prepares_its_system_prompt_and_hands_it_to_the_agent() {
    let t = TempDir::new("frames-bas-session");
    let record = t.join("rec");
    std::fs::write(t.join("prompt.txt"), "You are terse.").unwrap();
    let g = frames_ext(
        &t,
        "g",
        json!({"record": record, "intercept": ["before_agent_start"], "prompt": {"append": " Use tabs."}}),
    );
    let at = format!("@{}", t.join("prompt.txt").display());
    let agent = "printf 'sys=%s' \"$ZOT_SYSTEM_PROMPT\"";
    let mut z = Zot::start(&t, &[g], &["--system-prompt", &at, "--agent-cmd", agent]);
    z.send("/prompt");
    z.expect("before_agent_start runs before the first turn");
    z.send("hi");
    z.expect("assistant: sys=You are terse. Use tabs.");
    z.send("/PROMPT");
    z.expect("system prompt (24 bytes, after before_agent_start): You are terse. Use tabs.");
    z.send("/clear");
    z.send("/prompt");
    z.expect("after before_agent_start): You are terse. Use tabs.");
    z.send("/quit");
    assert_eq!(z.wait(), Some(0));
    let asked = intercepts_in(&record);
    assert_eq!(
        asked.len(),
        2,
        "before the first turn and after /clear: {asked:?}"
    );
    assert!(
        asked.iter().all(|a| a["system_prompt"] == "You are terse."),
        "from the base: {asked:?}"
    );
    assert_ne!(asked[0]["agent_run_id"], asked[1]["agent_run_id"]);
}
