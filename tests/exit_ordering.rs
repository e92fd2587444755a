//! SPEC 3.13 with 3.17: frames an extension writes right before it
//! exits (notes, then its `tool_result`) reach the rpc client, in
//! order, before the exit is handled; the exit found by the liveness
//! poll while the pipe still holds them must not drop them
//! (fixtures/exit-ordering/burst.py).

mod common;

use common::*;
use serde_json::json;
use std::path::Path;

/// Calls `burst`, which answers after `notes` notes and exits at once;
/// with `pipe_bytes`, its stdout pipe holds the whole burst at the exit.
fn answer_written_before_exit_arrives(tag: &str, notes: usize, pipe_bytes: usize) {
    let t = TempDir::new(tag);
    let exec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/exit-ordering/burst.py");
    let dir = t.join("burst");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let cfg = json!({"notes": notes, "wait_ms": 300, "pipe_bytes": pipe_bytes});
    let manifest = json!({"name": "burst", "exec": exec, "args": [cfg.to_string()],
                          "restart": "never"});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    let mut rpc = Rpc::start(&t, &[dir]);
    rpc.until("ready event", |v| v["type"] == "ready");
    let answer = rpc.call("b", json!({"type": "tool_call", "name": "burst"}));
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
    let mut rpc = Rpc::start(&t, &[dir]);
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
