//! Tools, lifecycle events and interception (SPEC 3.7-3.13) against
//! real extension processes.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use zot_host::{
    BuiltinVerdict, EventPayload, InterceptEvent, InterceptRequest, ToolOutcome, ToolRequest,
};

fn call(name: &str, args: Value) -> ToolRequest {
    ToolRequest {
        name: name.into(),
        args,
        tool_id: Some("call-1".into()),
    }
}

fn tool_call_intercept(args: Value) -> InterceptRequest {
    InterceptRequest {
        event: InterceptEvent::ToolCall,
        payload: EventPayload {
            tool_id: Some("x".into()),
            tool_name: Some("bash".into()),
            tool_args: Some(args),
            ..Default::default()
        },
    }
}

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

fn guard(t: &TempDir, name: &str, intercept: &[&str], behaviour: Value) -> std::path::PathBuf {
    let rec = t.join(&format!("{name}.rec"));
    ext_dir(
        &t.join(name),
        name,
        json!({"record": rec, "register": [subscribe(&["tool_call"], intercept)], "guard": behaviour}),
    )
}

#[test]
fn guards_block_with_reason_or_allow() {
    let t = TempDir::new("guard");
    let g = guard(
        &t,
        "g",
        &["tool_call"],
        json!({"block_if": "rm -rf", "reason": "refused: rm -rf"}),
    );
    let runner = ext_dir(
        &t.join("r"),
        "r",
        json!({"record": t.join("r.rec"), "register": [tool("shell")]}),
    );
    let host = start_ready(config(&t, &[g, runner]));
    let verdict = host
        .intercept(tool_call_intercept(json!({"command": "rm -rf /"})))
        .unwrap();
    assert_eq!(
        (verdict.block, verdict.reason.as_deref()),
        (true, Some("refused: rm -rf"))
    );
    assert!(
        !host
            .intercept(tool_call_intercept(json!({"command": "ls"})))
            .unwrap()
            .block
    );
    let blocked = host
        .call_tool(call("shell", json!({"command": "rm -rf /"})))
        .unwrap()
        .result();
    assert!(blocked.blocked && blocked.is_error);
    assert_eq!(
        blocked.content,
        [json!({"type": "text", "text": "refused: rm -rf"})]
    );
    let ran = host
        .call_tool(call("shell", json!({"command": "ls"})))
        .unwrap()
        .result();
    assert!(!ran.blocked);
    host.shutdown();
    let runner_frames = recorded(&t.join("r.rec"));
    let calls: Vec<&Value> = runner_frames
        .iter()
        .filter(|f| f["type"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "the blocked call never reached the tool");
    // The pipeline emitted the tool_call event to the guard too.
    let guard_frames = recorded(&t.join("g.rec"));
    let event = guard_frames.iter().find(|f| f["type"] == "event").unwrap();
    assert_eq!(
        (event["tool_name"].as_str(), event["tool_id"].as_str()),
        (Some("shell"), Some("call-1"))
    );
}

#[test]
fn silent_guards_cost_one_timeout_and_count_as_allow() {
    let t = TempDir::new("silent");
    let guards: Vec<_> = (0..3)
        .map(|i| {
            guard(
                &t,
                &format!("s{i}"),
                &["tool_call"],
                json!({"silent": true}),
            )
        })
        .collect();
    let mut cfg = config(&t, &guards);
    let round = Duration::from_secs(4);
    cfg.timeouts.intercept = round;
    let host = start_ready(cfg);
    let started = Instant::now();
    let verdict = host.intercept(tool_call_intercept(json!({}))).unwrap();
    let took = started.elapsed();
    assert!(!verdict.block);
    // Asked at once: one round, not 3 rounds one after another. The
    // bound sits a whole round above one round, so a busy machine's
    // scheduling delays cannot fail it, and a round below three.
    assert!(
        took >= round && took < 2 * round,
        "3 silent guards took {took:?}: one {round:?} round expected, not one per guard"
    );
    drop(host);
    assert!(log_of(&t, "s0").contains("counted as allow"));
}

#[test]
fn a_guard_that_exits_while_asked_counts_as_allow_at_once() {
    let t = TempDir::new("exited-guard");
    let dies = guard(&t, "dies", &["tool_call"], json!({"crash": 1}));
    let blocks = guard(
        &t,
        "blocks",
        &["tool_call"],
        json!({"block_if": "x", "reason": "second"}),
    );
    let mut cfg = config(&t, &[dies, blocks]);
    cfg.timeouts.intercept = Duration::from_secs(60);
    let host = start_ready(cfg);
    let started = Instant::now();
    let verdict = host
        .intercept(tool_call_intercept(json!({"x": 1})))
        .unwrap();
    assert_eq!(
        verdict.reason.as_deref(),
        Some("second"),
        "the walk went on past the dead guard"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "did not wait for the 60 s round"
    );
    // Once gone it is not asked at all.
    assert!(
        !host
            .intercept(tool_call_intercept(json!({})))
            .unwrap()
            .block
    );
}

#[test]
fn modified_args_chain_and_later_guards_decide_on_them() {
    let t = TempDir::new("chain");
    // First guard rewrites harmless args into dangerous ones; the second
    // saw the original (and allowed) but must decide on the rewrite.
    let rewriter = guard(
        &t,
        "rewriter",
        &["tool_call"],
        json!({"modify_args": {"command": "rm -rf /tmp/x"}}),
    );
    let blocker = guard(
        &t,
        "blocker",
        &["tool_call"],
        json!({"block_if": "rm -rf", "reason": "second guard refused"}),
    );
    let host = start_ready(config(&t, &[rewriter, blocker]));
    let verdict = host
        .intercept(tool_call_intercept(json!({"command": "ls"})))
        .unwrap();
    assert_eq!(
        (verdict.block, verdict.reason.as_deref()),
        (true, Some("second guard refused"))
    );
    host.shutdown();
    let seen: Vec<Value> = recorded(&t.join("blocker.rec"))
        .into_iter()
        .filter(|f| f["type"] == "event_intercept")
        .map(|f| f["tool_args"].clone())
        .collect();
    assert_eq!(seen.last(), Some(&json!({"command": "rm -rf /tmp/x"})));
}

#[test]
fn a_rewrite_reaches_the_tool() {
    let t = TempDir::new("rewrite-tool");
    let safe = guard(
        &t,
        "safe",
        &["tool_call"],
        json!({"modify_args": {"command": "echo safe"}}),
    );
    let second = guard(
        &t,
        "second",
        &["tool_call"],
        json!({"modify_args": {"command": "echo safer"}}),
    );
    let runner = ext_dir(&t.join("r"), "r", json!({"register": [tool("shell")]}));
    let host = start_ready(config(&t, &[safe, second, runner]));
    let out = host
        .call_tool(call("shell", json!({"command": "rm -rf /"})))
        .unwrap()
        .result();
    assert_eq!(out.content[0]["text"], "{\"command\": \"echo safer\"}");
    let verdict = host
        .intercept(tool_call_intercept(json!({"command": "x"})))
        .unwrap();
    assert_eq!(
        verdict.modified_args,
        Some(json!({"command": "echo safer"}))
    );
}

#[test]
fn replace_text_and_turn_start_block() {
    let t = TempDir::new("text");
    let polite = guard(
        &t,
        "polite",
        &["assistant_message"],
        json!({"replace_text": "polite words"}),
    );
    let gate = guard(
        &t,
        "gate",
        &["turn_start"],
        json!({"block_events": ["turn_start"], "reason": "not now"}),
    );
    let host = start_ready(config(&t, &[polite, gate]));
    let text = host
        .intercept(InterceptRequest {
            event: InterceptEvent::AssistantMessage,
            payload: EventPayload {
                text: Some("rude words".into()),
                ..Default::default()
            },
        })
        .unwrap();
    assert_eq!(
        (text.block, text.replace_text.as_deref()),
        (false, Some("polite words"))
    );
    let turn = host
        .intercept(InterceptRequest {
            event: InterceptEvent::TurnStart,
            payload: EventPayload {
                step: Some(1),
                ..Default::default()
            },
        })
        .unwrap();
    assert_eq!(
        (turn.block, turn.reason.as_deref()),
        (true, Some("not now"))
    );
    // Only the interceptable events can be asked about.
    assert!("session_start".parse::<InterceptEvent>().is_err());
}

#[test]
fn a_call_whose_owner_dies_in_the_chain_goes_to_the_next_registrant() {
    let t = TempDir::new("owner-dies");
    // `gt` owns `tt` and guards tool calls, and dies when asked.
    let gt = ext_dir(
        &t.join("gt"),
        "gt",
        json!({"register": [tool("tt"), subscribe(&[], &["tool_call"])], "guard": {"crash": 4}}),
    );
    let gt2 = ext_dir(&t.join("gt2"), "gt2", json!({"register": [tool("tt")]}));
    let host = start_ready(config(&t, &[gt, gt2]));
    let out = host.call_tool(call("tt", json!({}))).unwrap().result();
    assert_eq!(out.extension, "gt2");
}
