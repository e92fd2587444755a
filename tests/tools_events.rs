//! Tools and lifecycle events (docs/PROTOCOL.md#tools, docs/PROTOCOL.md#events,
//! docs/PROTOCOL.md#exits) against real extension processes, then upstream's
//! newer tool frames (docs/PROTOCOL.md#capabilities, docs/PROTOCOL.md#cancellation,
//! docs/PROTOCOL.md#calls-from-extensions) and its structured, deferred and
//! namespaced tools (docs/PROTOCOL.md#structured-and-deferred-tools);
//! interception is in tests/interception.rs.

// Some tests need the `mcp`, `author` or `tool-extras` feature; their
// helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author", feature = "tool-extras")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
#[cfg(feature = "tool-extras")]
use zot_host::Exposure;
use zot_host::{
    Action, BuiltinVerdict, Content, EventPayload, Host, HostError, HostEvent, ToolOutcome,
    ToolRequest, ToolResult,
};

#[test]
fn tool_results_are_mapped_and_attributed() {
    let t = TempDir::new("tools");
    let host = start_one(
        &t,
        json!({
            "register": [tool("echo"), tool("fails"), tool("pic"), tool("badpic"), tool("empty"), tool("odd")],
            "tools": {
                "fails": {"content": [{"type": "text", "text": "nope"}], "is_error": true},
                "pic": {"content": [{"type": "image", "mime_type": "image/png", "data": "iVBORw0KGgo="}]},
                "badpic": {"content": [{"type": "image", "mime_type": "image/png", "data": "not base64!"}]},
                "empty": {"content": []},
                "odd": {"content": [{"type": "video", "url": "x"}]},
            },
        }),
    );
    let ok = host
        .call_tool(call("echo", json!({"city": "Berlin"})))
        .unwrap()
        .result();
    assert_eq!(ok.extension, "a");
    assert_eq!(
        ok.content,
        [json!({"type": "text", "text": "{\"city\": \"Berlin\"}"})]
    );
    assert!(!ok.is_error && !ok.blocked);
    let none = host.call_tool(call("echo", Value::Null)).unwrap().result();
    assert_eq!(
        none.content[0].text(),
        Some("{}"),
        "missing args become {{}}"
    );
    let fails = host.call_tool(call("fails", json!({}))).unwrap().result();
    assert!(fails.is_error);
    let pic = host.call_tool(call("pic", json!({}))).unwrap().result();
    assert_eq!(
        pic.content,
        [json!({"type": "image", "mime_type": "image/png", "data": "iVBORw0KGgo="})]
    );
    let bad = host.call_tool(call("badpic", json!({}))).unwrap().result();
    assert_eq!(
        bad.content,
        [json!({"type": "text", "text": "error: image block `data` is not valid base64"})]
    );
    let empty = host.call_tool(call("empty", json!({}))).unwrap().result();
    assert_eq!(
        empty.content,
        [json!({"type": "text", "text": "(extension returned no content)"})]
    );
    let odd = host.call_tool(call("odd", json!({}))).unwrap().result();
    assert_eq!(
        odd.content,
        [json!({"type": "text", "text": "error: unsupported content block type \"video\""})]
    );
    assert_eq!(
        host.call_tool(call("ghost", json!({})))
            .unwrap_err()
            .to_string(),
        "unknown tool ghost"
    );
}

#[test]
fn tools_named_like_builtins_are_never_dispatched() {
    let t = TempDir::new("builtin-tool");
    let rec = t.join("rec");
    let host = start_one(
        &t,
        json!({"record": rec, "register": [tool("bash"), tool("read")]}),
    );
    // The pipeline gives the embedder its verdict; nothing is dispatched.
    let verdict = host.call_tool(call("bash", json!({}))).unwrap();
    assert!(
        matches!(verdict, ToolOutcome::Builtin(BuiltinVerdict::Run { .. })),
        "{verdict:?}"
    );
    assert!(host
        .call_tool_direct(call("bash", json!({})))
        .unwrap_err()
        .to_string()
        .contains("built in"));
    assert!(host.list().unwrap().tools.is_empty());
    host.shutdown();
    assert!(!recorded(&rec).iter().any(|f| f["type"] == "tool_call"));
    assert!(log_of(&t, "a").contains("tool bash is shadowed by the built-in tool"));
}

#[test]
fn the_same_tool_from_two_extensions_goes_to_the_higher_precedence() {
    let t = TempDir::new("tool-prec");
    let high = ext_dir(
        &t.join("h"),
        "high",
        json!({"register_delay_ms": 150, "register": [tool("dup")]}),
    );
    let low = ext_dir(&t.join("l"), "low", json!({"register": [tool("dup")]}));
    let mut cfg = config(&t, &[high, low]);
    // Both send `ready`; keep the legacy watchdog out of the way on a
    // loaded machine so startup waits for the late registration.
    cfg.timeouts.ready_idle = Duration::from_secs(10);
    let host = start_ready(cfg);
    assert_eq!(
        host.call_tool(call("dup", json!({})))
            .unwrap()
            .result()
            .extension,
        "high"
    );
    let tools = host.list().unwrap().tools;
    assert_eq!((tools.len(), tools[0].extension.as_str()), (1, "high"));
}

#[test]
fn tool_timeout_and_crash_fail_the_call() {
    let t = TempDir::new("tool-fail");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [tool("hang"), tool("boom")], "tools": {"hang": {"hang": true}, "boom": {"crash": 4}}}),
    );
    // About the exit itself, not the restart that follows it (docs/PROTOCOL.md#supervision).
    set_manifest_field(&a, "restart", json!("never"));
    let mut cfg = config(&t, &[a]);
    cfg.timeouts.tool = Duration::from_millis(300);
    let host = start_ready(cfg);
    assert_eq!(
        host.call_tool(call("hang", json!({})))
            .unwrap_err()
            .to_string(),
        "extension a did not answer tool hang within 300 ms"
    );
    assert_eq!(
        host.call_tool(call("boom", json!({})))
            .unwrap_err()
            .to_string(),
        "extension a exited (exit code 4)"
    );
    assert!(host.list().unwrap().tools.is_empty());
}

