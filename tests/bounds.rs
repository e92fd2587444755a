//! The memory and flow bounds of `zot rpc`, `zot mcp` and hosted MCP
//! servers (SPEC 9 "Bounds", SPEC 11): floods from clients that do not
//! read, and from servers that do not read, cost bounded memory; a
//! client that does read is never stalled by requests in flight.

// Some tests need the `mcp` or `author` feature; their helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Peak memory a surface may reach while a client floods it without
/// reading: its answers wait up to 8 MiB, the rest is the process.
const FLOOD_RSS_KB: u64 = 64 * 1024;

/// Bytes of requests the flood offers: answered and kept, they would be
/// well over [`FLOOD_RSS_KB`].
const FLOOD_BYTES: usize = 160 << 20;

/// Volume tests through a debug build on a loaded 2-core machine.
const VOLUME_DEADLINE: Duration = Duration::from_secs(120);

/// `zot ARGS --no-ext` with its own ZOT_HOME: stdin piped, stdout piped
/// and never read, stderr lines on the returned channel.
fn spawn_unread(t: &TempDir, args: &[&str]) -> (Child, crossbeam_channel::Receiver<String>) {
    let mut child = zot()
        .args(args)
        .arg("--no-ext")
        .arg("--cwd")
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn zot {args:?}: {e}"));
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Writes `lines` over and over to `child`'s stdin (whose stdout
/// nobody reads) until it says on stderr that it stopped reading; fails
/// if its memory passes [`FLOOD_RSS_KB`] or it reads the whole flood.
fn flood_until_it_stops_reading(
    mut child: Child,
    stderr: crossbeam_channel::Receiver<String>,
    lines: &[String],
) {
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("stdin");
    let offered = Arc::new(AtomicUsize::new(0));
    let chunk: String = lines
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .repeat(256);
    let writer = {
        let offered = offered.clone();
        std::thread::spawn(move || {
            while offered.load(Ordering::Relaxed) < FLOOD_BYTES {
                if stdin.write_all(chunk.as_bytes()).is_err() {
                    return;
                }
                offered.fetch_add(chunk.len(), Ordering::Relaxed);
            }
        })
    };
    let mut said = Vec::new();
    wait_for_within(
        "it to say it stopped reading stdin",
        VOLUME_DEADLINE,
        || {
            let peak = peak_rss_kb(pid).unwrap_or(0);
            assert!(
                peak < FLOOD_RSS_KB,
                "peak RSS {peak} kB over {FLOOD_RSS_KB} kB with nobody reading stdout \
             ({} MiB of requests written so far)",
                offered.load(Ordering::Relaxed) >> 20
            );
            assert!(
                offered.load(Ordering::Relaxed) < FLOOD_BYTES,
                "it read all {} MiB of requests although nobody read its answers",
                FLOOD_BYTES >> 20
            );
            said.extend(stderr.try_iter());
            said.iter()
                .any(|l| l.contains("the client is not reading stdout"))
        },
    );
    let peak = peak_rss_kb(pid).unwrap_or(0);
    assert!(
        peak < FLOOD_RSS_KB,
        "peak RSS {peak} kB over {FLOOD_RSS_KB} kB"
    );
    eprintln!(
        "peak RSS {peak} kB, {} MiB of requests written",
        offered.load(Ordering::Relaxed) >> 20
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = writer.join();
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_answers_of_every_kind_wait_in_bounded_memory_for_a_client_not_reading() {
    let t = TempDir::new("bounds-mcp-unread");
    let (child, stderr) = spawn_unread(&t, &["mcp"]);
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "flood", "version": "1"}});
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": init}).to_string(),
        json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 4, "method": "logging/setLevel",
               "params": {"level": "info"}})
        .to_string(),
        json!({"jsonrpc": "2.0", "id": 5, "method": "no/such/method"}).to_string(),
        "{not json".to_string(),
    ];
    flood_until_it_stops_reading(child, stderr, &lines);
}

