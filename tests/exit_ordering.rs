//! SPEC 3.13 with 3.17: frames an extension writes right before it
//! exits (notes, then its `tool_result`) reach the rpc client, in
//! order, before the exit is handled; the exit found by the liveness
//! poll while the pipe still holds them must not drop them
//! (fixtures/exit-ordering/burst.py).

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// `zot rpc` with the extension `burst` (configured by `cfg`), ready;
/// with `grace`, every exit grace is that many seconds
/// (`$ZOT_EXIT_GRACE`).
fn start_burst(t: &TempDir, cfg: Value, grace: Option<&str>) -> Rpc {
    let exec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/exit-ordering/burst.py");
    let dir = t.join("burst");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let manifest = json!({"name": "burst", "exec": exec, "args": [cfg.to_string()],
                          "restart": "never"});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    let mut cmd = Rpc::command(t, &[dir]);
    if let Some(grace) = grace {
        cmd.env("ZOT_EXIT_GRACE", grace);
    }
    let mut rpc = Rpc::spawn(&mut cmd);
    rpc.until("ready event", |v| v["type"] == "ready");
    rpc
}

/// Calls `burst`, which answers after `notes` notes and exits at once;
/// with `pipe_bytes`, its stdout pipe holds the whole burst at the exit.
fn answer_written_before_exit_arrives(tag: &str, notes: usize, pipe_bytes: usize) {
    let t = TempDir::new(tag);
    let cfg = json!({"notes": notes, "wait_ms": 300, "pipe_bytes": pipe_bytes});
    let mut rpc = start_burst(&t, cfg, None);
    let answer = rpc.call("b", json!({"type": "tool_call", "name": "burst"}));
    assert_delivered(&rpc, &answer, notes);
}

/// Starts burst with `cfg` (which holds `go`) and calls it (id `b`);
/// returns once burst got the call: zot rpc, burst's pid, and a way to
/// send zot rpc a signal.
fn call_burst_and_hold(t: &TempDir, cfg: Value, grace: &str) -> (Rpc, u32, impl Fn(libc::c_int)) {
    let mut rpc = start_burst(t, cfg, Some(grace));
    let list = rpc.call("l", json!({"type": "list"}));
    let ext = list["data"]["extensions"][0]["pid"].as_u64().expect("pid") as u32;
    let host = rpc.child.id() as i32;
    // SAFETY: kill(2) to our own child process, with integer arguments.
    let signal = move |sig| assert_eq!(unsafe { libc::kill(host, sig) }, 0, "kill zot rpc");
    rpc.send(json!({"type": "tool_call", "name": "burst", "id": "b"}));
    wait_for("burst to get the call", || t.join("go.called").exists());
    (rpc, ext, signal)
}

/// `answer` is burst's, and every note came before it, in order.
fn assert_delivered(rpc: &Rpc, answer: &Value, notes: usize) {
    assert_eq!(
        answer["data"]["content"],
        json!([{"type": "text", "text": "done"}]),
        "the answer written before the exit was lost: {answer}"
    );
    let seen: Vec<String> = (rpc.seen.iter())
        .filter(|v| v["type"] == "notify")
        .map(|v| v["message"].as_str().unwrap_or_default().to_string())
        .collect();
    let want: Vec<String> = (0..notes).map(|i| format!("n{i}")).collect();
    assert!(
        seen == want,
        "notes before the answer: {} of {notes}, first differing at {:?}",
        seen.len(),
        seen.iter().zip(&want).position(|(a, b)| a != b)
    );
}

/// The same when reading what an exited extension wrote takes longer
/// than the host's wait for its last frames (a busy machine; here the
/// host is stopped while the extension writes its burst and exits, so
/// the liveness poll finds the exit first, and the waits are 1 ms, far
/// less than reading 15,000 frames takes). Nothing can write to the dead
/// extension's stdout any more, so whatever its pipe still holds is
/// delivered, however late.
#[test]
fn a_starved_host_delivers_all_an_exited_extension_wrote() {
    let t = TempDir::new("exit-order-starved");
    let (notes, go) = (15_000, t.join("go"));
    let cfg = json!({"notes": notes, "go": go, "pipe_bytes": 1 << 20});
    let (mut rpc, ext, signal) = call_burst_and_hold(&t, cfg, "0.001");
    signal(libc::SIGSTOP);
    std::fs::write(&go, "").expect("write go");
    wait_for("burst to exit", || process_gone(ext));
    signal(libc::SIGCONT);
    let answer = rpc.response("b");
    assert_delivered(&rpc, &answer, notes);
}

