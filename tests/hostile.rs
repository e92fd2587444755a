//! Hostile extensions and hostile input: nothing an extension
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

/// An extension directory whose manifest runs `fixtures/hostile/<script>`
/// with `args`.
fn script_ext(t: &TempDir, name: &str, script: &str, args: &[&Path]) -> PathBuf {
    let dir = t.join(name);
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let exe = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/hostile")
        .join(script);
    let manifest = json!({"name": name, "exec": exe, "args": args});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    dir
}

/// Pids written by a fixture, one or more per line.
fn pids_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Kills (SIGKILL) on drop every pid listed in a fixture's pid file, so
/// a failing test leaves nothing behind.
struct KillListed(PathBuf);

impl Drop for KillListed {
    fn drop(&mut self) {
        for pid in pids_in(&self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

#[test]
fn extensions_and_their_groups_die_with_the_host() {
    for signal in ["KILL", "ABRT"] {
        let t = TempDir::new("orphan");
        let pid_file = t.join("pids");
        let _cleanup = KillListed(pid_file.clone());
        let ext = script_ext(&t, "orphan", "orphan.sh", &[&pid_file]);
        let mut rpc = Rpc::start(&t, &[ext]);
        rpc.until("the ready event", |v| v["type"] == "ready");
        wait_for("the fixture's pid file", || pids_in(&pid_file).len() == 2);
        let pids = pids_in(&pid_file);
        let zot_pid = rpc.child.id().to_string();
        let killed = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &zot_pid])
            .status()
            .expect("run kill");
        assert!(killed.success(), "kill -{signal} zot failed");
        let _ = rpc.child.wait();
        wait_for(
            &format!(
                "extension {} and grandchild {} to die with zot (SIG{signal})",
                pids[0], pids[1]
            ),
            || pids.iter().all(|&p| process_gone(p)),
        );
    }
}

/// Open descriptors and threads of process `pid`.
fn fds_and_threads(pid: u32) -> (usize, usize) {
    let count = |what: &str| {
        std::fs::read_dir(format!("/proc/{pid}/{what}"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    (count("fd"), count("task"))
}

#[test]
fn reloads_leak_no_fds_or_threads() {
    let t = TempDir::new("leak");
    let pid_file = t.join("escaped");
    let _cleanup = KillListed(pid_file.clone());
    let ext = script_ext(&t, "leaky", "setsid.sh", &[&pid_file]);
    // A reload reports the extensions ready when its startup grace ends:
    // a generous grace, so that a starved machine cannot end it before
    // leaky's `ready` (the subject is leaks, not the grace).
    let mut cmd = zot();
    cmd.args(["rpc", "--no-ext", "--startup-timeout", "60", "--cwd"])
        .arg(t.path())
        .arg("-e")
        .arg(&ext);
    let mut rpc = Rpc::spawn(cmd.env("ZOT_HOME", t.join("home")));
    rpc.until("the ready event", |v| v["type"] == "ready");
    let zot = rpc.child.id();
    let mut reload = |n: usize| {
        let r = rpc.call(&format!("r{n}"), json!({"type": "reload"}));
        assert_eq!(
            r["data"]["ready"], 1,
            "reload {n} did not bring leaky back: {r}"
        );
    };
    for n in 0..3 {
        reload(n);
    }
    let before = fds_and_threads(zot);
    for n in 3..23 {
        reload(n);
    }
    assert_eq!(
        pids_in(&pid_file).len(),
        24,
        "one escaped grandchild per start"
    );
    // The last stopped extension's threads end moments after its reap.
    let end = std::time::Instant::now() + DEADLINE;
    loop {
        let now = fds_and_threads(zot);
        if now.0 <= before.0 + 4 && now.1 <= before.1 + 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "20 reloads leaked: (fds, threads) {before:?} -> {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn a_flooding_extension_keeps_its_logs_bounded() {
    use std::os::unix::fs::MetadataExt;
    let t = TempDir::new("flood");
    let ext = script_ext(&t, "flood", "flood.sh", &[]);
    let limit = 64 * 1024;
    let mut cfg = config(&t, &[ext]);
    cfg.log_rotate_bytes = limit;
    let host = start(cfg);
    let logs = t.join("home/logs");
    let (live, old) = (logs.join("ext-flood.log"), logs.join("ext-flood.log.1"));
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    // Watch the log rotate a few times while the flood goes on.
    let (mut rotations, mut last) = (0, None);
    let end = std::time::Instant::now() + DEADLINE;
    while rotations < 5 {
        assert!(
            size(&live) <= limit && size(&old) <= limit,
            "log over {limit} bytes: {} + {}",
            size(&live),
            size(&old)
        );
        let inode = std::fs::metadata(&old).map(|m| m.ino()).ok();
        if inode.is_some() && inode != last {
            rotations += 1;
            last = inode;
        }
        assert!(
            std::time::Instant::now() < end,
            "the log did not rotate while the extension ran: {} bytes live, {rotations} rotations seen",
            size(&live)
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    drop(host);
    assert!(size(&live) <= limit && size(&old) <= limit);
    let text = std::fs::read_to_string(&live).unwrap_or_default();
    assert!(
        text.contains("[zot] "),
        "the host's own lines still reach the log"
    );
}
