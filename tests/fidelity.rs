//! The host loop's fidelity and memory bounds (SPEC 3.9, 3.14, 3.17), with
//! the real `zot` binary and extensions that behave like upstream's
//! SDK-built ones (`fixtures/sdk-like/ext.py`): nothing lost at
//! shutdown, nothing reordered, slow starters waited for, built-in tools
//! through the pipeline, and memory bounded whoever stops reading.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;
use zot_host::{Action, Host, HostEvent, ToolRequest};

/// stdout lines of a finished `zot rpc`, parsed.
fn rpc_lines(t: &TempDir, exts: &[&std::path::Path], extra: &[&str], input: &str) -> Vec<Value> {
    // A Python fixture can take over the 10 s default to say hello on a
    // starved machine; `extra` may set its own limit (the last one wins).
    let mut args = vec!["rpc", "--no-ext", "--hello-timeout", "60"];
    args.extend_from_slice(extra);
    let paths: Vec<String> = exts.iter().map(|p| p.display().to_string()).collect();
    for p in &paths {
        args.extend(["-e", p.as_str()]);
    }
    let (code, lines) = run_zot(t, &args, input);
    assert_eq!(code, Some(0), "zot rpc exit status; output: {lines:?}");
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn response<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines
        .iter()
        .find(|v| v["type"] == "response" && v["id"] == id)
        .unwrap_or_else(|| panic!("no response {id} in {lines:?}"))
}

// ----- 10.1 / 10.2: shutdown finishes accepted requests first ----------

#[test]
fn piped_requests_are_answered_before_extensions_are_stopped() {
    let t = TempDir::new("fid-piped");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "tools": ["t"], "delay_ms": 300}),
    );
    // Several runs: the bug lost the answer most of the time, not always.
    for run in 0..3 {
        // EOF right after the request.
        let lines = rpc_lines(
            &t,
            &[&ext],
            &[],
            "{\"type\":\"command\",\"id\":\"1\",\"name\":\"x\",\"args\":\"a\"}\n",
        );
        let r = response(&lines, "1");
        assert_eq!(
            r["data"],
            json!({"extension": "sdk", "action": "display", "display": "x: a"}),
            "run {run}: command answered before the extension was stopped: {r}"
        );
        // A tool call followed by `shutdown`.
        let lines = rpc_lines(
            &t,
            &[&ext],
            &[],
            "{\"type\":\"tool_call\",\"id\":\"1\",\"name\":\"t\",\"args\":{\"k\":1}}\n\
             {\"type\":\"shutdown\",\"id\":\"2\"}\n",
        );
        let r = response(&lines, "1");
        assert_eq!(
            r["data"]["content"],
            json!([{"type": "text", "text": "t: {\"k\": 1}"}]),
            "run {run}: tool answered before the stop: {r}"
        );
        let last = lines.last().expect("some output");
        assert_eq!(
            (last["id"].as_str(), last["command"].as_str()),
            (Some("2"), Some("shutdown")),
            "run {run}: the shutdown response must be the last line: {lines:?}"
        );
    }
}

#[test]
fn shutdown_is_the_last_line_and_later_requests_get_errors() {
    let t = TempDir::new("fid-last");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 500}),
    );
    let lines = rpc_lines(
        &t,
        &[&ext],
        &[],
        "{\"type\":\"command\",\"id\":\"1\",\"name\":\"x\"}\n\
         {\"type\":\"shutdown\",\"id\":\"2\"}\n\
         {\"type\":\"ping\",\"id\":\"3\"}\n\
         {\"type\":\"list\",\"id\":\"4\"}\n",
    );
    assert_eq!(response(&lines, "1")["success"], true, "{lines:?}");
    for id in ["3", "4"] {
        let r = response(&lines, id);
        assert_eq!(r["success"], false, "request {id} after shutdown: {r}");
        assert!(
            r["error"].as_str().unwrap_or("").contains("shutting down"),
            "request {id} after shutdown: {r}"
        );
    }
    let last = lines.last().expect("some output");
    assert_eq!(
        (last["id"].as_str(), last["success"].as_bool()),
        (Some("2"), Some(true)),
        "the shutdown response must be the last line: {lines:?}"
    );
}