#[test]
fn crash_mid_tool_does_not_wait_for_the_timeout() {
    let t = TempDir::new("tool-crash");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [tool("boom")], "tools": {"boom": {"crash": 4}}}),
    );
    let mut cfg = config(&t, &[a]);
    cfg.timeouts.tool = Duration::from_secs(120);
    let host = start_ready(cfg);
    let started = Instant::now();
    assert_eq!(
        host.call_tool(call("boom", json!({})))
            .unwrap_err()
            .to_string(),
        "extension a exited (exit code 4)"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn thousands_of_events_arrive_in_order_and_none_are_lost_before_shutdown() {
    let t = TempDir::new("events");
    let (r1, r2) = (t.join("r1"), t.join("r2"));
    let sub = |dir: &str, rec: &std::path::Path| {
        ext_dir(
            &t.join(dir),
            dir,
            json!({"record": rec, "register": [subscribe(&["turn_start", "turn_end"], &[])]}),
        )
    };
    let mut cfg = config(&t, &[sub("s1", &r1), sub("s2", &r2)]);
    // Working through 3000 events may take a starved fixture longer than
    // the tests' 500 ms shutdown grace; the grace is not the subject here.
    cfg.timeouts.shutdown_grace = DEADLINE;
    let host = start_ready(cfg);
    const N: u64 = 3000;
    for step in 0..N {
        let to = host
            .emit(
                "turn_start",
                EventPayload {
                    step: Some(step),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(to, ["s1", "s2"]);
    }
    assert!(
        host.emit("tool_call", EventPayload::default())
            .unwrap()
            .is_empty(),
        "nobody subscribed"
    );
    host.shutdown();
    for rec in [r1, r2] {
        let frames = recorded(&rec);
        let steps: Vec<u64> = frames
            .iter()
            .filter(|f| f["type"] == "event")
            .map(|f| f["step"].as_u64().unwrap())
            .collect();
        assert_eq!(steps, (0..N).collect::<Vec<_>>());
        assert_eq!(
            frames.last().unwrap()["type"],
            "shutdown",
            "events come before shutdown"
        );
    }
}

#[test]
fn a_subscriber_that_never_reads_slows_nobody() {
    let t = TempDir::new("stuck");
    let rec = t.join("rec");
    let stuck = ext_dir(
        &t.join("stuck"),
        "stuck",
        json!({"stop_reading": true, "register": [subscribe(&["turn_end"], &[])]}),
    );
    let good = ext_dir(
        &t.join("good"),
        "good",
        json!({"record": rec, "register": [subscribe(&["turn_end"], &[]), command("ping")],
               "commands": {"ping": {"action": "display", "display": "pong"}}}),
    );
    let mut cfg = config(&t, &[stuck, good]);
    cfg.event_queue_limit = 256 * 1024;
    let host = start_ready(cfg);
    let text = "x".repeat(1000);
    const N: usize = 2000; // 2 MB to a pipe that holds 64 KiB
    const BATCH: usize = 100;
    let delivered = || {
        recorded(&rec)
            .iter()
            .filter(|f| f["type"] == "event")
            .count()
    };
    for sent in (BATCH..=N).step_by(BATCH) {
        for _ in 0..BATCH {
            host.emit(
                "turn_end",
                EventPayload {
                    stop: Some("end_turn".into()),
                    error: Some(text.clone()),
                    ..Default::default()
                },
            )
            .unwrap();
        }
        // Paced by the reading subscriber, so a loaded machine never
        // fills its queue; the stuck one's fills all the same.
        wait_for(&format!("good to receive {sent} events"), || {
            delivered() >= sent
        });
    }
    assert_eq!(display_of(&host, "ping").as_deref(), Some("pong"));
    let started = Instant::now();
    host.shutdown();
    // Grace 0.5 s + SIGTERM; far from hanging on the full pipe.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(delivered(), N, "the reading subscriber got every event");
    let log = log_of(&t, "stuck");
    assert!(
        log.contains("not reading its stdin: dropping events"),
        "{log}"
    );
    assert!(log.contains("events in total: its queue was full"), "{log}");
}

// ----------------------------------------------------------------------
// Upstream's event names with sequence, session_id and cwd
// (docs/PROTOCOL.md#events); the extension is fixtures/frames/ext.py.

// ----- event names and identifiers ----------------------------

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
    let mut rpc = Rpc::spawn(Rpc::command(&t, &[ext]).args(["--session-id", "rpc-sess"]));
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
    let mut mcp = Rpc::spawn(Rpc::mcp_command(&t, &[ext], 60).args(["--session-id", "m-1"]));
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

// ===== upstream's newer tool frames (docs/PROTOCOL.md#tools) ================
//
// Upstream's newer tool frames (docs/PROTOCOL.md#tools): capabilities,
// cancellation, interactive tools, `call_tool` and the pipeline's
// `tool_result` / `permission_decision` events, driven through the
// library with `fixtures/tools/ext.py`, which behaves like an extension
// built with upstream's Go SDK. The rpc, MCP and session surfaces of
// these frames are at the end.

/// The text of a result's blocks.
fn text(o: &ToolResult) -> String {
    o.content.iter().filter_map(Content::text).collect()
}

/// An extension `name` of the tools fixture recording to `<t>/<name>.rec`.
fn ext(t: &TempDir, name: &str, mut cfg: Value) -> PathBuf {
    cfg["record"] = json!(t.join(&format!("{name}.rec")));
    tools_ext(&t.join(name), name, cfg)
}

fn rec(t: &TempDir, name: &str) -> PathBuf {
    t.join(&format!("{name}.rec"))
}

/// The `tool_call` frames extension `name` got for tool `tool`.
fn calls_of(t: &TempDir, name: &str, tool: &str) -> Vec<Value> {
    let calls = frames(&rec(t, name), "tool_call");
    calls.into_iter().filter(|c| c["name"] == tool).collect()
}

/// Waits until extension `name` has got a `tool_call` for `tool`; its id.
fn wait_call(t: &TempDir, name: &str, tool: &str) -> String {
    wait_for(&format!("tool_call {tool} at {name}"), || {
        !calls_of(t, name, tool).is_empty()
    });
    calls_of(t, name, tool)[0]["id"]
        .as_str()
        .expect("string id")
        .to_string()
}

/// Waits until extension `name` has got `tool_cancel` for `id`.
fn wait_cancel(t: &TempDir, name: &str, id: &str) {
    wait_for(&format!("tool_cancel {id} at {name}"), || {
        frames(&rec(t, name), "tool_cancel")
            .iter()
            .any(|f| f["id"] == id)
    });
}

fn cancels(t: &TempDir, name: &str) -> Vec<Value> {
    frames(&rec(t, name), "tool_cancel")
}

/// Runs `/calltool JSON` in extension `caller`: the `tool_result` frame
/// the host answered its `call_tool` with.
fn call_from(host: &Host, frame: Value) -> Value {
    let outcome = host
        .command("calltool", &frame.to_string())
        .expect("/calltool");
    let shown = outcome.display.expect("the tool_result frame");
    serde_json::from_str(&shown).expect("tool_result JSON")
}

fn result_text(frame: &Value) -> String {
    let blocks = frame["content"].as_array().cloned().unwrap_or_default();
    blocks.iter().filter_map(|b| b["text"].as_str()).collect()
}

fn in_flight(host: &Host) -> (usize, usize) {
    let list = host.list().expect("list");
    (list.in_flight.requests, list.in_flight.tool_calls)
}

/// Nothing is left in the host's tables once every call ended.
fn settles(host: &Host) {
    wait_for("the in-flight tables to empty", || {
        in_flight(host) == (0, 0)
    });
}

// ----- capabilities ---------------------------------------------

#[test]
fn hello_ack_lists_exactly_the_capabilities_of_this_host() {
    let t = TempDir::new("caps");
    let a = ext(&t, "a", json!({"caps": ["tools", "no_such_thing"]}));
    let host = start_with(&t, &[a], |_| {});
    let acks = frames(&rec(&t, "a"), "hello_ack");
    let mut caps = vec!["commands", "tools", "events", "panels", "tool_cancel"];
    // `panels` only in a build that has them; only a host built with tool
    // calls from extensions offers them.
    caps.retain(|c| *c != "panels" || cfg!(feature = "panels"));
    if cfg!(feature = "ext-calls") {
        caps.push("call_tool");
    }
    assert_eq!(acks[0]["capabilities"], json!(caps), "{acks:?}");
    host.shutdown();
}

// ----- cancellation ---------------------------------------------

#[test]
fn the_embedders_cancel_ends_the_call_and_sends_tool_cancel() {
    let t = TempDir::new("cancel");
    let a = ext(&t, "a", json!({"tools": {"slow": {"kind": "slow"}}}));
    let host = start_with(&t, &[a], |_| {});
    let ticket = host.ticket();
    let handle = host.handle();
    let waiting = std::thread::spawn(move || {
        handle.call_tool_as(ticket, ToolRequest::new("slow", json!({})))
    });
    let id = wait_call(&t, "a", "slow");
    assert_eq!(host.cancel(ticket), Ok(true));
    let result = waiting.join().expect("caller thread");
    assert_eq!(result, Err(HostError::CallCancelled));
    assert_eq!(HostError::CallCancelled.to_string(), "cancelled");
    wait_cancel(&t, "a", &id);
    assert_eq!(
        host.cancel(ticket),
        Ok(false),
        "a finished call cancels no more"
    );
    settles(&host);
    host.shutdown();
}

#[test]
fn a_timeout_sends_tool_cancel_only_to_extensions_that_asked_for_it() {
    let t = TempDir::new("timeout-cancel");
    let slow = json!({"slow": {"kind": "slow"}});
    let a = ext(&t, "a", json!({"tools": slow}));
    let b_tools = json!({"slow2": {"kind": "slow"}, "echo2": {}});
    let b = ext(&t, "b", json!({"caps": ["tools"], "tools": b_tools}));
    let host = start_with(&t, &[a, b], |c| c.timeouts.tool = Duration::from_secs(1));
    for (name, tool) in [("a", "slow"), ("b", "slow2")] {
        match host.call_tool(ToolRequest::new(tool, json!({}))) {
            Err(HostError::TimedOut { .. }) => {}
            other => panic!("{tool}: expected a timeout, got {other:?}"),
        }
        let _ = wait_call(&t, name, tool);
    }
    let id = calls_of(&t, "a", "slow")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_cancel(&t, "a", &id);
    // b is asked something after its call timed out: once it answered,
    // everything before (a tool_cancel, had one been sent) was read.
    host.call_tool(ToolRequest::new("echo2", json!({})))
        .expect("echo2 at b");
    assert!(cancels(&t, "b").is_empty(), "{:?}", cancels(&t, "b"));
    assert!(log_of(&t, "b").contains("did not ask for tool_cancel"));
    settles(&host);
    host.shutdown();
}

#[test]
fn normal_completion_sends_no_tool_cancel() {
    let t = TempDir::new("no-cancel");
    let a = ext(&t, "a", json!({"tools": {"echo": {}}}));
    let host = start_with(&t, &[a], |_| {});
    for i in 0..5 {
        let o = host
            .call_tool(ToolRequest::new("echo", json!({"i": i})))
            .expect("echo");
        assert_eq!(text(&o.result()), format!("echo: {{\"i\": {i}}}"));
    }
    host.command("answer", "")
        .expect("a command answered after the calls");
    assert!(cancels(&t, "a").is_empty(), "{:?}", cancels(&t, "a"));
    settles(&host);
    host.shutdown();
}

#[test]
fn tool_cancel_racing_a_result_leaves_one_outcome_and_nothing_pending() {
    let t = TempDir::new("race");
    let a = ext(
        &t,
        "a",
        json!({"tools": {"stubborn": {"kind": "stubborn", "ms": 1}}}),
    );
    let host = start_with(&t, &[a], |_| {});
    let (mut completed, mut cancelled) = (0, 0);
    for _ in 0..30 {
        let ticket = host.ticket();
        let handle = host.handle();
        let caller = std::thread::spawn(move || {
            handle.call_tool_as(ticket, ToolRequest::new("stubborn", json!({})))
        });
        std::thread::sleep(Duration::from_millis(1));
        let _ = host.cancel(ticket);
        match caller.join().expect("caller") {
            Ok(o) => {
                assert_eq!(text(&o.result()), "stubborn done");
                completed += 1;
            }
            Err(HostError::CallCancelled) => cancelled += 1,
            Err(e) => panic!("neither a result nor cancelled: {e}"),
        }
    }
    assert_eq!(completed + cancelled, 30);
    // The host keeps working, and the tables are empty.
    let o = host
        .call_tool(ToolRequest::new("stubborn", json!({})))
        .expect("after the race");
    assert_eq!(text(&o.result()), "stubborn done");
    settles(&host);
    if cancelled > 0 {
        // Each cancelled call's result came late: dropped and logged.
        wait_for("late results logged", || {
            log_of(&t, "a").contains("dropped tool_result")
        });
    }
    host.shutdown();
}

// ----- interactive tools ----------------------------------------

#[cfg(feature = "panels")]
#[test]
fn an_interactive_tool_has_no_deadline_and_its_cancel_reaches_it() {
    let t = TempDir::new("interactive");
    let a = ext(&t, "a", json!({"tools": {"ask": {"kind": "ask"}}}));
    let host = start_with(&t, &[a], |c| c.timeouts.tool = Duration::from_millis(300));
    let list = host.list().expect("list");
    assert!(list.tools.iter().any(|t| t.name == "ask" && t.interactive));
    let handle = host.handle();
    let asking = std::thread::spawn(move || handle.call_tool(ToolRequest::new("ask", json!({}))));
    let _ = wait_call(&t, "a", "ask");
    // Five times the tool timeout: an ordinary tool would have failed.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!asking.is_finished(), "an interactive tool timed out");
    let answered = host.command("answer", "blue").expect("/answer");
    assert_eq!(answered.display.as_deref(), Some("answered 1"));
    let o = asking.join().expect("asking thread").expect("ask");
    assert_eq!(text(&o.result()), "answer: blue");

    let ticket = host.ticket();
    let handle = host.handle();
    let asking =
        std::thread::spawn(move || handle.call_tool_as(ticket, ToolRequest::new("ask", json!({}))));
    wait_for("the second ask", || calls_of(&t, "a", "ask").len() == 2);
    let id = calls_of(&t, "a", "ask")[1]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(host.cancel(ticket), Ok(true));
    assert_eq!(
        asking.join().expect("thread"),
        Err(HostError::CallCancelled)
    );
    wait_cancel(&t, "a", &id);
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "panels")]
#[test]
fn shutdown_ends_an_interactive_call_with_tool_cancel() {
    let t = TempDir::new("interactive-stop");
    let a = ext(&t, "a", json!({"tools": {"ask": {"kind": "ask"}}}));
    let host = start_with(&t, &[a], |_| {});
    let handle = host.handle();
    let asking = std::thread::spawn(move || handle.call_tool(ToolRequest::new("ask", json!({}))));
    let id = wait_call(&t, "a", "ask");
    host.shutdown();
    assert!(asking.join().expect("thread").is_err());
    wait_cancel(&t, "a", &id);
}

#[cfg(feature = "panels")]
#[test]
fn an_interactive_tool_is_refused_by_a_host_without_panels() {
    let t = TempDir::new("interactive-refused");
    let a = ext(&t, "a", json!({"tools": {"ask": {"kind": "ask"}}}));
    let host = start_with(&t, &[a], |c| c.interactive_tools = false);
    let o = host
        .call_tool(ToolRequest::new("ask", json!({})))
        .expect("a result")
        .result();
    assert!(o.is_error);
    assert_eq!(
        text(&o),
        "tool ask is interactive and needs an interactive host"
    );
    assert!(calls_of(&t, "a", "ask").is_empty());
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn via_call_tool_an_interactive_tool_keeps_the_deadline() {
    let t = TempDir::new("interactive-call");
    let a = ext(&t, "a", json!({"tools": {"ask": {"kind": "ask"}}}));
    let host = start_with(&t, &[a], |c| c.timeouts.tool = Duration::from_millis(500));
    let r = call_from(&host, json!({"name": "ask"}));
    assert_eq!(r["is_error"], true, "{r}");
    assert!(result_text(&r).contains("within 500 ms"), "{r}");
    let id = wait_call(&t, "a", "ask");
    wait_cancel(&t, "a", &id);
    settles(&host);
    host.shutdown();
}

// ----- call_tool ------------------------------------------------

#[cfg(feature = "ext-calls")]
#[test]
fn call_tool_runs_another_extensions_tool_with_origin_extension() {
    let t = TempDir::new("call-tool");
    let a = ext(
        &t,
        "a",
        json!({"tools": {"relay": {"kind": "call", "target": "echo"}}}),
    );
    let b = ext(
        &t,
        "b",
        json!({"tools": {"echo": {}}, "subscribe": ["tool_call", "tool_result"]}),
    );
    let host = start_with(&t, &[a, b], |_| {});
    let o = host
        .call_tool(ToolRequest::new("relay", json!({"city": "Berlin"})))
        .expect("relay")
        .result();
    assert_eq!(text(&o), "echo said: echo: {\"city\": \"Berlin\"}");
    assert!(!o.is_error);
    let r = call_from(&host, json!({"name": "echo", "args": {"x": 1}}));
    assert_eq!(r["type"], "tool_result");
    assert_eq!(r["name"], "echo");
    assert_eq!(r["is_error"], false);
    assert_eq!(result_text(&r), "echo: {\"x\": 1}");
    assert!(r.get("truncated").is_none(), "{r}");
    wait_for("the tool_result events", || {
        frames(&rec(&t, "b"), "event")
            .iter()
            .filter(|e| e["event"] == "tool_result")
            .count()
            >= 3
    });
    let events = frames(&rec(&t, "b"), "event");
    let nested = events
        .iter()
        .find(|e| e["event"] == "tool_call" && e["tool_name"] == "echo")
        .expect("tool_call event of the nested call");
    assert_eq!(nested["origin_extension"], "a", "{nested}");
    let relayed = events
        .iter()
        .find(|e| e["event"] == "tool_call" && e["tool_name"] == "relay")
        .expect("tool_call event of the first call");
    assert!(relayed.get("origin_extension").is_none(), "{relayed}");
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn call_tool_refusals_are_error_results_that_say_why() {
    let t = TempDir::new("call-refused");
    let tools = json!({
        "echo": {},
        "np": {"kind": "call", "target": "echo", "no_parent": true},
    });
    let a = ext(&t, "a", json!({"tools": tools}));
    let host = start_with(&t, &[a], |_| {});
    let cases = [
        (
            json!({"raw": true, "type": "call_tool", "name": "echo"}),
            "non-empty string `id`",
        ),
        (
            json!({"raw": true, "type": "call_tool", "id": 7, "name": "echo"}),
            "string `id`",
        ),
        (
            json!({"name": "echo", "args": [1]}),
            "`args` must be a JSON object",
        ),
        (
            json!({"name": "echo", "args": "x"}),
            "`args` must be a JSON object",
        ),
        (json!({"name": "nope"}), "call_tool nope: unknown tool"),
        (
            json!({"name": "echo", "parent_id": "999"}),
            "parent_id \"999\" is not a tool_call",
        ),
        (json!({}), "string `name`"),
    ];
    for (frame, why) in cases {
        let r = call_from(&host, frame.clone());
        assert_eq!(r["is_error"], true, "{frame} -> {r}");
        assert!(
            result_text(&r).contains(why),
            "{frame}: {r} does not say {why:?}"
        );
    }
    // Without parent_id while it serves a tool_call of the host.
    let o = host
        .call_tool(ToolRequest::new("np", json!({})))
        .expect("np")
        .result();
    assert!(o.is_error, "{o:?}");
    assert!(text(&o).contains("set `parent_id`"), "{}", text(&o));
    // The host keeps working.
    let r = call_from(&host, json!({"name": "echo"}));
    assert_eq!(r["is_error"], false, "{r}");
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn call_tool_needs_the_capability() {
    let t = TempDir::new("call-cap");
    let a = ext(
        &t,
        "a",
        json!({"caps": ["tools", "tool_cancel"], "tools": {"echo": {}}}),
    );
    let host = start_with(&t, &[a], |_| {});
    let r = call_from(&host, json!({"name": "echo"}));
    assert_eq!(r["is_error"], true);
    assert!(result_text(&r).contains("did not list `call_tool`"), "{r}");
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn a_chain_holds_at_most_four_calls_and_no_repeated_name() {
    let t = TempDir::new("chains");
    let step = |next: &str| json!({"kind": "call", "target": next});
    let tools = json!({
        "t1": step("t2"), "t2": step("t3"), "t3": step("t4"), "t4": step("t5"), "t5": {},
        "c1": step("c2"), "c2": step("c1"),
    });
    let a = ext(&t, "a", json!({"tools": tools}));
    let host = start_with(&t, &[a], |_| {});
    let o = host
        .call_tool(ToolRequest::new("t2", json!({})))
        .expect("four calls");
    assert_eq!(text(&o.result()), "t3 said: t4 said: t5 said: t5: {}");
    let o = host
        .call_tool(ToolRequest::new("t1", json!({})))
        .expect("five calls")
        .result();
    assert!(o.is_error, "{o:?}");
    assert!(
        text(&o).contains("at most 4 tool calls in one chain (t1 -> t2 -> t3 -> t4 -> t5)"),
        "{}",
        text(&o)
    );
    let o = host
        .call_tool(ToolRequest::new("c1", json!({})))
        .expect("a cycle")
        .result();
    assert!(o.is_error, "{o:?}");
    assert!(
        text(&o).contains("may not repeat in a chain (c1 -> c2 -> c1)"),
        "{}",
        text(&o)
    );
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn call_tool_results_are_bounded_to_256_kib() {
    let t = TempDir::new("bounded");
    let a = ext(
        &t,
        "a",
        json!({"tools": {"big": {"kind": "big", "bytes": 300_001}}}),
    );
    let host = start_with(&t, &[a], |_| {});
    let r = call_from(&host, json!({"name": "big"}));
    assert_eq!(r["truncated"], true, "truncated: {}", r["truncated"]);
    let text = result_text(&r);
    assert!(
        text.len() <= 256 * 1024 && text.len() > 256 * 1024 - 4,
        "{}",
        text.len()
    );
    assert!(text.chars().all(|c| c == 'é'), "cut inside a character");
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn a_flood_of_call_tool_is_bounded_per_extension() {
    let t = TempDir::new("flood");
    let a = ext(&t, "a", json!({}));
    let b = ext(
        &t,
        "b",
        json!({"tools": {"slow": {"kind": "slow", "ms": 1500}}}),
    );
    let host = start_with(&t, &[a, b], |_| {});
    let shown = host
        .command("flood", r#"{"n": 100, "name": "slow"}"#)
        .expect("/flood");
    let summary: Value = serde_json::from_str(&shown.display.unwrap()).unwrap();
    assert_eq!(summary["ok"], 64, "{summary}");
    let errors = summary["errors"].as_object().expect("errors");
    assert_eq!(errors.len(), 1, "{summary}");
    let (why, n) = errors.iter().next().unwrap();
    assert_eq!(n, 36, "{summary}");
    assert!(why.contains("at most 64"), "{why}");
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn call_tool_cancel_and_the_deadline_send_tool_cancel() {
    let t = TempDir::new("call-cancel");
    let a = ext(&t, "a", json!({}));
    let b = ext(&t, "b", json!({"tools": {"slow": {"kind": "slow"}}}));
    let host = start_with(&t, &[a, b], |c| c.timeouts.tool = Duration::from_secs(2));
    // call_tool_cancel: the caller gives up; its tool is told.
    let handle = host.handle();
    let calling =
        std::thread::spawn(move || handle.command("calltool", r#"{"id": "mine", "name": "slow"}"#));
    let id = wait_call(&t, "b", "slow");
    host.command("uncall", "mine").expect("/uncall");
    wait_cancel(&t, "b", &id);
    let shown = calling.join().expect("thread").expect("/calltool").display;
    assert_eq!(
        shown.as_deref(),
        Some(r#"{"id": "mine", "type": "cancelled"}"#)
    );
    settles(&host);
    // The deadline: an error result, and the tool is told.
    let r = call_from(&host, json!({"name": "slow"}));
    assert_eq!(r["is_error"], true);
    // The tool's own timeout or call_tool's deadline, whichever is first.
    assert!(result_text(&r).contains("within 2 s"), "{r}");
    wait_for("a second slow call", || {
        calls_of(&t, "b", "slow").len() == 2
    });
    let id = calls_of(&t, "b", "slow")[1]["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_cancel(&t, "b", &id);
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn a_caller_that_exits_abandons_its_calls() {
    let t = TempDir::new("caller-exits");
    let a = ext(&t, "a", json!({}));
    set_manifest_field(&t.join("a"), "restart", json!("never"));
    let b = ext(&t, "b", json!({"tools": {"slow": {"kind": "slow"}}}));
    let host = start_with(&t, &[a, b], |_| {});
    let handle = host.handle();
    let calling = std::thread::spawn(move || handle.command("calltool", r#"{"name": "slow"}"#));
    let id = wait_call(&t, "b", "slow");
    let _ = host.command("die", "0");
    wait_cancel(&t, "b", &id);
    assert!(
        calling.join().expect("thread").is_err(),
        "the dead caller's command"
    );
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn a_tool_that_exits_fails_its_callers_at_once() {
    let t = TempDir::new("callee-exits");
    let a = ext(&t, "a", json!({}));
    let b = ext(&t, "b", json!({"tools": {"die": {"kind": "die"}}}));
    set_manifest_field(&t.join("b"), "restart", json!("never"));
    let host = start_with(&t, &[a, b], |_| {});
    let r = call_from(&host, json!({"name": "die"}));
    assert_eq!(r["is_error"], true);
    assert!(result_text(&r).contains("extension b exited"), "{r}");
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn a_built_in_tool_is_run_by_the_embedder() {
    let t = TempDir::new("builtin");
    let a = ext(
        &t,
        "a",
        json!({"tools": {"reader": {"kind": "call", "target": "read"}}}),
    );
    let host = start_with(&t, &[a], |c| c.timeouts.tool = Duration::from_secs(2));
    let handle = host.handle();
    let reading = std::thread::spawn(move || {
        handle.call_tool(ToolRequest::new("reader", json!({"path": "x"})))
    });
    let event = wait_event(&host, "builtin_call", |e| {
        matches!(e, HostEvent::BuiltinCall { .. })
    });
    let HostEvent::BuiltinCall {
        extension,
        name,
        args,
        reply,
        ..
    } = event
    else {
        unreachable!()
    };
    assert_eq!((extension.as_str(), name.as_str()), ("a", "read"));
    assert_eq!(args, json!({"path": "x"}));
    assert!(reply.send(vec![json!({"type": "text", "text": "file body"})], false));
    let o = reading.join().expect("thread").expect("reader");
    assert_eq!(text(&o.result()), "read said: file body");
    assert!(!reply.send(Vec::new(), false), "a second answer is refused");
    // Unanswered: an error at the deadline; a late answer is refused.
    let r = call_from(&host, json!({"name": "read"}));
    assert!(result_text(&r).contains("did not finish within 2 s"), "{r}");
    let event = wait_event(&host, "builtin_call", |e| {
        matches!(e, HostEvent::BuiltinCall { .. })
    });
    let HostEvent::BuiltinCall { reply, .. } = event else {
        unreachable!()
    };
    assert!(!reply.send(Vec::new(), false));
    settles(&host);
    host.shutdown();
}

#[cfg(feature = "ext-calls")]
#[test]
fn without_an_embedder_for_built_ins_their_calls_fail_at_once() {
    let t = TempDir::new("no-builtins");
    let a = ext(&t, "a", json!({}));
    let host = start_with(&t, &[a], |c| c.runs_builtins = false);
    let r = call_from(&host, json!({"name": "bash", "args": {"command": "ls"}}));
    assert_eq!(r["is_error"], true);
    assert!(result_text(&r).contains("runs no built-in tools"), "{r}");
    host.shutdown();
}

// ----- tool_result and permission_decision events ---------------

#[test]
fn the_pipeline_reports_every_outcome_to_subscribers() {
    let t = TempDir::new("outcomes");
    let tools = json!({"echo": {}, "slow": {"kind": "slow"}});
    let a = ext(
        &t,
        "a",
        json!({"tools": tools, "subscribe": ["tool_result", "permission_decision"]}),
    );
    let guard = ext_dir(
        &t.join("guard"),
        "guard",
        json!({"register": [subscribe(&[], &["tool_call"])],
               "guard": {"block_if": "forbidden", "reason": "not today"}}),
    );
    let host = start_with(&t, &[a, guard], |c| {
        c.timeouts.tool = Duration::from_secs(1)
    });
    host.call_tool(ToolRequest::new("echo", json!({"ok": 1})))
        .expect("echo");
    let o = host
        .call_tool(ToolRequest::new("echo", json!({"forbidden": 1})))
        .expect("blocked")
        .result();
    assert!(o.blocked);
    let _ = host.call_tool(ToolRequest::new("slow", json!({})));
    let _ = host.call_tool(ToolRequest::new("nope", json!({})));
    wait_for("three tool_result events", || {
        let events = frames(&rec(&t, "a"), "event");
        events
            .iter()
            .filter(|e| e["event"] == "tool_result")
            .count()
            == 3
    });
    let events = frames(&rec(&t, "a"), "event");
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "tool_result")
        .collect();
    let completed = results[0];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["executed"], true);
    assert_eq!(completed["tool_name"], "echo");
    assert_eq!(completed["tool_args"], json!({"ok": 1}));
    assert_eq!(
        completed["result"],
        json!({"content": [{"type": "text", "text": "echo: {\"ok\": 1}"}], "is_error": false})
    );
    let blocked = results[1];
    assert_eq!(blocked["status"], "blocked");
    assert_eq!(blocked["executed"], false);
    assert_eq!(blocked["result"]["is_error"], true);
    assert_eq!(results[2]["status"], "timed_out");
    let decision = events
        .iter()
        .find(|e| e["event"] == "permission_decision")
        .expect("permission_decision");
    assert_eq!(decision["decision"], "denied");
    assert_eq!(decision["source"], "policy");
    assert_eq!(decision["stage"], "pre_execution");
    assert_eq!(decision["reason"], "not today");
    assert_eq!(decision["tool_name"], "echo");
    assert_eq!(decision["tool_id"], blocked["tool_id"]);
    host.shutdown();
}

// ----- zot rpc -------------------------------------------------------

/// `zot rpc` with the extensions and `extra` arguments.
fn rpc(t: &TempDir, exts: &[PathBuf], extra: &[&str]) -> Rpc {
    let mut cmd = Rpc::command(t, exts);
    let mut rpc = Rpc::spawn(cmd.args(["--startup-timeout", "20"]).args(extra));
    rpc.until("ready event", |v| v["type"] == "ready");
    rpc
}

/// A cancel names a call by its id: a second `tool_call` with the id of
/// one in flight is refused, and the cancel still reaches the first.
#[test]
fn rpc_refuses_a_tool_call_whose_id_is_in_flight() {
    let t = TempDir::new("rpc-dup-id");
    let tools = json!({"slow": {"kind": "slow"}, "echo": {}});
    let a = ext(&t, "a", json!({ "tools": tools }));
    let mut rpc = rpc(&t, &[a], &[]);
    rpc.send(json!({"type": "tool_call", "id": "x", "name": "slow"}));
    let id = wait_call(&t, "a", "slow");
    let again = rpc.call("x", json!({"type": "tool_call", "name": "echo"}));
    let want = "a tool_call with id \"x\" is already in flight";
    assert_eq!(
        (&again["success"], &again["error"]),
        (&json!(false), &json!(want))
    );
    assert!(calls_of(&t, "a", "echo").is_empty(), "the refused call ran");
    let cancel = rpc.call("c", json!({"type": "cancel", "target": "x"}));
    assert_eq!(cancel["data"], json!({"cancelled": true}), "{cancel}");
    rpc.until("the first call's answer", |v| {
        v["id"] == "x" && v["error"] == "cancelled"
    });
    wait_cancel(&t, "a", &id);
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

#[cfg(feature = "panels")]
#[test]
fn rpc_an_interactive_tool_waits_until_cancelled() {
    let t = TempDir::new("rpc-interactive");
    let a = ext(&t, "a", json!({"tools": {"ask": {"kind": "ask"}}}));
    let mut rpc = rpc(&t, &[a], &["--tool-timeout", "1"]);
    rpc.send(json!({"type": "tool_call", "id": "q", "name": "ask"}));
    let id = wait_call(&t, "a", "ask");
    std::thread::sleep(Duration::from_millis(1500));
    let list = rpc.call("l", json!({"type": "list"}));
    assert_eq!(
        list["data"]["in_flight"],
        json!({"requests": 1, "tool_calls": 1})
    );
    assert!(
        !rpc.seen.iter().any(|v| v["id"] == "q"),
        "an interactive tool timed out: {:?}",
        rpc.seen
    );
    let cancel = rpc.call("c", json!({"type": "cancel", "target": "q"}));
    assert_eq!(cancel["data"], json!({"cancelled": true}), "{cancel}");
    let answer = rpc.response("q");
    assert_eq!(answer["success"], false);
    assert_eq!(answer["error"], "cancelled");
    wait_cancel(&t, "a", &id);
    let again = rpc.call("c2", json!({"type": "cancel", "target": "q"}));
    assert_eq!(again["data"], json!({"cancelled": false}));
    let unknown = rpc.call("c3", json!({"type": "cancel", "target": "nope"}));
    assert_eq!(unknown["data"], json!({"cancelled": false}));
    let bad = rpc.call("c4", json!({"type": "cancel"}));
    assert_eq!(bad["success"], false);
    let list = rpc.call("l2", json!({"type": "list"}));
    assert_eq!(
        list["data"]["in_flight"],
        json!({"requests": 0, "tool_calls": 0})
    );
}

#[cfg(feature = "ext-calls")]
#[test]
fn rpc_runs_built_in_tools_for_extensions_through_its_client() {
    let t = TempDir::new("rpc-builtin");
    let a = ext(
        &t,
        "a",
        json!({"tools": {"reader": {"kind": "call", "target": "read"}}}),
    );
    let mut rpc = rpc(&t, &[a], &[]);
    rpc.send(json!({"type": "tool_call", "id": "r", "name": "reader", "args": {"path": "x"}}));
    let call = rpc.until("builtin_call", |v| v["type"] == "builtin_call");
    assert_eq!(call["extension"], "a");
    assert_eq!(call["name"], "read");
    assert_eq!(call["args"], json!({"path": "x"}));
    let call_id = call["call_id"].as_str().expect("call_id").to_string();
    let answered = rpc.call(
        "b",
        json!({"type": "builtin_result", "call_id": call_id,
               "content": [{"type": "text", "text": "file body"}]}),
    );
    assert_eq!(answered["success"], true, "{answered}");
    let result = rpc.response("r");
    assert_eq!(
        result["data"]["content"][0]["text"], "read said: file body",
        "{result}"
    );
    let late = rpc.call("b2", json!({"type": "builtin_result", "call_id": call_id}));
    assert_eq!(late["success"], false);
    assert!(
        late["error"].as_str().unwrap().contains("is waiting"),
        "{late}"
    );
    let bad = rpc.call(
        "b3",
        json!({"type": "builtin_result", "call_id": "1", "content": 3}),
    );
    assert_eq!(bad["success"], false);
}

// ----- zot mcp and the session ----------------------------------------

fn tools_call(mcp: &mut Rpc, id: u64, name: &str, args: Value) -> Value {
    mcp.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": name, "arguments": args}}));
    mcp.until(&format!("tools/call {id}"), |v| v["id"] == id)
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_refuses_interactive_tools_and_runs_no_built_ins_for_extensions() {
    let t = TempDir::new("mcp-tools");
    let tools = json!({"ask": {"kind": "ask"}, "reader": {"kind": "call", "target": "read"}});
    let a = ext(
        &t,
        "a",
        json!({"tools": tools, "subscribe": ["tool_result"]}),
    );
    let mut mcp = Rpc::mcp(&t, &[a]);
    #[cfg(feature = "panels")]
    {
        let r = tools_call(&mut mcp, 1, "ask", json!({}));
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(
            r["result"]["content"][0]["text"],
            "tool ask is interactive and needs an interactive host"
        );
        assert!(
            calls_of(&t, "a", "ask").is_empty(),
            "an interactive tool ran"
        );
    }
    #[cfg(feature = "ext-calls")]
    {
        let r = tools_call(&mut mcp, 2, "reader", json!({"path": "x"}));
        let text = r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("runs no built-in tools"), "{r}");
    }
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_cancelled_reaches_the_extension_as_tool_cancel() {
    let t = TempDir::new("mcp-cancel");
    let a = ext(
        &t,
        "a",
        json!({"tools": {"slow": {"kind": "slow"}, "echo": {}}}),
    );
    let mut mcp = Rpc::mcp(&t, &[a]);
    mcp.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": "slow", "arguments": {}}}));
    let id = wait_call(&t, "a", "slow");
    mcp.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 7, "reason": "user"}}),
    );
    wait_cancel(&t, "a", &id);
    let r = tools_call(&mut mcp, 8, "echo", json!({}));
    assert_eq!(r["result"]["content"][0]["text"], "echo: {}", "{r}");
    assert!(
        !mcp.seen.iter().any(|v| v["id"] == 7),
        "a cancelled request was answered"
    );
}

#[test]
fn ctrl_c_during_call_cancels_the_tool() {
    let t = TempDir::new("session-cancel");
    let a = ext(
        &t,
        "a",
        json!({"tools": {"slow": {"kind": "slow"}, "echo": {}}}),
    );
    let mut z = Zot::start(&t, &[a], &[]);
    z.send("/call slow {}");
    let id = wait_call(&t, "a", "slow");
    z.signal(libc::SIGINT);
    z.expect("cancelled");
    wait_cancel(&t, "a", &id);
    let out = z.run("/call echo {\"x\":1}");
    assert!(
        out.iter().any(|l| l.contains("echo: {\"x\": 1}")),
        "{out:?}"
    );
}

// ===== structured, deferred and namespaced tools =======================
//
// Upstream's structured, deferred and namespaced tools
// (docs/PROTOCOL.md#structured-and-deferred-tools) and the `tool_prompt` action
// (docs/PROTOCOL.md#commands-and-actions), through every surface: the library,
// `zot rpc`, `zot mcp` (raw and with the official Python and TypeScript
// clients, which validate `structuredContent`), the session, `zot ext check`,
// and a hosted MCP server written with the Python SDK.
//
// The extension is fixtures/structured/weather (its docstring lists its
// tools and commands); it speaks the frames as upstream's Go SDK does.

fn weather() -> PathBuf {
    fixture_path("structured/weather")
}

/// After an answer the host could not use, the weather extension still
/// answers its next call whole.
#[cfg(feature = "tool-extras")]
fn assert_weather_still_answers(host: &Host) {
    let o = host
        .call_tool(ToolRequest::new("weather", json!({"city": "Berlin"})))
        .expect("still works")
        .result();
    let structured = o.structured_content.unwrap_or_default();
    assert_eq!(structured["city"], "Berlin", "{structured}");
    assert_eq!(structured["temperature"], 16.5, "{structured}");
}

// ---- the library ----

#[cfg(feature = "tool-extras")]
#[test]
fn registrations_keep_upstream_fields_and_bad_ones_are_rejected() {
    let t = TempDir::new("structured-lib-list");
    let host = start(config(&t, &[weather()]));
    let snap = host.list().expect("list");
    let tool = |name: &str| {
        (snap.tools.iter().find(|t| t.name == name))
            .unwrap_or_else(|| panic!("no tool {name} in {:?}", snap.tools))
    };
    let w = tool("weather");
    assert_eq!(
        w.output_schema.as_ref().unwrap()["required"],
        json!(["city", "temperature"])
    );
    assert_eq!(w.namespace.as_deref(), Some("weather"));
    assert_eq!(w.namespace_description.as_deref(), Some("Weather lookups"));
    assert_eq!(
        w.namespace_instructions.as_deref(),
        Some("Ask for one city at a time.")
    );
    assert_eq!((w.exposure, w.active), (Exposure::Direct, true));
    // `deferred: true` alone, and `exposure: "deferred"`: not active.
    for name in ["forecast", "radar"] {
        assert_eq!(
            (tool(name).exposure, tool(name).active),
            (Exposure::Deferred, false)
        );
    }
    assert_eq!(tool("scripted").exposure, Exposure::Codemode);
    // An explicit exposure overrides the legacy flag.
    assert_eq!(
        (tool("modelonly").exposure, tool("modelonly").active),
        (Exposure::ModelOnly, true)
    );
    // Rejected registrations are not listed, and the log says why.
    for rejected in ["bad_output", "everywhere"] {
        assert!(
            snap.tools.iter().all(|t| t.name != rejected),
            "{rejected} registered"
        );
    }
    host.shutdown();
    let log = log_of(&t, "weather");
    assert!(
        log.contains("rejected tool \"bad_output\": `output_schema` must be a JSON object"),
        "{log}"
    );
    assert!(
        log.contains("rejected tool \"everywhere\": `exposure` \"everywhere\" is not one of direct, codemode, deferred, model-only"),
        "{log}"
    );
}

#[cfg(feature = "tool-extras")]
#[test]
fn structured_content_reaches_the_library_as_it_came() {
    let t = TempDir::new("structured-lib-call");
    let host = start(config(&t, &[weather()]));
    let o = host
        .call_tool(ToolRequest::new("weather", json!({"city": "Oslo"})))
        .expect("weather")
        .result();
    assert_eq!(
        o.structured_content,
        Some(json!({"city": "Oslo", "temperature": 21.0}))
    );
    assert!(o.declares_output && !o.is_error, "{o:?}");
    assert_eq!(
        o.content,
        vec![json!({"type": "text", "text": "Oslo: 21.0 C"})]
    );
    // Any JSON: an array too, from a tool without an output schema.
    let o = host
        .call_tool(ToolRequest::new("listing", json!({})))
        .expect("listing")
        .result();
    assert_eq!(o.structured_content, Some(json!([1, 2, 3])));
    assert!(!o.declares_output);
    let o = host
        .call_tool(ToolRequest::new("forgetful", json!({})))
        .expect("forgetful")
        .result();
    assert_eq!((o.structured_content, o.declares_output), (None, true));
    host.shutdown();
}

#[cfg(feature = "tool-extras")]
#[test]
fn deferred_tools_are_refused_until_a_tool_result_activates_them() {
    let t = TempDir::new("structured-lib-deferred");
    let host = start(config(&t, &[weather()]));
    let early = host.call_tool(ToolRequest::new("forecast", json!({})));
    assert_eq!(early, Err(HostError::InactiveTool("forecast".into())));
    assert!(early.unwrap_err().to_string().contains("activate_tools"));

    // Unknown and non-deferred names are ignored (logged); the rest count.
    let names = json!({"names": ["nope", "weather", "forecast", "radar"]});
    let o = host
        .call_tool(ToolRequest::new("loader", names))
        .expect("loader")
        .result();
    assert!(!o.is_error, "{o:?}");
    // The event comes before the result, so it is already waiting.
    let event = host
        .events()
        .try_iter()
        .find(|e| matches!(e, HostEvent::ToolsActivated { .. }));
    assert_eq!(
        event,
        Some(HostEvent::ToolsActivated {
            extension: "weather".into(),
            names: vec!["forecast".into(), "radar".into()],
        })
    );
    let o = host
        .call_tool(ToolRequest::new("forecast", json!({})))
        .expect("forecast once active")
        .result();
    assert_eq!(o.content[0].text(), Some("forecast ran"));
    let snap = host.list().expect("list");
    assert!(snap
        .tools
        .iter()
        .filter(|t| t.exposure == Exposure::Deferred)
        .all(|t| t.active));

    // Activating again, or only unknown names: no event.
    let again = json!({"names": ["forecast", "ghost"]});
    host.call_tool(ToolRequest::new("loader", again))
        .expect("loader again");
    assert!(
        host.events()
            .try_iter()
            .all(|e| !matches!(e, HostEvent::ToolsActivated { .. })),
        "an activation that changed nothing was announced"
    );
    host.shutdown();
    let log = log_of(&t, "weather");
    assert!(
        log.contains(
            "activate_tools: ignored \"nope\" (not a tool of this extension), \"weather\" (not deferred)"
        ),
        "{log}"
    );
    assert!(log.contains("activate_tools: ignored \"ghost\""), "{log}");
}

#[cfg(feature = "tool-extras")]
#[test]
fn a_result_too_deep_to_read_fails_at_once_and_the_host_goes_on() {
    let t = TempDir::new("structured-lib-deep");
    // Were the unreadable result only dropped, the call would end with its
    // 60 s timeout, an error, not this result.
    let host = start(config(&t, &[weather()]));
    // The frame, its structured_content and 68 arrays: 70 levels.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({"deep": 70})))
        .expect("deep answers")
        .result();
    assert!(o.is_error, "{o:?}");
    let text = o.content[0].text().unwrap_or_default();
    assert_eq!(
        text,
        "the result of tool huge from extension weather could not be read \
         (tool_result: nested deeper than 64 levels): dropped"
    );
    // 64 levels are read whole.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({"deep": 64})))
        .expect("64 levels")
        .result();
    assert!(!o.is_error, "{o:?}");
    assert_weather_still_answers(&host);
    host.shutdown();
    assert!(
        log_of(&t, "weather").contains("dropped frame (tool_result: nested deeper than 64 levels)")
    );
}

#[cfg(feature = "tool-extras")]
#[test]
fn a_structured_result_over_the_frame_limit_fails_at_once_and_the_host_goes_on() {
    let t = TempDir::new("structured-lib-huge");
    // Were the oversized result only dropped, the call would end with its
    // 60 s timeout, an error, not this result.
    let host = start(config(&t, &[weather()]));
    // 20 MiB of structured_content: the line is over the 16 MiB limit.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({})))
        .expect("huge answers")
        .result();
    assert!(o.is_error, "{o:?}");
    let text = o.content[0].text().unwrap_or_default();
    assert!(
        text.starts_with("the result of tool huge from extension weather was ")
            && text.ends_with("bytes, over the 16 MiB frame limit: dropped"),
        "{text}"
    );
    // Just under the limit passes whole.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({"bytes": 15 << 20})))
        .expect("15 MiB")
        .result();
    let blob = o
        .structured_content
        .as_ref()
        .and_then(|s| s["blob"].as_str());
    assert_eq!(blob.map(str::len), Some(15 << 20));
    assert_weather_still_answers(&host);
    host.shutdown();
    assert!(log_of(&t, "weather").contains("-byte line: longer than 16777216 bytes"));
}

#[cfg(feature = "tool-extras")]
#[test]
fn tool_prompt_comes_back_as_it_came_and_a_bad_one_names_its_field() {
    let t = TempDir::new("structured-lib-prompt");
    let host = start(config(&t, &[weather()]));
    let o = host.command("brief", "and push").expect("brief");
    assert_eq!(o.action, Action::ToolPrompt);
    assert_eq!(o.prompt.as_deref(), Some("and push"));
    assert_eq!(o.tool_name.as_deref(), Some("weather"));
    assert_eq!(o.tool_args, Some(json!({"city": "Berlin"})));
    assert_eq!(o.error, None);
    for (command, why) in [
        ("noargs", "tool_prompt: missing object `tool_args`"),
        (
            "textargs",
            "tool_prompt: `tool_args` must be a JSON object, not a string",
        ),
    ] {
        let o = host.command(command, "").expect(command);
        assert_eq!(o.error.as_deref(), Some(why), "/{command}");
        assert_eq!(
            (o.action, &o.tool_args),
            (Action::Noop, &None),
            "/{command}"
        );
    }
    host.shutdown();
}

// ---- zot rpc ----

#[cfg(feature = "tool-extras")]
#[test]
fn rpc_lists_the_fields_passes_structured_content_and_announces_activation() {
    let t = TempDir::new("structured-rpc");
    let mut rpc = Rpc::start(&t, &[weather()]);
    let list = rpc.call("1", json!({"type": "list"}));
    let tools = list["data"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_default()
    };
    let w = tool("weather");
    assert_eq!(w["output_schema"]["type"], "object", "{w}");
    assert_eq!(
        (w["namespace"].as_str(), w["exposure"].as_str()),
        (Some("weather"), Some("direct"))
    );
    assert_eq!(w["active"], true);
    let f = tool("forecast");
    assert_eq!(
        (f["exposure"].as_str(), &f["active"]),
        (Some("deferred"), &json!(false)),
        "{f}"
    );
    assert_eq!(tool("modelonly")["exposure"], "model-only");

    let r = rpc.call(
        "2",
        json!({"type": "tool_call", "name": "weather", "args": {"city": "Berlin"}}),
    );
    assert_eq!(
        r["data"]["structured_content"],
        json!({"city": "Berlin", "temperature": 16.5})
    );
    let r = rpc.call("3", json!({"type": "tool_call", "name": "radar"}));
    assert_eq!(r["success"], false);
    assert!(
        r["error"]
            .as_str()
            .unwrap_or_default()
            .contains("deferred and not active"),
        "{r}"
    );

    let r = rpc.call(
        "4",
        json!({"type": "tool_call", "name": "loader", "args": {"names": ["radar"]}}),
    );
    assert_eq!(r["success"], true, "{r}");
    let event = rpc.until("tools_activated", |v| v["type"] == "tools_activated");
    assert_eq!(
        event,
        json!({"type": "tools_activated", "extension": "weather", "names": ["radar"]})
    );
    // Written before the loader's response.
    let at = |pred: &dyn Fn(&Value) -> bool| rpc.seen.iter().position(pred);
    let (event_at, response_at) = (
        at(&|v| v["type"] == "tools_activated"),
        at(&|v| v["type"] == "response" && v["id"] == "4"),
    );
    assert!(event_at < response_at, "{:?}", rpc.seen);
    let r = rpc.call("5", json!({"type": "tool_call", "name": "radar"}));
    assert_eq!(r["data"]["content"][0]["text"], "radar ran", "{r}");

    let r = rpc.call(
        "6",
        json!({"type": "command", "name": "brief", "args": "and then?"}),
    );
    let data = &r["data"];
    assert_eq!(data["action"], "tool_prompt", "{r}");
    assert_eq!(
        (data["tool_name"].as_str(), &data["tool_args"]),
        (Some("weather"), &json!({"city": "Berlin"}))
    );
    assert_eq!(data["prompt"], "and then?");
    let r = rpc.call("7", json!({"type": "command", "name": "noargs"}));
    assert_eq!(
        r["data"]["error"], "tool_prompt: missing object `tool_args`",
        "{r}"
    );

    let r = rpc.call("8", json!({"type": "tool_call", "name": "huge"}));
    assert_eq!(r["data"]["is_error"], true, "{r}");
    assert!(r["data"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .contains("16 MiB frame limit"));
    assert_eq!(rpc.call("9", json!({"type": "ping"}))["data"]["pong"], true);
}

// ---- zot mcp, raw ----

fn mcp_call(rpc: &mut Rpc, id: u64, method: &str, params: Value) -> Value {
    rpc.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    rpc.until(&format!("answer {id}"), |v| v["id"] == id)
}

fn listed(rpc: &mut Rpc, id: u64) -> Vec<Value> {
    let list = mcp_call(rpc, id, "tools/list", json!({}));
    list["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[cfg(all(feature = "mcp", feature = "tool-extras"))]
#[test]
fn mcp_maps_structured_output_and_hides_deferred_tools_until_activated() {
    let t = TempDir::new("structured-mcp");
    let mut rpc = Rpc::mcp(&t, &[weather()]);
    let tools = listed(&mut rpc, 1);
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        !names.contains(&"forecast") && !names.contains(&"radar"),
        "{names:?}"
    );
    assert!(
        names.contains(&"scripted") && names.contains(&"modelonly"),
        "{names:?}"
    );
    let w = tools
        .iter()
        .find(|t| t["name"] == "weather")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        w["outputSchema"]["properties"]["temperature"],
        json!({"type": "number"}),
        "{w}"
    );
    let plain = tools
        .iter()
        .find(|t| t["name"] == "listing")
        .cloned()
        .unwrap_or_default();
    assert!(plain.get("outputSchema").is_none(), "{plain}");

    let r = mcp_call(
        &mut rpc,
        2,
        "tools/call",
        json!({"name": "weather", "arguments": {"city": "Berlin"}}),
    );
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"city": "Berlin", "temperature": 16.5}),
        "{r}"
    );
    assert_eq!(r["result"]["isError"], false);
    let r = mcp_call(&mut rpc, 3, "tools/call", json!({"name": "forgetful"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        r["result"]["content"][0]["text"],
        "tool forgetful declares an output_schema but returned no structured_content"
    );
    // No output schema: MCP carries only objects, the array stays out.
    let r = mcp_call(&mut rpc, 4, "tools/call", json!({"name": "listing"}));
    assert!(
        r["result"].get("structuredContent").is_none() && r["result"]["isError"] == false,
        "{r}"
    );
    let r = mcp_call(&mut rpc, 5, "tools/call", json!({"name": "forecast"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");

    let r = mcp_call(&mut rpc, 6, "tools/call", json!({"name": "loader"}));
    assert_eq!(r["result"]["isError"], false, "{r}");
    rpc.until("tools/list_changed", |v| {
        v["method"] == "notifications/tools/list_changed"
    });
    let names: Vec<String> = listed(&mut rpc, 7)
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    assert!(
        names.iter().any(|n| n == "forecast") && names.iter().any(|n| n == "radar"),
        "{names:?}"
    );

    let r = mcp_call(&mut rpc, 8, "tools/call", json!({"name": "huge"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .contains("16 MiB frame limit"));

    let p = mcp_call(
        &mut rpc,
        9,
        "prompts/get",
        json!({"name": "brief", "arguments": {"args": "and push"}}),
    );
    assert_eq!(
        p["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "and push"}}]),
        "{p}"
    );
    assert!(p["result"]["description"]
        .as_str()
        .unwrap_or_default()
        .contains("tool weather (not run here)"));
    let p = mcp_call(&mut rpc, 10, "prompts/get", json!({"name": "textargs"}));
    assert!(
        p["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("`tool_args`"),
        "{p}"
    );
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

// ---- zot mcp, the official clients ----

/// Runs a client script of fixtures/structured against `zot mcp -e weather`.
fn run_client(tag: &str, interpreter: &Path, script: &str) {
    let t = TempDir::new(tag);
    let args = json!([
        "mcp",
        "--no-ext",
        "--startup-timeout",
        "120",
        "--cwd",
        t.path(),
        "-e",
        weather()
    ]);
    let mut cmd = Command::new(interpreter);
    cmd.env("ZOT_HELLO_TIMEOUT", "120");
    let script_path = fixture_path("structured").join(script);
    let (status, out) = run_client_script(cmd, &script_path, &args, &t);
    let steps = [
        "outputSchema listed, deferred tools hidden",
        "structuredContent",
        "missing structured content is an error",
        "activated",
        "tool_prompt as a prompt",
    ];
    assert_client_passed(script, status, &out, &steps);
}

#[cfg(all(feature = "mcp", feature = "tool-extras"))]
#[test]
fn python_sdk_client_validates_structured_content() {
    run_client(
        "structured-py",
        &mcp_deps().join("py1/bin/python"),
        "py_client.py",
    );
}

#[cfg(all(feature = "mcp", feature = "tool-extras"))]
#[test]
fn typescript_sdk_client_validates_structured_content() {
    run_client("structured-ts", Path::new("node"), "ts_client.cjs");
}

// ---- a hosted MCP server ----

#[cfg(all(feature = "mcp", feature = "tool-extras"))]
#[test]
fn a_hosted_mcp_servers_structured_tool_maps_to_output_schema_and_structured_content() {
    let t = TempDir::new("structured-hosted");
    let dir = t.join("structured-mcp");
    let script = fixture_path("structured/mcp_server.py");
    let manifest = json!({"name": "structured-mcp", "protocol": "mcp",
                          "exec": mcp_deps().join("py1/bin/python"), "args": [script]});
    write_manifest(&dir, &manifest);
    let mut cfg = config(&t, &[dir]);
    cfg.timeouts.hello = Duration::from_secs(120);
    let host = start(cfg);
    let snap = host.list().expect("list");
    let tool = snap.tools.iter().find(|t| t.name == "weather");
    let tool = tool.unwrap_or_else(|| panic!("no weather tool: {snap:?}"));
    let schema = tool
        .output_schema
        .as_ref()
        .expect("outputSchema became output_schema");
    assert_eq!(
        schema["properties"]["temperature"]["type"], "number",
        "{schema}"
    );
    let o = host
        .call_tool(ToolRequest::new("weather", json!({"city": "Berlin"})))
        .expect("weather")
        .result();
    assert_eq!(
        o.structured_content,
        Some(json!({"city": "Berlin", "temperature": 16.5})),
        "{o:?}"
    );
    assert!(o.declares_output && !o.is_error, "{o:?}");
    // The Python SDK writes a response's id before its result: a result
    // over the frame limit fails its call at once, not at the timeout.
    let o = host
        .call_tool(ToolRequest::new("huge", json!({})))
        .expect("huge answers")
        .result();
    assert!(o.is_error, "{o:?}");
    let text = o.content[0].text().unwrap_or_default();
    assert!(
        text.contains("bytes, over the 16 MiB frame limit: dropped"),
        "{text}"
    );
    assert_weather_still_answers(&host);
    host.shutdown();
}

// ---- the session ----

#[cfg(feature = "tool-extras")]
#[test]
fn the_session_marks_deferred_tools_and_runs_a_tool_prompt_with_its_result_first() {
    let t = TempDir::new("structured-session");
    let ext = weather();
    // Startup waits for the extension, however busy the machine.
    let args = [
        "--no-ext",
        "--startup-timeout",
        "120",
        "--hello-timeout",
        "120",
        "-e",
        ext.to_str().expect("utf-8"),
        "--agent-cmd",
        "cat",
    ];
    let input = "/tools\n/brief and push\n/textargs\n/call loader\n/tools\n";
    let (code, lines) = run_zot(&t, &args, input);
    assert_eq!(code, Some(0), "{lines:#?}");
    let forecast: Vec<&String> = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("forecast()"))
        .collect();
    assert_eq!(forecast.len(), 2, "{lines:#?}");
    assert!(
        forecast[0].ends_with("[deferred: not active yet]"),
        "{forecast:?}"
    );
    assert!(
        !forecast[1].contains("deferred"),
        "still marked once activated: {forecast:?}"
    );
    let at = |text: &str| {
        lines
            .iter()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no {text:?} in {lines:#?}"))
    };
    // The tool runs and its result is printed, then the turn: the agent
    // (`cat`) echoes what it got, the tool result in front of the prompt.
    let result = at("result: Berlin: 16.5 C");
    let structured = at(r#"structured: {"city":"Berlin","temperature":16.5}"#);
    let assistant = at(r#"assistant: Tool weather {"city":"Berlin"} returned:"#);
    assert!(result < structured && structured < assistant, "{lines:#?}");
    let echoed = &lines[assistant..];
    assert!(
        echoed.iter().any(|l| l.trim() == "Berlin: 16.5 C"),
        "{lines:#?}"
    );
    assert!(echoed.iter().any(|l| l.trim() == "and push"), "{lines:#?}");
    at("error: tool_prompt: `tool_args` must be a JSON object, not a string");
    at("tools activated by weather: forecast, radar");
}

// ---- zot ext check ----

#[cfg(all(feature = "author", feature = "tool-extras"))]
#[test]
fn ext_check_shows_the_fields_and_fails_the_rejected_registrations() {
    let t = TempDir::new("structured-check");
    let ext = weather();
    let args = [
        "ext",
        "check",
        ext.to_str().expect("utf-8"),
        "--command",
        "brief",
        "x",
        "--command",
        "noargs",
        "",
    ];
    // The hello limit, however busy the machine.
    let out = zot()
        .args(args)
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "120")
        .output()
        .expect("run zot ext check");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = |needle: &str| {
        lines
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
    };
    assert!(
        line("tool weather").contains("namespace weather, an output schema"),
        "{text}"
    );
    assert!(
        line("tool forecast").contains("exposure deferred"),
        "{text}"
    );
    assert!(
        line("tool bad_output").contains("`output_schema` must be a JSON object: the host rejects"),
        "{text}"
    );
    assert!(
        line("tool everywhere").contains("`exposure` \"everywhere\" is not one of"),
        "{text}"
    );
    assert!(
        line("run /brief").contains("command_response tool_prompt: x"),
        "{text}"
    );
    assert!(
        line("run /noargs").contains("missing object `tool_args`"),
        "{text}"
    );
}
