//! The memory and flow bounds of `zot rpc`, `zot mcp` and hosted MCP
//! servers (docs/PROTOCOL.md#limits-and-bounds, docs/PROTOCOL.md#mcp-servers):
//! floods from clients that do not read, and from servers that do not read,
//! cost bounded memory; a client that does read is never stalled by requests in
//! flight.

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

/// `n` requests made by `line(i)`, one per line.
fn burst(n: std::ops::Range<usize>, line: impl Fn(usize) -> Value) -> String {
    n.map(|i| format!("{}\n", line(i))).collect()
}

#[test]
fn rpc_requests_beyond_the_in_flight_limit_wait_and_are_all_served() {
    let t = TempDir::new("bounds-rpc-queue");
    let (ext, pid_file) = held_tool(&t);
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready", |v| v["type"] == "ready");
    // Every slot taken by a call that waits, then 3,000 events, a call
    // cancelled while it waits, and a ping, all without waiting.
    let mut requests = burst(
        0..256,
        |i| json!({"type": "tool_call", "id": format!("t{i}"), "name": "held"}),
    );
    requests += &burst(
        0..3000,
        |i| json!({"type": "event", "id": format!("e{i}"), "event": "custom_thing", "n": i}),
    );
    requests += &format!(
        "{}\n{}\n{}\n",
        json!({"type": "tool_call", "id": "late", "name": "held"}),
        json!({"type": "cancel", "id": "c", "target": "late"}),
        json!({"type": "ping", "id": "ping"}),
    );
    rpc.send_bytes(requests.as_bytes());

    let pong = rpc.response("ping");
    assert_eq!(pong["data"], json!({"pong": true}), "{pong}");
    let cancel = rpc.response("c");
    assert_eq!(cancel["data"], json!({"cancelled": true}), "{cancel}");
    let early: Vec<&Value> = (rpc.seen.iter())
        .filter(|v| v["type"] == "response" && v["command"] != "ping" && v["command"] != "cancel")
        .collect();
    assert!(
        early.is_empty(),
        "answered while every slot was held: {early:?}"
    );

    release_held(&pid_file);
    for i in 0..256 {
        let answer = rpc.response(&format!("t{i}"));
        assert_eq!(answer["success"], true, "held call {i}: {answer}");
    }
    for i in 0..3000 {
        let answer = rpc.response(&format!("e{i}"));
        assert_eq!(answer["success"], true, "event {i}: {answer}");
    }
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    // Every other request was answered exactly once; the cancelled
    // waiting call never.
    let late = rpc.seen.iter().filter(|v| v["id"] == "late").count();
    assert_eq!(late, 0, "the cancelled waiting call was answered");
    let answers = (rpc.seen.iter())
        .filter(|v| v["type"] == "response")
        .count();
    assert_eq!(answers, 256 + 3000 + 2, "one answer per request");
}