#[test]
fn list_waits_for_startup_readiness() {
    let t = TempDir::new("fid-list");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "hello_delay_ms": 800}),
    );
    // A generous grace: on a starved machine the 800 ms hello can exceed
    // the 3 s default, and the subject is the order, not the grace.
    let lines = rpc_lines(
        &t,
        &[&ext],
        &["--startup-timeout", "60"],
        "{\"type\":\"list\",\"id\":\"1\"}\n",
    );
    let list = response(&lines, "1");
    assert_eq!(
        list["data"]["extensions"][0]["state"], "ready",
        "list answered before readiness: {list}"
    );
    assert_eq!(list["data"]["commands"][0]["name"], "x", "{list}");
    let ready = lines.iter().position(|v| v["type"] == "ready");
    let answer = lines.iter().position(|v| v["id"] == "1");
    assert!(ready < answer, "ready event before the list: {lines:?}");
}

#[test]
fn library_shutdown_finishes_submitted_requests() {
    let t = TempDir::new("fid-lib-stop");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 400}),
    );
    let host = start(config(&t, &[ext]));
    let (tx, rx) = crossbeam_channel::unbounded();
    for i in 0..5 {
        let tx = tx.clone();
        host.handle().submit(zot_host::Request::Command {
            name: "x".into(),
            args: i.to_string(),
            reply: Box::new(move |r| {
                let _ = tx.send(r);
            }),
        });
    }
    host.shutdown();
    let answers: Vec<_> = rx.try_iter().collect();
    assert_eq!(answers.len(), 5, "{answers:?}");
    for a in answers {
        let a = a.unwrap_or_else(|e| panic!("a submitted command failed at shutdown: {e}"));
        assert_eq!(a.action, Action::Display);
    }
}

// ----- 10.3: what one extension writes keeps its order -----------------

#[test]
fn notes_never_overtake_responses_in_rpc() {
    let t = TempDir::new("fid-order-rpc");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 0, "notify_first": true}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready event", |v| v["type"] == "ready");
    // One at a time, then 50 at once.
    for i in 0..50 {
        rpc.call(&format!("s{i}"), json!({"type": "command", "name": "x"}));
    }
    for i in 0..50 {
        rpc.send(json!({"type": "command", "name": "x", "id": format!("c{i}")}));
    }
    for i in 0..50 {
        rpc.response(&format!("c{i}"));
    }
    let (mut notes, mut answers) = (0, 0);
    for v in &rpc.seen {
        if v["type"] == "notify" {
            notes += 1;
        } else if v["type"] == "response" && v["command"] == "command" {
            answers += 1;
            assert!(
                notes >= answers,
                "response {} came before its note: {:?}",
                v["id"],
                rpc.seen
            );
        }
    }
    assert_eq!((notes, answers), (100, 100));
}

#[test]
fn notes_never_overtake_responses_in_the_session() {
    let t = TempDir::new("fid-order-session");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 0, "notify_first": true}),
    );
    let e = ext.display().to_string();
    let input = "/x\n".repeat(30);
    let args = ["--no-ext", "--hello-timeout", "60", "-e", &e];
    let (code, lines) = run_zot(&t, &args, &input);
    assert_eq!(code, Some(0), "{lines:?}");
    let (mut notes, mut answers) = (0, 0);
    for line in &lines {
        if line.starts_with("[sdk] info: before") {
            notes += 1;
        } else if line.starts_with("[/x] x:") {
            answers += 1;
            assert!(notes >= answers, "answer before its note: {lines:?}");
        }
    }
    assert_eq!((notes, answers), (30, 30), "{lines:?}");
}

