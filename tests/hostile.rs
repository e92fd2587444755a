//! Hostile extensions and hostile input (issue 9): nothing an extension
//! or an rpc client sends may crash the host, leak, or outlive it.

mod common;

use common::*;
use serde_json::json;
use std::path::{Path, PathBuf};

/// An extension directory running `fixtures/hostile/replay.py`, which
/// writes `garbage` to stdout after its handshake, then "replay done".
fn replay_ext(t: &TempDir, garbage: &[u8]) -> PathBuf {
    let dir = t.join("replay");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    std::fs::write(dir.join("garbage"), garbage).expect("write garbage");
    let exe = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hostile/replay.py");
    let manifest = json!({"name": "replay", "exec": exe, "args": [dir.join("garbage")]});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    dir
}

/// Waits until the replay extension has written all its garbage, then
/// checks that the host still answers it and the client.
fn assert_still_serving(rpc: &mut Rpc) {
    rpc.until("the replay extension's \"replay done\" note", |v| {
        v["type"] == "notify" && v["message"] == "replay done"
    });
    let pong = rpc.call("after", json!({"type": "command", "name": "ping"}));
    assert_eq!(
        pong["data"]["display"], "pong",
        "ping after the garbage: {pong}"
    );
    assert_eq!(rpc.call("p", json!({"type": "ping"}))["data"]["pong"], true);
}

/// `[[...]]` nested `depth` levels.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn deep_frames_are_dropped_and_logged() {
    let t = TempDir::new("deep");
    let mut garbage = String::new();
    for depth in [86, 128, 10_000, 1_000_000] {
        garbage += &format!(
            "{{\"type\":\"notify\",\"message\":\"m{depth}\",\"junk\":{}}}\n",
            nested(depth)
        );
    }
    // At the limit (64 levels, the frame's own object included): accepted.
    let schema = (0..63).fold(json!(1), |v, _| json!({ "a": v }));
    garbage += &json!({"type": "register_tool", "name": "deep_ok", "schema": schema}).to_string();
    let ext = replay_ext(&t, garbage.as_bytes());
    let mut rpc = Rpc::start(&t, &[ext]);
    assert_still_serving(&mut rpc);
    let list = rpc.call("l", json!({"type": "list"}));
    let tool = list["data"]["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "deep_ok"))
        .unwrap_or_else(|| panic!("tool deep_ok (64 levels) not registered: {list}"));
    assert_eq!(tool["schema"], schema);
    assert!(
        !rpc.seen
            .iter()
            .any(|v| v["type"] == "notify" && v["message"] != "replay done"),
        "a deep notify got through: {:?}",
        rpc.seen
    );
    let log = log_of(&t, "replay");
    assert_eq!(
        log.matches("dropped frame (nested deeper than 64 levels)")
            .count(),
        4,
        "each deep frame is named in the log:\n{}",
        &log[..log.len().min(4000)]
    );
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn deep_rpc_requests_get_a_parse_error() {
    let t = TempDir::new("deeprpc");
    let mut rpc = Rpc::start(&t, &[]);
    for depth in [86, 128, 10_000, 1_000_000] {
        rpc.send_raw(&format!(
            "{{\"type\":\"ping\",\"id\":\"d{depth}\",\"x\":{}}}",
            nested(depth)
        ));
        let resp = rpc.until(&format!("parse error for depth {depth}"), |v| {
            v["command"] == "parse" && v["success"] == false
        });
        let error = resp["error"].as_str().unwrap_or_default();
        assert!(error.contains("nested deeper than 64 levels"), "{resp}");
        rpc.seen.clear();
        assert_eq!(rpc.call("p", json!({"type": "ping"}))["data"]["pong"], true);
    }
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}