/// The same when the extension closed its stdin before it answered and
/// exited (as an exit does: fd 0 closes before fd 1), and the host, which
/// failed to write to it, gets no CPU for longer than the grace it gives
/// a live extension with a closed stdin: the exit decides, once the
/// frames left in its pipe are read.
#[test]
fn an_answer_after_a_failed_write_is_delivered_when_the_extension_exits() {
    let t = TempDir::new("exit-order-deaf");
    let (notes, go) = (15_000, t.join("go"));
    let cfg = json!({"notes": notes, "go": go, "pipe_bytes": 1 << 20, "deaf": true});
    // The grace must outlast the moment from the failed write to the
    // host's stop below, on a busy machine too.
    let (mut rpc, ext, signal) = call_burst_and_hold(&t, cfg, "1");
    // A second call: writing it fails, burst's stdin is closed.
    rpc.send(json!({"type": "tool_call", "name": "burst", "id": "b2"}));
    wait_for("the write to burst to fail", || {
        log_of(&t, "burst").contains("cannot write to stdin")
    });
    let failed = std::time::Instant::now();
    signal(libc::SIGSTOP);
    std::fs::write(&go, "").expect("write go");
    wait_for("burst to exit", || process_gone(ext));
    // Not a synchronisation: the host is kept off the CPU past the 1 s
    // it gives an extension whose stdin is closed.
    let past_grace = std::time::Duration::from_millis(1500);
    std::thread::sleep(past_grace.saturating_sub(failed.elapsed()));
    signal(libc::SIGCONT);
    let answer = rpc.response("b");
    assert_delivered(&rpc, &answer, notes);
}

#[test]
fn an_answer_written_just_before_exit_is_delivered() {
    answer_written_before_exit_arrives("exit-order", 3000, 0);
}

#[test]
fn an_answer_behind_a_full_pipe_at_exit_is_delivered() {
    answer_written_before_exit_arrives("exit-order-pipe", 15_000, 1 << 20);
}

/// The wait for frames after an exit is bounded: when the extension
/// exits while a child it started keeps writing frames to its stdout,
/// the exit is still handled (SPEC 3.13), and the child dies with the
/// group.
#[test]
fn an_exit_is_handled_while_a_child_keeps_writing() {
    let t = TempDir::new("exit-chatty");
    let dir = t.join("chatty");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let pid_file = t.join("child.pid");
    let script = format!(
        r#"printf '{{"type":"hello","name":"chatty"}}\n'
read ack
printf '{{"type":"ready"}}\n'
(while :; do printf '{{"type":"notify","level":"info","message":"tick"}}\n'; sleep 0.1; done) &
echo $! > {pid}
sleep 0.5
exit 0
"#,
        pid = pid_file.display()
    );
    let manifest = json!({"name": "chatty", "exec": "/bin/sh", "args": ["-c", script],
                          "restart": "never"});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    // Short exit graces: the bound, not its 2 s default, is the subject.
    let mut rpc = Rpc::spawn(Rpc::command(&t, &[dir]).env("ZOT_EXIT_GRACE", "0.05"));
    let end = std::time::Instant::now() + DEADLINE;
    loop {
        let ticks = rpc.seen.iter().filter(|v| v["message"] == "tick").count();
        assert!(
            std::time::Instant::now() < end,
            "the exit was never handled while its child wrote ({ticks} ticks seen)"
        );
        let v = rpc.next().expect("zot rpc output");
        if v["type"] == "extension_exited" && v["extension"] == "chatty" {
            break;
        }
    }
    let child = read_pid(&pid_file);
    wait_for("the writing child to die with the group", || {
        process_gone(child)
    });
}
