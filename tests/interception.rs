//! Interception (docs/PROTOCOL.md#interception,
//! docs/PROTOCOL.md#system-prompt): guards that block, allow or rewrite
//! `tool_call`, `turn_start` and `assistant_message`, chained in precedence
//! order with one deadline a round, and `before_agent_start` chaining
//! system-prompt replacements, through the library, `zot rpc` and the session.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use zot_host::{EventPayload, InterceptEvent, InterceptRequest};

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
    let window = Duration::from_secs(2);
    cfg.timeouts.intercept = window;
    let host = start_ready(cfg);
    let started = Instant::now();
    let verdict = host.intercept(tool_call_intercept(json!({}))).unwrap();
    let took = started.elapsed();
    assert!(!verdict.block);
    // Asked at once: one intercept window (docs/PROTOCOL.md#interception), not three one after
    // another. The bound sits a whole window above one, so a busy
    // machine's scheduling delays cannot fail it, and a window below three.
    assert!(
        took >= window && took < 2 * window,
        "3 silent guards took {took:?}: one {window:?} window expected, not one per guard"
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
        "did not wait out the 60 s intercept window"
    );
    // Once gone it is not asked at all.
    assert!(
        !host
            .intercept(tool_call_intercept(json!({})))
            .unwrap()
            .block
    );
}

/// A guard's answer that cannot be read (a field of the wrong type) is
/// its failure at once, by its `guard_failure`: not a wait for the
/// intercept deadline.
#[test]
fn a_guards_unreadable_answer_is_its_failure_at_once() {
    let t = TempDir::new("unreadable-guard");
    let closed = guard(&t, "closed", &["tool_call"], json!({"block_value": "yes"}));
    let text = std::fs::read_to_string(closed.join("extension.json")).expect("manifest");
    let mut manifest: Value = serde_json::from_str(&text).expect("manifest JSON");
    manifest["guard_failure"] = json!("block");
    write_manifest(&closed, &manifest);
    let mut cfg = config(&t, &[closed]);
    cfg.timeouts.intercept = Duration::from_secs(60);
    let host = start_ready(cfg);
    let verdict = host.intercept(tool_call_intercept(json!({}))).unwrap();
    let reason = verdict.reason.clone().unwrap_or_default();
    assert!(verdict.block, "{verdict:?}");
    assert!(
        reason.starts_with("guard closed unavailable (its answer could not be read")
            && reason.contains("`block`"),
        "{reason}"
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
    assert_eq!(out.content[0].text(), Some("{\"command\": \"echo safer\"}"));
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

// ----------------------------------------------------------------------
// before_agent_start (docs/PROTOCOL.md#system-prompt): the session's system
// prompt, prepared by guards; fixtures/frames/ext.py.

// ----- before_agent_start ---------------------------------------

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
        guard("slow", json!({"prompt": {"sleep_ms": 1500, "set": "late"}})),
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
