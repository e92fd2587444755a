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