#[test]
fn library_events_are_queued_before_the_reply() {
    let t = TempDir::new("fid-order-lib");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 0, "notify_first": true}),
    );
    let host = start(config(&t, &[ext]));
    for _ in host.events().try_iter() {}
    for i in 0..50 {
        host.command("x", "").expect("command");
        let notes = host
            .events()
            .try_iter()
            .filter(|e| matches!(e, HostEvent::Notify { .. }))
            .count();
        assert_eq!(
            notes, 1,
            "round {i}: the note is in the channel before the reply"
        );
    }
}

// ----- 10.4: built-in tools over rpc run the pipeline ------------------

#[test]
fn builtin_tool_over_rpc_runs_the_event_and_the_guards() {
    let t = TempDir::new("fid-builtin");
    let rec = t.join("rec");
    let guard = ext_dir(
        &t.join("guard"),
        "guard",
        json!({"record": rec,
               "register": [subscribe(&["tool_call"], &["tool_call"])],
               "guard": {"block_if": "rm -rf", "reason": "dangerous",
                         "modify_args": {"command": "ls -l"}}}),
    );
    // The guard must be subscribed when the calls run: a generous startup
    // grace, so a starved machine cannot end it before the guard is ready.
    let lines = rpc_lines(
        &t,
        &[&guard],
        &["--startup-timeout", "60"],
        "{\"type\":\"tool_call\",\"id\":\"1\",\"name\":\"bash\",\"args\":{\"command\":\"ls\"}}\n\
         {\"type\":\"tool_call\",\"id\":\"2\",\"name\":\"bash\",\"args\":{\"command\":\"rm -rf /\"}}\n",
    );
    assert_eq!(
        response(&lines, "1")["data"],
        json!({"builtin": true, "blocked": false, "args": {"command": "ls -l"}})
    );
    assert_eq!(
        response(&lines, "2")["data"],
        json!({"builtin": true, "blocked": true, "reason": "dangerous",
               "args": {"command": "rm -rf /"}})
    );
    let frames = recorded(&rec);
    let events = frames
        .iter()
        .filter(|f| f["type"] == "event" && f["event"] == "tool_call")
        .count();
    let asked = frames
        .iter()
        .filter(|f| f["type"] == "event_intercept")
        .count();
    assert_eq!(
        (events, asked),
        (2, 2),
        "the tool_call event and the guard saw both calls: {frames:?}"
    );
}

#[test]
fn builtin_tool_through_the_library_pipeline() {
    let t = TempDir::new("fid-builtin-lib");
    let host = start(config(&t, &[]));
    let outcome = host
        .call_tool(ToolRequest {
            name: "read".into(),
            args: json!({"path": "x"}),
            tool_id: None,
        })
        .expect("built-in verdict");
    assert!(outcome.builtin && !outcome.blocked, "{outcome:?}");
    assert_eq!(outcome.args, Some(json!({"path": "x"})));
}

// ----- 10.5: slow starters ---------------------------------------------