#[test]
fn rpc_answers_of_every_kind_wait_in_bounded_memory_for_a_client_not_reading() {
    let t = TempDir::new("bounds-rpc-unread");
    let (child, stderr) = spawn_unread(&t, &["rpc"]);
    let lines = [
        json!({"type": "ping", "id": "p"}).to_string(),
        json!({"type": "no_such_request", "id": "u"}).to_string(),
        json!({"type": "command", "id": "c"}).to_string(), // no name
        "{not json".to_string(),
    ];
    flood_until_it_stops_reading(child, stderr, &lines);
}

#[test]
fn rpc_at_the_in_flight_limit_refuses_at_once_and_keeps_reading() {
    let t = TempDir::new("bounds-rpc-in-flight");
    let (ext, pid_file) = held_tool(&t);
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready", |v| v["type"] == "ready");
    let mut burst = String::new();
    for i in 0..300 {
        let call = json!({"type": "tool_call", "id": format!("t{i}"), "name": "held"});
        burst.push_str(&format!("{call}\n"));
    }
    burst.push_str("{\"type\":\"ping\",\"id\":\"ping\"}\n");
    rpc.send_bytes(burst.as_bytes());

    let pong = rpc.response("ping");
    assert_eq!(pong["data"], json!({"pong": true}), "{pong}");
    for i in 256..300 {
        let refused = rpc.response(&format!("t{i}"));
        let error = refused["error"].as_str().unwrap_or("");
        assert!(
            refused["success"] == false && error.contains("too many requests in flight"),
            "request {i}, beyond 256 in flight: {refused}"
        );
    }
    let early = rpc
        .seen
        .iter()
        .filter(|v| v["success"] == true && v["command"] == "tool_call");
    assert_eq!(
        early.count(),
        0,
        "a held call was answered before its release"
    );

    release_held(&pid_file);
    for i in 0..256 {
        let answer = rpc.response(&format!("t{i}"));
        assert_eq!(answer["success"], true, "held call {i}: {answer}");
    }
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_at_the_in_flight_limit_handles_cancellations_and_ping_at_once() {
    let t = TempDir::new("bounds-mcp-in-flight");
    let (ext, pid_file) = held_tool(&t);
    let mut mcp = Rpc::spawn(&mut Rpc::mcp_command(&t, &[ext], 60));
    let response = |id: Value| move |v: &Value| v["id"] == id && v.get("method").is_none();
    mcp.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
    let list = mcp.until("the tool list", response(json!("list")));
    assert_eq!(list["result"]["tools"][0]["name"], "held", "{list}");

    let mut burst = String::new();
    for id in 1..=300 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "held", "arguments": {}}});
        burst.push_str(&format!("{call}\n"));
    }
    for id in 1..=300 {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": id}});
        burst.push_str(&format!("{cancel}\n"));
    }
    burst.push_str("{\"jsonrpc\":\"2.0\",\"id\":\"ping\",\"method\":\"ping\"}\n");
    mcp.send_bytes(burst.as_bytes());

    let pong = mcp.until("the ping's answer", response(json!("ping")));
    assert_eq!(pong["result"], json!({}), "{pong}");
    for id in 257..=300 {
        let refused = mcp.until("a refusal", response(json!(id)));
        let message = refused["error"]["message"].as_str().unwrap_or("");
        assert!(
            refused["error"]["code"] == -32000 && message.contains("too many requests in flight"),
            "request {id}, beyond 256 in flight: {refused}"
        );
    }

    // Released, the cancelled calls finish; none is answered.
    release_held(&pid_file);
    mcp.close_stdin();
    assert_eq!(mcp.wait(), Some(0));
    let answered: Vec<&Value> = (mcp.seen.iter())
        .filter(|v| v["id"].as_u64().is_some_and(|id| id <= 256))
        .collect();
    assert!(
        answered.is_empty(),
        "cancelled calls were answered: {answered:?}"
    );
}