#[test]
fn rpc_answers_a_request_that_would_overflow_the_queue_at_once() {
    let t = TempDir::new("bounds-rpc-queue-full");
    let (ext, pid_file) = held_tool(&t);
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready", |v| v["type"] == "ready");
    let mut requests = burst(
        0..256,
        |i| json!({"type": "tool_call", "id": format!("t{i}"), "name": "held"}),
    );
    // 20 events of a little over 1 MiB each: 15 fit the 16 MiB queue.
    let pad = "x".repeat(1 << 20);
    requests += &burst(
        0..20,
        |i| json!({"type": "event", "id": format!("e{i}"), "event": "big", "pad": pad}),
    );
    rpc.send_bytes(requests.as_bytes());
    let refused = rpc.response("e19");
    let error = refused["error"].as_str().unwrap_or("");
    assert!(
        refused["success"] == false && error.contains("too many requests waiting"),
        "{refused}"
    );
    let first = rpc.seen.iter().find(|v| v["type"] == "response");
    assert_eq!(
        first.map(|v| &v["id"]),
        Some(&json!("e15")),
        "the first refusal: the 16th event"
    );
    release_held(&pid_file);
    for i in 0..15 {
        let answer = rpc.response(&format!("e{i}"));
        assert_eq!(answer["success"], true, "queued event {i}: {answer}");
    }
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn rpc_shutdown_is_answered_after_the_waiting_requests() {
    let t = TempDir::new("bounds-rpc-queue-shutdown");
    let (ext, pid_file) = held_tool(&t);
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready", |v| v["type"] == "ready");
    let mut requests = burst(
        0..300,
        |i| json!({"type": "tool_call", "id": format!("t{i}"), "name": "held"}),
    );
    requests += &format!("{}\n", json!({"type": "shutdown", "id": "bye"}));
    rpc.send_bytes(requests.as_bytes());
    rpc.send(json!({"type": "ping", "id": "ping"}));
    let pong = rpc.response("ping");
    assert_eq!(pong["success"], false, "a request after shutdown: {pong}");
    release_held(&pid_file);
    assert_eq!(rpc.wait(), Some(0));
    let ids: Vec<&Value> = (rpc.seen.iter())
        .filter(|v| v["command"] == "tool_call" || v["command"] == "shutdown")
        .map(|v| &v["id"])
        .collect();
    assert_eq!(ids.len(), 301, "every call, then shutdown: {ids:?}");
    assert_eq!(ids.last(), Some(&&json!("bye")), "shutdown last");
    let served = (rpc.seen.iter()).filter(|v| v["command"] == "tool_call" && v["success"] == true);
    assert_eq!(served.count(), 300, "every queued call ran before the stop");
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_requests_beyond_the_in_flight_limit_wait_and_cancellations_drop_them() {
    let t = TempDir::new("bounds-mcp-queue");
    let (ext, pid_file) = held_tool(&t);
    let mut mcp = Rpc::spawn(&mut Rpc::mcp_command(&t, &[ext], 60));
    let response = |id: Value| move |v: &Value| v["id"] == id && v.get("method").is_none();
    mcp.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
    let list = mcp.until("the tool list", response(json!("list")));
    assert_eq!(list["result"]["tools"][0]["name"], "held", "{list}");

    let call = |id: usize| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "held", "arguments": {}}})
    };
    let cancel = |id: usize| {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": id}})
    };
    // 256 take every slot, 1,000 more wait; 10 of each are cancelled.
    let mut requests = burst(1..1257, call);
    requests += &burst(1..11, cancel);
    requests += &burst(1001..1011, cancel);
    // An id that waits is in use.
    requests += &format!("{}\n", call(1100));
    requests += "{\"jsonrpc\":\"2.0\",\"id\":\"ping\",\"method\":\"ping\"}\n";
    mcp.send_bytes(requests.as_bytes());

    let pong = mcp.until("the ping's answer", response(json!("ping")));
    assert_eq!(pong["result"], json!({}), "{pong}");
    let reused = mcp.until("the reused id's refusal", response(json!(1100)));
    assert_eq!(reused["error"]["code"], -32600, "{reused}");
    let early: Vec<&Value> = (mcp.seen.iter())
        .filter(|v| v["id"].as_u64().is_some() && v["error"]["code"] != -32600)
        .collect();
    assert!(
        early.is_empty(),
        "answered while every slot was held: {early:?}"
    );

    release_held(&pid_file);
    let cancelled = |id: u64| (1..11).contains(&id) || (1001..1011).contains(&id);
    for id in (1..1257).filter(|&id| !cancelled(id)) {
        let answer = mcp.until("a call's answer", |v| {
            v["id"] == id && v.get("result").is_some()
        });
        assert_eq!(answer["result"]["isError"], false, "call {id}: {answer}");
    }
    mcp.close_stdin();
    assert_eq!(mcp.wait(), Some(0));
    let answered: Vec<&Value> = (mcp.seen.iter())
        .filter(|v| v["id"].as_u64().is_some_and(cancelled))
        .collect();
    assert!(
        answered.is_empty(),
        "cancelled calls were answered: {answered:?}"
    );
    let tool_calls = (mcp.seen.iter()).filter(|v| v["result"]["isError"] == false);
    assert_eq!(tool_calls.count(), 1236, "each call answered once");
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_answers_a_request_that_would_overflow_the_queue_at_once() {
    let t = TempDir::new("bounds-mcp-queue-full");
    let (ext, pid_file) = held_tool(&t);
    let mut mcp = Rpc::spawn(&mut Rpc::mcp_command(&t, &[ext], 60));
    let response = |id: Value| move |v: &Value| v["id"] == id && v.get("method").is_none();
    mcp.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
    mcp.until("the tool list", response(json!("list")));
    let pad = "x".repeat(1 << 20);
    let call = |id: usize| {
        let arguments = if id > 256 {
            json!({"pad": pad})
        } else {
            json!({})
        };
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "held", "arguments": arguments}})
    };
    // 256 in flight, then 20 calls of a little over 1 MiB: 15 fit the queue.
    mcp.send_bytes(burst(1..277, call).as_bytes());
    let refused = mcp.until("a refusal", response(json!(276)));
    let message = refused["error"]["message"].as_str().unwrap_or("");
    assert!(
        refused["error"]["code"] == -32000 && message.contains("too many requests waiting"),
        "{refused}"
    );
    let first = mcp.seen.iter().find(|v| v["id"].as_u64().is_some());
    assert_eq!(
        first.map(|v| &v["id"]),
        Some(&json!(272)),
        "the first refusal: the 16th waiting call"
    );
    release_held(&pid_file);
    for id in 257..272 {
        let answer = mcp.until("a queued call's answer", response(json!(id)));
        assert_eq!(answer["result"]["isError"], false, "call {id}: {answer}");
    }
    mcp.close_stdin();
    assert_eq!(mcp.wait(), Some(0));
}
