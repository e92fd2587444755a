//! Tools and lifecycle events (SPEC 3.7-3.9, 3.13, 14.4) against real
//! extension processes; interception is in tests/interception.rs.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use zot_host::{BuiltinVerdict, EventPayload, HostError, ToolOutcome};

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
    assert_eq!(none.content[0]["text"], "{}", "missing args become {{}}");
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
    // About the exit itself, not the restart that follows it (SPEC 12).
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
// Upstream's event names with sequence, session_id and cwd (SPEC 14.4); the extension is fixtures/frames/ext.py.

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
        .env("ZOT_HELLO_TIMEOUT", "60")
        // A busy machine may start Python slower than the 3 s default.
        .env("ZOT_STARTUP_TIMEOUT", "60");
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
