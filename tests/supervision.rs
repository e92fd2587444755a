//! Supervision (docs/PROTOCOL.md#supervision) through the real binary: crashed extensions are
//! restarted with backoff and given up on after 5 crashes in 3 minutes;
//! guards that say `"guard_failure": "block"` fail closed while down.
//!
//! The fixture `fixtures/supervision/ext.py` appends its pid to a file at
//! every start, so the tests count starts instead of timing them.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn event(kind: &str, extension: &str) -> impl Fn(&Value) -> bool {
    let (kind, extension) = (kind.to_string(), extension.to_string());
    move |v| v["type"] == kind.as_str() && v["extension"] == extension.as_str()
}

/// Waits until each of `names` is ready: in the startup `ready` event,
/// or announced by `registered` when it was late (a loaded machine can
/// outlast the startup grace).
fn all_ready(rpc: &mut Rpc, names: &[&str]) {
    let ready = rpc.until("ready event", |v| v["type"] == "ready");
    for name in names {
        let listed = ready["extensions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n == name));
        if !listed {
            rpc.until(
                &format!("{name} registered late"),
                event("registered", name),
            );
        }
    }
}

/// Waits for the `registered` event of `name` that follows everything
/// read so far (a late start may have announced it once already).
fn registered_again(rpc: &mut Rpc, name: &str) {
    let before = rpc
        .seen
        .iter()
        .filter(|v| event("registered", name)(v))
        .count();
    rpc.until_nth(
        &format!("{name} registered again"),
        before + 1,
        event("registered", name),
    );
}

fn list_entry(rpc: &mut Rpc, id: &str, name: &str) -> Value {
    let list = rpc.call(id, json!({"type": "list"}));
    list["data"]["extensions"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == name).cloned())
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

fn tool_call(rpc: &mut Rpc, id: &str, args: Value) -> Value {
    let resp = rpc.call(
        id,
        json!({"type": "tool_call", "name": "echo", "args": args}),
    );
    assert_eq!(resp["success"], true, "{resp}");
    resp["data"].clone()
}

fn sigkill(pid: u32) {
    send_signal(pid, libc::SIGKILL);
}

#[test]
fn a_crash_mid_command_fails_at_once_and_the_extension_comes_back() {
    let t = TempDir::new("sup-crash");
    let rec = t.join("a.rec");
    let a = supervised_ext(
        &t,
        "a",
        json!({"commands": ["hi", "boom"], "record": rec}),
        json!({}),
    );
    let mut rpc = Rpc::start(&t, &[a]);
    all_ready(&mut rpc, &["a"]);
    let first = starts(&t, "a");
    let boom = rpc.call("1", json!({"type": "command", "name": "boom"}));
    assert_eq!(
        (boom["success"].as_bool(), boom["error"].as_str()),
        (Some(false), Some("extension a exited (exit code 3)"))
    );
    let restarted = rpc.until("extension_restarted", event("extension_restarted", "a"));
    assert_eq!(
        restarted,
        json!({"type": "extension_restarted", "extension": "a", "attempt": 1, "status": "exit code 3"})
    );
    // Back and serving: it registered again and answers from a new process.
    registered_again(&mut rpc, "a");
    let hi = rpc.call("2", json!({"type": "command", "name": "hi"}));
    let now = starts(&t, "a");
    assert_eq!(now.len(), 2, "one restart: {now:?}");
    assert_ne!(now[1], first[0]);
    assert_eq!(hi["data"]["display"], format!("hi from {}", now[1]), "{hi}");
    // The crashed request was not sent again to the new process.
    let boom_sent = recorded(&rec)
        .iter()
        .filter(|f| f["type"] == "command_invoked" && f["name"] == "boom")
        .count();
    assert_eq!(boom_sent, 1);
    let entry = list_entry(&mut rpc, "3", "a");
    assert_eq!(
        (entry["state"].as_str(), entry["restarts"].as_u64()),
        (Some("ready"), Some(1))
    );
    assert_eq!(entry["commands"], json!(["boom", "hi"]));
    rpc.call("4", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    let log = log_of(&t, "a");
    for line in [
        "crashed (exit code 3); restarting in 500 ms",
        "restarted (attempt 1: exit code 3)",
    ] {
        assert!(log.contains(line), "log lacks {line:?}:\n{log}");
    }
}

#[test]
fn a_crash_loop_stops_after_five_starts() {
    let t = TempDir::new("sup-loop");
    // Also a guard that fails closed: given up on, it keeps blocking.
    let a = supervised_ext(
        &t,
        "a",
        json!({"crash_starts": 1000, "guard": true}),
        json!({"guard_failure": "block"}),
    );
    let tools = supervised_ext(&t, "tools", json!({"tools": ["echo"]}), json!({}));
    // Backoffs of 0.1 s doubling to 0.8 s (a tenth of the defaults), so the loop
    // is not waited out; `starts` counts, nothing is timed.
    let backoff = Duration::from_millis(100);
    let mut cmd = Rpc::command(&t, &[a, tools]);
    let mut rpc = Rpc::spawn(cmd.env("ZOT_RESTART_BACKOFF", backoff.as_secs_f64().to_string()));
    let reason = "crashed 5 times in 3 min (last: exit code 3)";
    let failed = rpc.until("give-up", |v| {
        v["type"] == "extension_failed" && v["error"] == reason
    });
    assert_eq!(failed["extension"], "a");
    let attempts: Vec<u64> = rpc
        .seen
        .iter()
        .filter(|v| v["type"] == "extension_restarted")
        .filter_map(|v| v["attempt"].as_u64())
        .collect();
    assert_eq!(attempts, [1, 2, 3, 4]);
    let entry = list_entry(&mut rpc, "1", "a");
    assert_eq!(
        (
            entry["state"].as_str(),
            entry["error"].as_str(),
            entry["restarts"].as_u64()
        ),
        (Some("failed"), Some(reason), Some(4))
    );
    // No 6th start: wait past the longest backoff (16 x 0.1 s) for one.
    let quiet_until = Instant::now() + backoff * 16 + Duration::from_secs(1);
    while Instant::now() < quiet_until {
        if let Some(v) = rpc.next_within(quiet_until.saturating_duration_since(Instant::now())) {
            assert_ne!(
                v["type"], "extension_restarted",
                "restarted after giving up"
            );
        }
    }
    assert_eq!(starts(&t, "a").len(), 5);
    let blocked = tool_call(&mut rpc, "2", json!({}));
    assert_eq!(
        blocked["reason"],
        format!("guard a unavailable (failed: {reason})"),
        "{blocked}"
    );
    rpc.call("3", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    assert_eq!(starts(&t, "a").len(), 5);
    let log = log_of(&t, "a");
    assert!(
        log.contains(&format!("not restarted again: {reason}")),
        "{log}"
    );
}

#[test]
fn exit_0_and_restart_never_are_not_restarted() {
    let t = TempDir::new("sup-norestart");
    let zero = supervised_ext(&t, "zero", json!({"exit_after_ready": 0}), json!({}));
    let never = supervised_ext(
        &t,
        "never",
        json!({"exit_after_ready": 3}),
        json!({"restart": "never"}),
    );
    let witness = supervised_ext(
        &t,
        "witness",
        json!({"commands": ["boom", "hi"]}),
        json!({}),
    );
    let mut rpc = Rpc::start(&t, &[zero, never, witness]);
    all_ready(&mut rpc, &["witness"]);
    rpc.until("zero exits", event("extension_exited", "zero"));
    rpc.until("never exits", event("extension_exited", "never"));
    // The witness crashes after both and has the same backoff: once it is
    // back, a restart of either would have happened too.
    rpc.call("1", json!({"type": "command", "name": "boom"}));
    rpc.until("witness restarted", event("extension_restarted", "witness"));
    registered_again(&mut rpc, "witness");
    assert_eq!(
        rpc.call("2", json!({"type": "command", "name": "hi"}))["success"],
        true
    );
    for name in ["zero", "never"] {
        assert_eq!(starts(&t, name).len(), 1, "{name} was started again");
        assert!(
            !rpc.seen.iter().any(event("extension_restarted", name)),
            "{name} was restarted"
        );
    }
    let zero = list_entry(&mut rpc, "3", "zero");
    let never = list_entry(&mut rpc, "4", "never");
    assert_eq!(
        (
            zero["state"].as_str(),
            zero["error"].as_str(),
            zero["restarts"].as_u64()
        ),
        (Some("exited"), Some("exit code 0"), Some(0))
    );
    assert_eq!(
        (
            never["state"].as_str(),
            never["error"].as_str(),
            never["restarts"].as_u64()
        ),
        (Some("exited"), Some("exit code 3"), Some(0))
    );
    rpc.call("5", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    assert!(log_of(&t, "never").contains("not restarted: its manifest says \"restart\": \"never\""));
}

/// A tool extension and a guard `g` whose restarted runs wait for the
/// file `t/release` before saying hello.
fn guarded(t: &TempDir, guard_failure: Option<&str>) -> Rpc {
    let tools = supervised_ext(t, "tools", json!({"tools": ["echo"]}), json!({}));
    let manifest = match guard_failure {
        Some(v) => json!({"guard_failure": v}),
        None => json!({}),
    };
    let g = supervised_ext(
        t,
        "g",
        json!({"guard": true, "hold_restarts": t.join("release")}),
        manifest.clone(),
    );
    // A disabled extension is no guard at all, whatever it says.
    let mut off = manifest;
    off["enabled"] = json!(false);
    let off = supervised_ext(t, "off", json!({"guard": true}), off);
    let mut rpc = Rpc::start(t, &[tools, g, off]);
    all_ready(&mut rpc, &["tools", "g"]);
    let ok = tool_call(&mut rpc, "up-ok", json!({"x": 1}));
    assert_eq!(ok["blocked"], false, "{ok}");
    let no = tool_call(&mut rpc, "up-no", json!({"x": "forbidden"}));
    assert_eq!(
        (no["blocked"].as_bool(), no["reason"].as_str()),
        (Some(true), Some("forbidden by the guard"))
    );
    rpc
}

#[test]
fn a_fail_closed_guard_blocks_while_down_and_allows_once_back() {
    let t = TempDir::new("sup-closed");
    let mut rpc = guarded(&t, Some("block"));
    let pid = starts(&t, "g")[0];
    sigkill(pid);
    // At once, whether or not the host has noticed the death yet.
    let down = tool_call(&mut rpc, "down", json!({"x": 1}));
    assert_eq!(down["blocked"], true, "{down}");
    let reason = down["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("guard g unavailable ("), "{reason}");
    // Restarted, but it has not said hello (nor subscribed) yet: its
    // interception from the last run still counts.
    let restarted = rpc.until("g restarted", event("extension_restarted", "g"));
    assert_eq!(restarted["status"], "signal 9");
    let held = tool_call(&mut rpc, "held", json!({"x": 1}));
    assert_eq!(
        (held["blocked"].as_bool(), held["reason"].as_str()),
        (Some(true), Some("guard g unavailable (restarting)"))
    );
    std::fs::write(t.join("release"), "").expect("release");
    registered_again(&mut rpc, "g");
    let back = tool_call(&mut rpc, "back", json!({"x": 1}));
    assert_eq!(back["blocked"], false, "{back}");
    assert_eq!(
        back["content"],
        json!([{"type": "text", "text": "{\"x\": 1}"}])
    );
    let no = tool_call(&mut rpc, "back-no", json!({"x": "forbidden"}));
    assert_eq!(no["reason"], "forbidden by the guard");
    rpc.call("end", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    assert!(log_of(&t, "g").contains("cannot answer an interception (restarting): blocked"));
}

#[test]
fn a_default_guard_allows_while_down() {
    let t = TempDir::new("sup-open");
    let mut rpc = guarded(&t, None);
    sigkill(starts(&t, "g")[0]);
    let down = tool_call(&mut rpc, "down", json!({"x": "forbidden"}));
    assert_eq!(down["blocked"], false, "{down}");
    rpc.until("g restarted", event("extension_restarted", "g"));
    let held = tool_call(&mut rpc, "held", json!({"x": "forbidden"}));
    assert_eq!(held["blocked"], false, "{held}");
    std::fs::write(t.join("release"), "").expect("release");
    registered_again(&mut rpc, "g");
    let back = tool_call(&mut rpc, "back", json!({"x": "forbidden"}));
    assert_eq!(back["blocked"], true, "{back}");
}

#[test]
fn a_fail_closed_guard_that_does_not_answer_in_time_blocks() {
    let t = TempDir::new("sup-silent");
    let tools = supervised_ext(&t, "tools", json!({"tools": ["echo"]}), json!({}));
    let g = supervised_ext(
        &t,
        "g",
        json!({"guard": true, "guard_silent": true}),
        json!({"guard_failure": "block"}),
    );
    // The intercept limit (5 s, docs/PROTOCOL.md#timeouts) set to 1 s.
    let mut cmd = Rpc::command(&t, &[tools, g]);
    let mut rpc = Rpc::spawn(cmd.env("ZOT_INTERCEPT_TIMEOUT", "1"));
    all_ready(&mut rpc, &["tools", "g"]);
    let silent = tool_call(&mut rpc, "1", json!({}));
    assert_eq!(
        (silent["blocked"].as_bool(), silent["reason"].as_str()),
        (
            Some(true),
            Some("guard g unavailable (no answer within 1 s)")
        )
    );
}

/// An extension crashing at each of its first 4 starts, read up to its
/// 4th exit: it is then in its longest backoff (2 s) before a 5th start.
fn in_a_long_backoff(t: &TempDir) -> Rpc {
    let a = supervised_ext(
        t,
        "a",
        json!({"crash_starts": 4, "commands": ["hi"]}),
        json!({}),
    );
    // A reload answers when its startup grace ends: a generous grace, so
    // that a starved machine cannot end it before `a` is ready again. A
    // generous hello limit too: a start killed for a late hello would be
    // a fifth crash, and then no restart is pending.
    let mut cmd = Rpc::command(t, &[a]);
    cmd.args(["--startup-timeout", "60", "--hello-timeout", "60"]);
    // Backoffs of 0.25 s doubling (half the default): the three before the
    // 4th exit are waited out, the 2 s one after it is the window the
    // test's request must fall into.
    cmd.env("ZOT_RESTART_BACKOFF", "0.25");
    let mut rpc = Rpc::spawn(&mut cmd);
    rpc.until_nth("4 crashes", 4, event("extension_exited", "a"));
    rpc
}

#[test]
fn shutdown_during_a_backoff_cancels_the_restart() {
    let t = TempDir::new("sup-shutdown");
    let mut rpc = in_a_long_backoff(&t);
    rpc.call("1", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    let pids = starts(&t, "a");
    assert_eq!(pids.len(), 4, "started again after the shutdown");
    assert!(
        pids.iter().all(|&p| process_gone(p)),
        "{pids:?} left running"
    );
    let log = log_of(&t, "a");
    assert!(log.contains("pending restart cancelled"), "{log}");
}

#[test]
fn a_crash_while_shutdown_waits_for_accepted_requests_is_not_restarted() {
    let t = TempDir::new("sup-drain");
    let slow = supervised_ext(
        &t,
        "slow",
        json!({"tools": ["slow"], "slow_ms": 3000}),
        json!({}),
    );
    let a = supervised_ext(&t, "a", json!({}), json!({}));
    let mut rpc = Rpc::start(&t, &[slow, a]);
    all_ready(&mut rpc, &["slow", "a"]);
    // The shutdown waits for the slow tool (docs/PROTOCOL.md#shutdown); a crash meanwhile
    // is not restarted, although the wait is far longer than its backoff.
    rpc.send(json!({"type": "tool_call", "id": "1", "name": "slow"}));
    rpc.send(json!({"type": "shutdown", "id": "2"}));
    sigkill(starts(&t, "a")[0]);
    let slow = rpc.response("1");
    assert_eq!(slow["success"], true, "{slow}");
    rpc.response("2");
    assert_eq!(rpc.wait(), Some(0));
    assert_eq!(starts(&t, "a").len(), 1, "restarted during the shutdown");
    assert!(
        !rpc.seen.iter().any(event("extension_restarted", "a")),
        "{:?}",
        rpc.seen
    );
}

#[test]
fn reload_during_a_backoff_cancels_the_restart_and_starts_afresh() {
    let t = TempDir::new("sup-reload");
    let mut rpc = in_a_long_backoff(&t);
    let reload = rpc.call("1", json!({"type": "reload"}));
    assert_eq!(reload["data"]["loaded"], 1, "{reload}");
    // The reload started it (a 5th start); the pending restart did not.
    let entry = list_entry(&mut rpc, "2", "a");
    assert_eq!(
        (entry["state"].as_str(), entry["restarts"].as_u64()),
        (Some("ready"), Some(0))
    );
    assert_eq!(
        rpc.call("3", json!({"type": "command", "name": "hi"}))["success"],
        true
    );
    rpc.call("4", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    assert_eq!(starts(&t, "a").len(), 5);
    let log = log_of(&t, "a");
    assert!(log.contains("pending restart cancelled"), "{log}");
}

#[test]
fn the_session_says_when_an_extension_restarts() {
    let t = TempDir::new("sup-session");
    let a = supervised_ext(&t, "a", json!({"commands": ["boom", "hi"]}), json!({}));
    let mut z = Zot::start(&t, &[a], &[]);
    if !z.seen.iter().any(|l| l.contains("ready: a")) {
        z.saw("registered: a");
    }
    z.send("/boom");
    z.saw("restarted: a (attempt 1: exit code 3)");
    // Read from here on: what follows the restart.
    z.expect("registered: a");
    z.send("/ext");
    let row = z.expect("  a  ");
    assert!(
        row.contains("ready  pid ") && row.contains("  restarts 1  "),
        "{row}"
    );
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
}

/// A shell extension `name` that never says hello on its first start
/// (`exec sleep`) and, started again, registers `/note` and answers it.
fn slow_first_start(t: &TempDir, name: &str, manifest: Value) -> PathBuf {
    let starts = starts_file(t, name);
    let script = format!(
        r#"n=$(cat '{starts}' 2>/dev/null | wc -l); echo $$ >> '{starts}'
[ "$n" -eq 0 ] && exec sleep 60
printf '%s\n' '{{"type":"hello","name":"{name}"}}'
while read -r line; do
  case $line in
    *hello_ack*) printf '%s\n' '{{"type":"register_command","name":"note","description":"n"}}' '{{"type":"ready"}}' ;;
    *command_invoked*) id=${{line#*\"id\":\"}}; id=${{id%%\"*}}
      printf '{{"type":"command_response","id":"%s","action":"display","display":"noted"}}\n' "$id" ;;
    *'"shutdown"'*) printf '{{"type":"shutdown_ack"}}\n'; exit 0 ;;
  esac
done"#,
        starts = starts.display()
    );
    let base = json!({"name": name, "exec": "/bin/sh", "args": ["-c", script]});
    write_manifest(&t.join(name), &with_fields(base, &manifest))
}

/// `zot rpc` with a 3 s hello limit and a 1 s startup grace.
fn rpc_with_short_hello(t: &TempDir, exts: &[PathBuf]) -> Rpc {
    let mut cmd = Rpc::command(t, exts);
    cmd.args(["--startup-timeout", "1"])
        .env("ZOT_HELLO_TIMEOUT", "3");
    Rpc::spawn(&mut cmd)
}

/// A request waiting for a starting extension (docs/PROTOCOL.md#readiness) keeps waiting
/// while that extension, never ready yet, waits for its restart after
/// missing the hello limit: the restart answers it.
#[test]
fn a_request_waits_for_the_restart_of_a_slow_starter() {
    let t = TempDir::new("sup-slow-start");
    let ext = slow_first_start(&t, "scratchpad", json!({}));
    let mut rpc = rpc_with_short_hello(&t, &[ext]);
    let note = rpc.call("1", json!({"type": "command", "name": "note"}));
    assert_eq!(note["success"], true, "{note}");
    assert_eq!(note["data"]["display"], "noted", "{note}");
    assert_eq!(starts(&t, "scratchpad").len(), 2, "answered by the restart");
}

/// An extension that never says hello holds a request for a name nobody
/// has through its first restart only: when that start misses the hello
/// limit too, the request fails saying why, not after every restart the
/// extension still has.
#[test]
fn a_request_waits_for_one_restart_of_an_extension_that_never_says_hello() {
    let t = TempDir::new("sup-never-hello");
    let starts = starts_file(&t, "mute");
    let script = format!("echo $$ >> '{}'; exec sleep 60", starts.display());
    let manifest = json!({"name": "mute", "exec": "/bin/sh", "args": ["-c", script]});
    let ext = write_manifest(&t.join("mute"), &manifest);
    let mut rpc = rpc_with_short_hello(&t, &[ext]);
    let r = rpc.call(
        "1",
        json!({"type": "tool_call", "name": "nosuch", "args": {}}),
    );
    assert_eq!(
        (r["success"].as_bool(), r["error"].as_str()),
        (
            Some(false),
            Some("extension mute failed: no hello within 3 s")
        ),
        "{r}"
    );
    // Events come in order with the answer: one restart came before it.
    let restarted = (rpc.seen.iter()).filter(|v| v["type"] == "extension_restarted");
    assert_eq!(restarted.count(), 1, "seen: {:?}", rpc.seen);
}

/// When the extension a request waited for fails instead, the error
/// says why, not that the name is unknown.
#[test]
fn a_request_for_a_failed_starter_says_why() {
    let t = TempDir::new("sup-failed-start");
    let ext = slow_first_start(&t, "scratchpad", json!({"restart": "never"}));
    let mut rpc = rpc_with_short_hello(&t, &[ext]);
    let note = rpc.call("1", json!({"type": "command", "name": "note"}));
    assert_eq!(
        (note["success"].as_bool(), note["error"].as_str()),
        (
            Some(false),
            Some("extension scratchpad failed: no hello within 3 s")
        ),
        "{note}"
    );
}