#[test]
fn a_command_waits_for_an_extension_still_starting() {
    let t = TempDir::new("fid-slow");
    let ext = sdk_ext(
        &t.join("slow"),
        "slow",
        json!({"commands": ["x"], "tools": ["t"], "hello_delay_ms": 2000, "delay_ms": 0}),
    );
    // The startup grace ends long before the hello.
    let lines = rpc_lines(
        &t,
        &[&ext],
        &["--startup-timeout", "0.2"],
        "{\"type\":\"command\",\"id\":\"1\",\"name\":\"x\"}\n\
         {\"type\":\"command\",\"id\":\"2\",\"name\":\"nope\"}\n\
         {\"type\":\"tool_call\",\"id\":\"3\",\"name\":\"t\"}\n",
    );
    assert_eq!(
        response(&lines, "3")["data"]["content"][0]["text"],
        "t: {}",
        "{lines:?}"
    );
    assert_eq!(response(&lines, "1")["data"]["display"], "x: ", "{lines:?}");
    assert_eq!(
        response(&lines, "2")["error"],
        "unknown command /nope",
        "{lines:?}"
    );
    // The session, with the grace from the environment.
    let e = ext.display().to_string();
    let mut cmd = zot();
    cmd.args(["--no-ext", "-e", &e, "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_STARTUP_TIMEOUT", "0.2")
        .stderr(Stdio::null());
    let (mut child, stdin, lines) = spawn_piped(&mut cmd);
    stdin.expect("stdin").write_all(b"/x hi\n").expect("write");
    let mut out = Vec::new();
    while let Ok(line) = lines.recv_timeout(DEADLINE) {
        out.push(line);
    }
    let _ = child.wait();
    assert!(
        out.iter().any(|l| l == "[/x] x: hi"),
        "the slow starter's command ran: {out:?}"
    );
}

#[test]
fn startup_timeout_must_be_a_number() {
    let t = TempDir::new("fid-bad-grace");
    let (code, _) = run_zot(&t, &["rpc", "--no-ext", "--startup-timeout", "soon"], "");
    assert_eq!(code, Some(2), "usage error");
}

/// An extension still starting (say, npx still downloading) has said no
/// hello and has nothing to finish: a reload stops it at once instead of
/// waiting for its hello deadline, and starts it again.
#[test]
fn reload_stops_an_extension_mid_start_and_starts_it_again() {
    let t = TempDir::new("fid-reload-start");
    let ext = sdk_ext(
        &t.join("npx"),
        "npx",
        json!({"commands": ["x"], "hello_delay_ms": 1500}),
    );
    let mut cfg = config(&t, &[ext]);
    cfg.timeouts.startup = Duration::from_millis(100);
    cfg.timeouts.hello = Duration::from_secs(60);
    let host = Host::start(cfg).expect("start");
    host.wait_ready();
    // Still sleeping before its hello: the reload stops it.
    host.reload().expect("reload");
    let log = log_of(&t, "npx");
    let first_exit = log
        .lines()
        .find(|l| l.contains("exited ("))
        .unwrap_or_else(|| panic!("no exit in the log: {log}"));
    assert!(
        first_exit.contains("exited (signal 15)"),
        "stopped with SIGTERM, not waited for: {log}"
    );
    wait_ext_ready(&host, "npx");
    let x = host.command("x", "hi").expect("the new run answers");
    assert_eq!(x.display.as_deref(), Some("x: hi"));
}

// ----- 9.2: memory stays bounded whoever stops reading -----------------

/// Flood: 6000 notes of 64 KiB (about 390 MB) that nobody reads.
fn flooder(t: &TempDir, done: &std::path::Path) -> std::path::PathBuf {
    sdk_ext(
        &t.join("flood"),
        "flood",
        json!({"commands": ["x"], "delay_ms": 0,
               "flood": {"count": 6000, "size": 65536, "done": done}}),
    )
}

const RSS_BOUND_KB: u64 = 200 * 1024;

/// The flood is 393 MB of JSON through a debug build: about 15 s with
/// two such tests side by side at load 10, so `DEADLINE` is too short.
const FLOOD_LIMIT: Duration = Duration::from_secs(180);

#[test]
fn rpc_memory_stays_bounded_when_stdout_is_not_read() {
    let t = TempDir::new("fid-mem-rpc");
    let done = t.join("flood.done");
    let ext = flooder(&t, &done);
    // A raw child: nothing reads its stdout until the flood is over.
    let mut child = spawn_raw(&t, &["rpc"], &ext);
    let pid = child.id();
    wait_for_within("the flood to be written", FLOOD_LIMIT, || done.exists());
    let peak = peak_rss_kb(pid).expect("VmHWM");
    // Now read: the host still answers, and says what it dropped.
    let stdout = child.stdout.take().expect("stdout");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(
        stdin,
        "{}",
        json!({"type": "command", "id": "1", "name": "x"})
    )
    .expect("write");
    drop(stdin);
    let lines: Vec<Value> = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).expect("JSON line"))
        .collect();
    let _ = child.wait();
    assert!(
        peak < RSS_BOUND_KB,
        "zot rpc peaked at {peak} kB while nobody read its stdout"
    );
    assert_eq!(response(&lines, "1")["success"], true);
    let dropped: u64 = lines
        .iter()
        .filter(|v| v["type"] == "events_dropped")
        .filter_map(|v| v["count"].as_u64())
        .sum();
    assert!(dropped > 0, "an events_dropped event counts the loss");
    let notes = lines.iter().filter(|v| v["type"] == "notify").count() as u64;
    assert_eq!(
        notes + dropped,
        6000,
        "every note is either written or counted"
    );
    assert!(log_of(&t, "flood").contains("dropping notes"));
}

