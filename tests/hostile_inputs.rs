//! Hostile clients and inputs (the user's side, not the extensions'):
//! what reaches `zot mcp`, `zot rpc` and the session on stdin, and how
//! they behave when the client stops reading. Fixtures are in
//! `fixtures/hostile-inputs/`.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/hostile-inputs")
        .join(name)
}

/// `zot mcp --no-ext -e EXT...` over pipes, with its own ZOT_HOME.
fn mcp(t: &TempDir, exts: &[PathBuf]) -> Rpc {
    let mut cmd = zot();
    cmd.args(["mcp", "--no-ext", "--startup-timeout", "30", "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "60");
    for e in exts {
        cmd.arg("-e").arg(e);
    }
    Rpc::spawn(&mut cmd)
}

/// The JSON-RPC response to `id` (not a request or notification). On
/// failure it says how many lines came, not what they were (floods).
fn mcp_response(rpc: &mut Rpc, id: Value) -> Value {
    let is_it = |v: &Value| v.get("id") == Some(&id) && v.get("method").is_none();
    if let Some(v) = rpc.seen.iter().find(|v| is_it(v)) {
        return v.clone();
    }
    loop {
        let Some(v) = rpc.next() else {
            panic!(
                "no response to {id} before the deadline ({} lines read)",
                rpc.seen.len()
            );
        };
        if is_it(&v) {
            return v;
        }
    }
}

/// The legacy handshake, as the official clients do it.
fn initialize(rpc: &mut Rpc) {
    rpc.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "hostile", "version": "1"}}}));
    let r = mcp_response(rpc, json!(0));
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18", "{r}");
    rpc.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
}

fn call_tool(rpc: &mut Rpc, id: u64, name: &str, arguments: Value) {
    rpc.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}}));
}

/// Closes stdin, expects exit 0, returns what was written to stderr.
fn end_by_eof(rpc: &mut Rpc, what: &str) -> String {
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "{what} exit status");
    let mut stderr = String::new();
    if let Some(mut e) = rpc.child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    stderr
}

/// Notes a flooding extension writes while the MCP client reads nothing.
const FLOOD_NOTES: u64 = 200_000;
const FLOOD_NOTE_BYTES: u64 = 1000;
/// Far below the ~200 MB the flood takes when it is kept.
const MCP_RSS_BOUND_KB: u64 = 64 * 1024;

#[test]
fn mcp_drops_notes_for_a_client_that_stops_reading_and_memory_stays_bounded() {
    let t = TempDir::new("hostile-mcp-unread");
    let done = t.join("flood.done");
    let mut rpc = mcp(&t, &[fixture("flood")]);
    initialize(&mut rpc);
    // From here on nothing is read until the flood is written.
    let args = json!({"count": FLOOD_NOTES, "size": FLOOD_NOTE_BYTES, "done": done});
    call_tool(&mut rpc, 1, "flood", args);
    wait_for_within("the flood to be written", Duration::from_secs(180), || {
        done.exists()
    });
    // What zot has not handled yet comes before the tool's answer.
    let r = mcp_response(&mut rpc, json!(1));
    assert_eq!(
        r["result"]["content"][0]["text"],
        format!("flooded {FLOOD_NOTES}"),
        "{r}"
    );
    let peak = peak_rss_kb(rpc.child.id()).expect("VmHWM of zot mcp");
    assert!(
        peak < MCP_RSS_BOUND_KB,
        "zot mcp peaked at {peak} kB while its client read nothing during a flood of \
         {FLOOD_NOTES} notes of {FLOOD_NOTE_BYTES} bytes: notes are kept without bound"
    );
    let delivered = |rpc: &Rpc| {
        rpc.seen
            .iter()
            .filter(|v| v["method"] == "notifications/message")
            .count() as u64
    };
    let before = delivered(&rpc);
    assert!(before < FLOOD_NOTES, "every note was kept, none dropped");
    // Reading again: notes get through again, and the count is told.
    call_tool(
        &mut rpc,
        2,
        "flood",
        json!({"count": 1, "size": 1, "done": done}),
    );
    mcp_response(&mut rpc, json!(2));
    assert_eq!(delivered(&rpc), before + 1, "the note after the flood");
    let stderr = end_by_eof(&mut rpc, "zot mcp");
    assert!(
        stderr.contains("zot mcp: notes come faster than the client reads them: some are dropped"),
        "stderr should say when notes start being dropped: {stderr}"
    );
    let total = format!(
        "zot mcp: {} notes dropped: they came faster than the client read them",
        FLOOD_NOTES - before
    );
    assert!(
        stderr.contains(&total),
        "stderr should end with {total:?}: {stderr}"
    );
}