#[test]
fn session_memory_stays_bounded_when_stdout_is_not_read() {
    let t = TempDir::new("fid-mem-session");
    let done = t.join("flood.done");
    let ext = flooder(&t, &done);
    let mut child = spawn_raw(&t, &[], &ext);
    let pid = child.id();
    wait_for_within("the flood to be written", FLOOD_LIMIT, || done.exists());
    let peak = peak_rss_kb(pid).expect("VmHWM");
    let stdout = child.stdout.take().expect("stdout");
    drop(child.stdin.take());
    let lines: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .collect();
    let _ = child.wait();
    assert!(
        peak < RSS_BOUND_KB,
        "zot peaked at {peak} kB while nobody read its stdout"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("dropped: output was not read")),
        "the session says what it dropped"
    );
}

// ----- 9.3: huge registrations stay linear and capped ------------------

#[test]
fn a_huge_subscribe_frame_does_not_stall_the_host() {
    let t = TempDir::new("fid-subscribe");
    let ext = sdk_ext(
        &t.join("subs"),
        "subs",
        json!({"commands": ["x"], "delay_ms": 0, "subscribe_many": 100_000}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    let answer = rpc.call("1", json!({"type": "command", "name": "x"}));
    assert_eq!(answer["success"], true, "{answer}");
    // Answered after the subscribe frame (it came first on the pipe).
    let list = rpc.call("2", json!({"type": "list"}));
    let events = &list["data"]["extensions"][0]["events"];
    assert_eq!(
        events.as_array().map(Vec::len),
        Some(10_000),
        "subscriptions are capped"
    );
    assert!(log_of(&t, "subs").contains("90000 event names beyond the cap"));
}

#[test]
fn registrations_beyond_the_cap_are_ignored_and_logged() {
    let t = TempDir::new("fid-cap");
    let names: Vec<String> = (0..10_005).map(|i| format!("c{i}")).collect();
    let ext = sdk_ext(&t.join("many"), "many", json!({"commands": names}));
    let mut cfg = config(&t, &[ext]);
    // It sends `ready`: keep the legacy watchdog out of a loaded run
    // (config's startup grace is long enough for 10,005 registrations).
    cfg.timeouts.ready_idle = Duration::from_secs(10);
    let host = start(cfg);
    let list = host.list().expect("list");
    assert_eq!(list.commands.len(), 10_000);
    assert!(log_of(&t, "many").contains("more than 10000 commands registered"));
}

// ----- 9.10: nothing is applied after an extension's exit ---------------

#[test]
fn a_dead_extension_owns_no_name() {
    let t = TempDir::new("fid-ghost");
    let keeper = t.join("keeper.pid");
    // A burst of registrations, then exit 0, while a grandchild keeps
    // stdout open: no EOF, so the exit is found by the liveness check,
    // with frames of the burst possibly still queued.
    let ext = sdk_ext(
        &t.join("ghost9"),
        "ghost9",
        json!({"burst": {"frames": 20_000, "name": "haunt", "keeper": keeper,
                          "subscribe_first": 20_000}}),
    );
    let mut cfg = config(&t, &[ext]);
    cfg.timeouts.ready_idle = Duration::from_secs(30);
    let host = Host::start(cfg).expect("start");
    let keeper = read_pid(&keeper);
    wait_event(&host, "extension_exited", |e| {
        matches!(e, HostEvent::ExtensionExited { .. })
    });
    // Frames of the burst still queued are taken in the loop's next
    // rounds, between these requests: none may claim a name.
    for _ in 0..50 {
        let list = host.list().expect("list");
        assert!(
            list.commands.is_empty(),
            "a dead extension owns {:?}",
            list.commands
        );
    }
    // SAFETY: kill(2) on the fixture's grandchild.
    unsafe {
        libc::kill(i32::try_from(keeper).expect("pid"), libc::SIGKILL);
    }
}

// ----- 10.1: signals: the first waits for accepted requests, the second does not

fn signal(rpc: &Rpc, sig: i32) {
    let pid = i32::try_from(rpc.child.id()).expect("pid");
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// `zot rpc` with one command `x` answered after `delay_ms`, sent and
/// seen by the extension.
fn command_in_flight(t: &TempDir, delay_ms: u64) -> Rpc {
    let rec = t.join("rec");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": delay_ms, "record": rec}),
    );
    let mut rpc = Rpc::start(t, &[ext]);
    rpc.send(json!({"type": "command", "id": "1", "name": "x"}));
    wait_for("the command to reach the extension", || {
        recorded(&rec)
            .iter()
            .any(|f| f["type"] == "command_invoked")
    });
    rpc
}

#[test]
fn sigterm_lets_an_accepted_request_finish() {
    let t = TempDir::new("fid-sigterm");
    let mut rpc = command_in_flight(&t, 1000);
    signal(&rpc, libc::SIGTERM);
    let r = rpc.response("1");
    assert_eq!(r["data"]["display"], "x: ", "answered, not cut off: {r}");
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn a_second_ctrl_c_skips_the_wait() {
    let t = TempDir::new("fid-sigint2");
    // Far longer than the test's deadline: only skipping the wait ends it.
    let mut rpc = command_in_flight(&t, 120_000);
    signal(&rpc, libc::SIGINT);
    // Two signals sent at once may arrive as one: wait until the first
    // took effect (new requests are refused) before the second.
    // The signal is handled on its own thread: ask until it has been.
    let mut n = 0;
    wait_for("the first signal to start the shutdown", || {
        n += 1;
        rpc.call(&format!("l{n}"), json!({"type": "list"}))["success"] == false
    });
    signal(&rpc, libc::SIGINT);
    let r = rpc.response("1");
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap_or("").contains("shutting down"),
        "{r}"
    );
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn the_session_shows_the_answer_of_a_request_pending_at_sigterm() {
    let t = TempDir::new("fid-session-term");
    let rec = t.join("rec");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 1000, "record": rec}),
    );
    let mut cmd = zot();
    cmd.args(["--no-ext", "-e"])
        .arg(&ext)
        .arg("--cwd")
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .stderr(Stdio::null());
    let (mut child, stdin, lines) = spawn_piped(&mut cmd);
    let mut stdin = stdin.expect("stdin");
    stdin.write_all(b"/x late\n").expect("write");
    wait_for("the command to reach the extension", || {
        recorded(&rec)
            .iter()
            .any(|f| f["type"] == "command_invoked")
    });
    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let mut out = Vec::new();
    while let Ok(line) = lines.recv_timeout(DEADLINE) {
        out.push(line);
    }
    let status = child.wait().expect("wait");
    assert!(
        out.iter().any(|l| l == "[/x] x: late"),
        "the pending command's answer is shown before the session ends: {out:?}"
    );
    assert_eq!(status.code(), Some(0));
}
