//! Hostile extensions and hostile input: nothing an extension
//! or an rpc client sends may crash the host, leak, or outlive it.

// Some tests need the `mcp` or `author` feature; their helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use zot_host::ExtensionState;

/// An extension directory running `fixtures/hostile/replay.py`, which
/// writes `garbage` to stdout after its handshake, then "replay done".
fn replay_ext(t: &TempDir, garbage: &[u8]) -> PathBuf {
    let dir = t.join("replay");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    std::fs::write(dir.join("garbage"), garbage).expect("write garbage");
    let exe = fixture_path("hostile/replay.py");
    let manifest = json!({"name": "replay", "exec": exe, "args": [dir.join("garbage")]});
    write_manifest(&dir, &manifest);
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
        log.matches("dropped frame (notify: nested deeper than 64 levels)")
            .count(),
        4,
        "each deep frame is named in the log:\n{}",
        &log[..log.len().min(4000)]
    );
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

/// The host's own log lines quote what an extension wrote made inert:
/// no terminal control byte of the extension's reaches the log through
/// them (`zot ext logs` piped copies the file as it is).
#[test]
fn the_hosts_log_lines_quote_control_bytes_inert() {
    let t = TempDir::new("inert-log");
    let garbage =
        b"\x00\xff\xfe binary \x1b[31m red \x9b\n{\"type\":\"notify\",\"x\x1b]0;t\x07\":1}\n";
    let ext = replay_ext(&t, garbage);
    let mut rpc = Rpc::start(&t, &[ext]);
    assert_still_serving(&mut rpc);
    let log = log_of(&t, "replay");
    let ours: Vec<&str> = log.lines().filter(|l| l.starts_with("[zot] ")).collect();
    let quoted: Vec<&&str> = ours.iter().filter(|l| l.contains("binary")).collect();
    assert_eq!(quoted.len(), 1, "one line quotes the garbage: {ours:?}");
    assert!(
        quoted[0].contains("^@") && quoted[0].contains("^[[31m"),
        "{quoted:?}"
    );
    let control = |c: char| c.is_control() && c != '\t';
    let raw: Vec<&&str> = ours.iter().filter(|l| l.contains(control)).collect();
    assert!(raw.is_empty(), "control bytes in the host's lines: {raw:?}");
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
    let exe = fixture_path("hostile").join(script);
    let manifest = json!({"name": name, "exec": exe, "args": args});
    write_manifest(&dir, &manifest);
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
            send_signal(pid, libc::SIGKILL);
        }
    }
}

/// Two extensions, started in one batch, so the watchdog learns of
/// both groups from one notice.
#[test]
fn extensions_and_their_groups_die_with_the_host() {
    for (signal, sig) in [("KILL", libc::SIGKILL), ("ABRT", libc::SIGABRT)] {
        let t = TempDir::new("orphan");
        let names = ["orphan-a", "orphan-b"];
        let pid_files = names.map(|name| t.join(&format!("{name}.pids")));
        let _cleanup = pid_files.clone().map(KillListed);
        let exts = [0, 1].map(|i| {
            let name = Path::new(names[i]);
            script_ext(&t, names[i], "orphan.sh", &[&pid_files[i], name])
        });
        let mut rpc = Rpc::start(&t, &exts);
        rpc.until("the ready event", |v| v["type"] == "ready");
        wait_for("both fixtures' pid files", || {
            pid_files.iter().all(|f| pids_in(f).len() == 2)
        });
        let pids: Vec<u32> = pid_files.iter().flat_map(|f| pids_in(f)).collect();
        assert!(
            send_signal(rpc.child.id(), sig),
            "kill -{signal} zot failed"
        );
        let _ = rpc.child.wait();
        wait_for(
            &format!(
                "both extensions and their grandchildren {pids:?} to die with zot (SIG{signal})"
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
    let mut cmd = Rpc::command(&t, &[ext]);
    // Each stop ends once leaky's exit is handled, after the exit graces
    // (its escaped grandchild holds the stdout): short ones, as leaks are
    // the subject.
    cmd.args(["--startup-timeout", "60"])
        .env("ZOT_EXIT_GRACE", "0.05");
    let mut rpc = Rpc::spawn(&mut cmd);
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
    poll_until(DEADLINE, || {
        let now = fds_and_threads(zot);
        let settled = now.0 <= before.0 + 4 && now.1 <= before.1 + 2;
        settled
            .then_some(())
            .ok_or_else(|| format!("20 reloads leaked: (fds, threads) {before:?} -> {now:?}"))
    });
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

/// The names of process `pid`'s threads (`/proc/<pid>/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the task list of zot");
    let mut names: Vec<String> = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .collect();
    names.sort();
    names
}

/// Per extension a reader, a writer and a waiter thread, named after
/// it and joined when it is done with: `zot rpc` with N extensions runs
/// at least 3N+1 threads, and reloads (each one stopping N extensions
/// and starting N again) leave the threads as they were.
#[test]
fn each_extension_has_a_reader_a_writer_and_a_waiter_thread_and_reloads_keep_the_count() {
    const N: usize = 4;
    let t = TempDir::new("threads");
    let exts: Vec<PathBuf> = (0..N)
        .map(|i| ext_dir(&t.join(&format!("e{i}")), &format!("e{i}"), json!({})))
        .collect();
    let mut cmd = Rpc::command(&t, &exts);
    cmd.args(["--startup-timeout", "60"]);
    let mut rpc = Rpc::spawn(&mut cmd);
    rpc.until("the ready event", |v| v["type"] == "ready");
    let zot = rpc.child.id();
    let before = thread_names(zot);
    for i in 0..N {
        for role in ["read", "write", "wait"] {
            let name = format!("zot-{role}-e{i}");
            assert!(before.contains(&name), "no thread {name} in {before:?}");
        }
    }
    assert!(
        before.len() > 3 * N,
        "{} threads for {N} extensions: {before:?}",
        before.len()
    );
    for n in 0..5 {
        let r = rpc.call(&format!("r{n}"), json!({"type": "reload"}));
        assert_eq!(r["data"]["ready"], N, "reload {n}: {r}");
    }
    poll_until(DEADLINE, || {
        let now = thread_names(zot);
        (now == before)
            .then_some(())
            .ok_or_else(|| format!("5 reloads changed the threads: {before:?} -> {now:?}"))
    });
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
    // Every 2 ms: each look also checks both files' size bound.
    poll_every(std::time::Duration::from_millis(2), DEADLINE, || {
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
        (rotations >= 5).then_some(()).ok_or_else(|| {
            format!(
                "the log did not rotate while the extension ran: {} bytes live, {rotations} rotations seen",
                size(&live)
            )
        })
    });
    drop(host);
    assert!(size(&live) <= limit && size(&old) <= limit);
    // The flood goes on after the host's earlier lines (the signal's),
    // rotating them into the kept file or out: the log is both files.
    let text = std::fs::read_to_string(&live).unwrap_or_default()
        + &std::fs::read_to_string(&old).unwrap_or_default();
    assert!(
        text.contains("[zot] "),
        "the host's own lines still reach the log (live or kept file)"
    );
    // Its exit is handled once what it wrote to stderr is in the log:
    // the host's line about it is the last (a log rotates before a
    // write, so the live file has it).
    let live_text = std::fs::read_to_string(&live).unwrap_or_default();
    let last = live_text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("[zot] ") && last.contains(" exited ("),
        "the log ends with the host's line about the exit, not {last:?}"
    );
}

// ----------------------------------------------------------------------
// Extensions that misbehave in their process or their registrations:
// stopped, deaf, mute, crash-looping, churning, echoing huge strings.
// Fixtures in fixtures/hostile2/.

/// An extension directory whose manifest runs `fixtures/hostile2/<script>`
/// with `args`; `extra` fields are added to the manifest.
fn hostile_ext(t: &TempDir, name: &str, script: &str, args: &[&str], extra: Value) -> PathBuf {
    let exe = fixture_path("hostile2").join(script);
    let manifest = json!({"name": name, "exec": exe, "args": args});
    write_manifest(&t.join(name), &with_fields(manifest, &extra))
}

/// A host that, when dropped, stops without waiting for the requests
/// it accepted: a failing test must not wait for their 600 s timeout.
struct StopNow(zot_host::Host);

impl std::ops::Deref for StopNow {
    type Target = zot_host::Host;
    fn deref(&self) -> &zot_host::Host {
        &self.0
    }
}

impl Drop for StopNow {
    fn drop(&mut self) {
        let reply = Box::new(|_| {});
        self.0.submit(zot_host::Request::ShutdownNow { reply });
    }
}

/// Size of a file, 0 when it does not exist.
fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Starts `hostile_ext(name, script, [pid file], extra)` with commands
/// timing out after `command`; returns once the extension wrote its pid
/// (which each such fixture does once it is in the state under test).
fn start_with_pid(
    t: &TempDir,
    name: &str,
    script: &str,
    extra: Value,
    command: std::time::Duration,
) -> (zot_host::Host, u32) {
    let pid_file = t.join(&format!("{name}.pid"));
    let pid_arg = pid_file.to_string_lossy().into_owned();
    let ext = hostile_ext(t, name, script, &[&pid_arg], extra);
    let mut cfg = config(t, &[ext]);
    cfg.timeouts.command = command;
    let host = start_ready(cfg);
    (host, read_pid(&pid_file))
}

/// Runs `/c`, whose answer must come well before its timeout: a reply
/// not there within DEADLINE fails the test with `late`.
fn command_c(host: &zot_host::Host, late: &str) -> Result<Option<String>, String> {
    let (tx, reply) = crossbeam_channel::bounded(1);
    host.handle().submit(zot_host::Request::Command {
        name: "c".into(),
        args: String::new(),
        reply: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    });
    let reply = recv_on(host, late, &reply);
    reply.map(|r| r.display).map_err(|e| e.to_string())
}

/// Strings an extension sends are echoed into its log when the host
/// refuses them; a huge one must not take the log past its bound
/// (README: under 2 x the rotation limit however much it writes).
#[test]
fn huge_strings_echoed_in_the_log_keep_it_bounded() {
    let t = TempDir::new("h2-huge-strings");
    // 100,000 x U+200B: 300 KB on the wire, 800 KB once escaped.
    let ext = hostile_ext(&t, "huge", "huge_strings.py", &["100000"], json!({}));
    let limit = 256 * 1024;
    let mut cfg = config(&t, &[ext]);
    cfg.log_rotate_bytes = limit;
    let host = start_ready(cfg);
    assert_eq!(display_of(&host, "ping").as_deref(), Some("pong"));
    host.shutdown();
    let logs = t.join("home/logs");
    let (live, old) = (logs.join("ext-huge.log"), logs.join("ext-huge.log.1"));
    assert!(
        size(&live) <= limit && size(&old) <= limit,
        "log over its {limit}-byte limit: {} + {} bytes",
        size(&live),
        size(&old)
    );
    let text = std::fs::read_to_string(&old).unwrap_or_default()
        + &std::fs::read_to_string(&live).unwrap_or_default();
    for refused in [
        "hello says name \"huge",
        "rejected command \"two words",
        "cannot intercept \"nothing",
        "notify level \"loud",
    ] {
        assert!(
            text.contains(refused),
            "the log no longer says {refused:?}:\n{}",
            &text[..text.len().min(2000)]
        );
    }
}

/// An extension that closes its stdout but runs on can never answer
/// again: the request it was given fails soon, not at its timeout, and
/// the extension is failed and killed (docs/PROTOCOL.md#handshake says so before hello).
#[test]
fn an_extension_that_closes_its_stdout_but_runs_on_is_failed() {
    let t = TempDir::new("h2-mute");
    let never = json!({"restart": "never"});
    let ten_minutes = std::time::Duration::from_secs(600);
    let (host, pid) = start_with_pid(&t, "mute", "mute.sh", never, ten_minutes);
    let host = StopNow(host);
    let late = "the request to the muted extension waited for its 600 s timeout";
    let why = "closed its stdout but did not exit";
    assert_eq!(
        command_c(&host, late),
        Err(format!("extension mute exited (killed: {why})"))
    );
    let failed = wait_event(&host, "extension_failed", |e| {
        matches!(e, zot_host::HostEvent::ExtensionFailed { .. })
    });
    assert_eq!(
        failed,
        zot_host::HostEvent::ExtensionFailed {
            extension: "mute".into(),
            error: why.into()
        }
    );
    wait_for("the muted extension to be killed", || process_gone(pid));
    let list = host.list().expect("list");
    let mute = list.extension("mute").expect("mute listed");
    assert_eq!(mute.state, ExtensionState::Failed { reason: why.into() });
}

/// Resident memory of process `pid` in kB (`VmRSS`), if readable.
fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// What an extension registers stays in the host's memory until it
/// exits: 10,000 names per kind are no bound when each may be 16 MiB.
const HOARD: usize = 48;
const HOARD_BYTES: usize = 1 << 20;
/// Far below the ~200 MB the hoard would take if it were all kept.
const HOARD_RSS_BOUND_KB: u64 = 120 * 1024;

#[test]
fn registrations_keep_their_memory_bounded() {
    let t = TempDir::new("h2-hoard");
    let done = t.join("hoard.done");
    let args = [HOARD.to_string(), HOARD_BYTES.to_string()];
    let done_arg = done.to_string_lossy().into_owned();
    let ext = hostile_ext(
        &t,
        "hoard",
        "hoard.py",
        &[&args[0], &args[1], &done_arg],
        json!({}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    wait_for_within(
        "the hoard to be written",
        std::time::Duration::from_secs(120),
        || done.exists(),
    );
    // The fixture serves `ping` only once all is written: its answer
    // comes after every registration.
    let ping = rpc.call("p", json!({"type": "command", "name": "ping"}));
    assert_eq!(ping["data"]["display"], "pong", "{ping}");
    let rss = rss_kb(rpc.child.id()).expect("VmRSS of zot rpc");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    assert!(
        rss < HOARD_RSS_BOUND_KB,
        "zot keeps {rss} kB after {HOARD} tools and events of {HOARD_BYTES} bytes each: \
         registrations are kept without bound"
    );
    let log = log_of(&t, "hoard");
    for capped in [
        "more than 16 MiB of tools registered: the rest are ignored",
        "event names beyond the cap (10000 names, 16 MiB) ignored",
    ] {
        assert!(log.contains(capped), "the log lacks {capped:?}");
    }
}

/// An `exec` that cannot run gets an error that says why, not the bare
/// errno of exec(2): for a script whose `#!` interpreter is missing that
/// is "No such file or directory", about a file that is there.
#[test]
fn an_exec_that_cannot_run_is_failed_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new("h2-exec");
    let ext = |name: &str, exec: &str| {
        let dir = t.join(name);
        std::fs::create_dir_all(dir.join("sub")).expect("create ext dir");
        let manifest = json!({"name": name, "exec": exec});
        write_manifest(&dir, &manifest);
        dir
    };
    let is_dir = ext("isdir", "./sub");
    let plain = ext("plain", "./run.sh");
    std::fs::write(plain.join("run.sh"), "#!/bin/sh\n").expect("write run.sh");
    let shebang = ext("shebang", "./run.sh");
    let script = shebang.join("run.sh");
    std::fs::write(&script, "#!/no/such/interpreter\n").expect("write run.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // An ELF program whose dynamic loader is missing (built for another
    // libc) gets the same ENOENT: this test's own binary, its PT_INTERP
    // path broken ("/lib64/ld-..." -> "/Xib64/ld-...").
    let loader = ext("loader", "./prog");
    let mut elf = std::fs::read(std::env::current_exe().expect("test exe")).expect("read exe");
    let interp =
        elf_interpreter_offset(&elf).expect("the test binary to be dynamically linked (PT_INTERP)");
    elf[interp + 1] = b'X';
    let prog = loader.join("prog");
    std::fs::write(&prog, &elf).expect("write prog");
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dirs = [&is_dir, &plain, &shebang, &loader].map(PathBuf::clone);
    let host = start(config(&t, &dirs));
    let list = host.list().expect("list");
    for (name, dir, exec, why) in [
        ("isdir", &is_dir, "./sub", "it is a directory"),
        ("plain", &plain, "./run.sh", "it is not executable"),
        (
            "shebang",
            &shebang,
            "./run.sh",
            "the interpreter on its #! line was not found",
        ),
        (
            "loader",
            &loader,
            "./prog",
            "its dynamic loader was not found (built for another system?)",
        ),
    ] {
        let ext = list.extension(name).expect("listed");
        let want = format!("cannot start {}: {why}", dir.join(exec).display());
        assert_eq!(ext.state, ExtensionState::Failed { reason: want }, "{name}");
    }
}

/// An extension that closes its stdin but runs on: the request whose
/// frame could not be written fails soon after the write failed, not
/// at its timeout (one asked later fails at once).
#[test]
fn a_request_to_an_extension_that_closed_its_stdin_fails_soon() {
    let t = TempDir::new("h2-deaf");
    let ten_minutes = std::time::Duration::from_secs(600);
    // Its pid is written once its stdin is closed.
    let (host, _) = start_with_pid(&t, "deaf", "deaf.sh", json!({}), ten_minutes);
    let host = StopNow(host);
    let late = "the request that could not be written waited for its 600 s timeout";
    assert_eq!(
        command_c(&host, late),
        Err("extension deaf is not accepting input".to_string())
    );
    drop(host);
    let log = log_of(&t, "deaf");
    assert!(log.contains("cannot write to stdin"), "{log}");
}

/// CPU time (user + system) process `pid` has used so far.
fn cpu_time(pid: u32) -> std::time::Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let fields: Vec<u64> = (stat.rsplit_once(')').map_or("", |(_, rest)| rest))
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf(3) takes an integer and touches no memory.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    // utime and stime are fields 14 and 15; `fields` starts at field 3.
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    std::time::Duration::from_millis(ticks * 1000 / ticks_per_s)
}

/// An extension that crashes at every start is restarted after 0.5, 1,
/// 2 and 4 s, then given up on: 7.5 s in which the host only waits. A
/// loop spinning on a backoff deadline would burn most of that in CPU
/// time even on a loaded machine; waiting costs next to none.
#[test]
fn a_crash_loop_costs_the_host_no_cpu_while_it_backs_off() {
    let t = TempDir::new("h2-crashloop");
    let dir = t.join("crashy");
    let script = r#"printf '{"type":"hello","name":"crashy"}\n'; exit 3"#;
    let manifest = json!({"name": "crashy", "exec": "/bin/sh", "args": ["-c", script]});
    write_manifest(&dir, &manifest);
    let mut rpc = Rpc::start(&t, &[dir]);
    let reason = "crashed 5 times in 3 min (last: exit code 3)";
    rpc.until("give-up", |v| {
        v["type"] == "extension_failed" && v["error"] == reason
    });
    let cpu = cpu_time(rpc.child.id());
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    assert!(
        cpu < std::time::Duration::from_secs(1),
        "zot used {cpu:?} of CPU through 5 crashes and 7.5 s of backoff: it spins while it waits"
    );
}

/// How often thread `tid` of process `pid` has gone to sleep so far
/// (`voluntary_ctxt_switches`): once per wake-up of a thread that waits.
fn sleeps_of(pid: u32, tid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .expect("read /proc/PID/task/TID/status");
    let line = (status.lines())
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .expect("a voluntary_ctxt_switches line");
    line.trim().parse().expect("a count")
}

/// With nothing to do, the loop sleeps until something comes: no
/// check wakes it to look for exits (an exit is a message from the
/// extension's waiter thread), so its thread (`zot rpc`'s main thread)
/// does not wake at all while the host is idle, for as long as one
/// looks. The look lasts 3 s; a periodic check, even once a second,
/// would wake it more than once.
#[test]
fn an_idle_host_does_not_wake_its_loop() {
    let t = TempDir::new("h2-idle");
    let ext = ext_dir(&t.join("quiet"), "quiet", json!({}));
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("the ready event", |v| v["type"] == "ready");
    // Every deadline of the startup is behind once `list` has answered.
    rpc.call("l", json!({"type": "list"}));
    let zot = rpc.child.id();
    let before = sleeps_of(zot, zot);
    std::thread::sleep(std::time::Duration::from_secs(3));
    let woke = sleeps_of(zot, zot) - before;
    assert!(
        woke <= 1,
        "the idle loop woke {woke} times in 3 s: something polls"
    );
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

/// An MCP server's tools that leave its list give their share of the
/// registration caps back: a server whose list churns (each `rotate`
/// swaps a 2 MiB tool for a new one) keeps registering past the 16 MiB
/// it would have spent in all.
#[cfg(feature = "mcp")]
#[test]
fn an_mcp_tool_list_that_churns_does_not_use_up_the_caps() {
    let t = TempDir::new("h2-churn");
    let size = (2usize << 20).to_string();
    let ext = hostile_ext(
        &t,
        "churn",
        "churn_mcp.py",
        &[&size],
        json!({"protocol": "mcp"}),
    );
    let host = StopNow(start_ready(config(&t, &[ext])));
    for n in 1..=12 {
        let call = zot_host::ToolRequest::new("rotate", json!({}));
        let outcome = host
            .call_tool_direct(call)
            .expect("rotate answered")
            .result();
        let big = format!("big{n}");
        assert_eq!(outcome.content, [json!({"type": "text", "text": big})]);
        poll_until(DEADLINE, || {
            let tools = host.list().expect("list").tools;
            tools
                .iter()
                .any(|t| t.name == big)
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "tool {big} never registered after {n} list changes:\n{}",
                        log_of(&t, "churn")
                    )
                })
        });
    }
}

/// What an extension says reaches the user's terminal through the
/// session: its control characters must not act there (an escape
/// sequence can move the cursor over earlier lines, retitle the window
/// or, with OSC 52, write the clipboard; a carriage return can overwrite
/// the `[ext] info:` prefix). They are shown in caret notation.
#[test]
fn the_session_shows_control_characters_from_extensions_inert() {
    let t = TempDir::new("h2-escapes");
    let evil = "\u{1b}]52;c;aGk=\u{7}\u{1b}[2J\rspoofed\u{9b}1m\ttab";
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({
            "register": [{"type": "register_command", "name": "x", "description": evil},
                         command("p")],
            "on_ready": [{"type": "notify", "level": "info", "message": evil}],
            "commands": {
                "x": {"action": "display", "display": evil},
                "p": {"action": "open_panel",
                      "open_panel": {"id": "p", "title": evil, "lines": [evil], "footer": evil}},
            },
        }),
    );
    let mut z = Zot::start(&t, &[a], &[]);
    z.saw("[a] info: ");
    z.send("/x");
    z.send("/p");
    z.send("/commands");
    z.expect("/x");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
    let raw: Vec<&String> = (z.seen.iter())
        .filter(|l| l.chars().any(|c| c.is_control() && c != '\t'))
        .collect();
    assert!(
        raw.is_empty(),
        "control characters reached the terminal: {raw:?}"
    );
    let shown = "^[]52;c;aGk=^G^[[2J^Mspoofed\\u{9b}1m\ttab";
    for (what, prefix) in [
        ("note", "[a] info: "),
        ("display", "[/x] "),
        ("panel title", "┌─ "),
        ("panel line", "│ "),
        ("panel footer", "└─ "),
        ("description", "  /x"),
    ] {
        // Without the `panels` feature the panel is not shown at all.
        if what.starts_with("panel") && !cfg!(feature = "panels") {
            continue;
        }
        assert!(
            z.seen
                .iter()
                .any(|l| l.starts_with(prefix) && l.contains(shown)),
            "the {what} is not shown as {shown:?}:\n{}",
            z.seen.join("\n")
        );
    }
}

/// The session logs a `panel_render` for a panel that is not open; it
/// appends to the extension's log itself, past the host's rotation, so
/// logging every one let an extension fill the disk (100 MB in 10 s).
#[cfg(feature = "panels")]
#[test]
fn renders_of_a_closed_panel_keep_the_log_bounded() {
    let t = TempDir::new("h2-pflood");
    let ext = hostile_ext(&t, "pflood", "panel_flood.sh", &["100000"], json!({}));
    let mut z = Zot::start(&t, &[ext], &[]);
    z.saw("[pflood] info: flood done");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
    let logs = t.join("home/logs");
    let (live, old) = (logs.join("ext-pflood.log"), logs.join("ext-pflood.log.1"));
    assert!(
        size(&live) + size(&old) < 64 * 1024,
        "100,000 renders of a closed panel took the log to {} + {} bytes",
        size(&live),
        size(&old)
    );
    let log = log_of(&t, "pflood");
    assert!(
        log.contains("panel_render for panel \"nope\", which is not open: not shown (1 so far)"),
        "the first render is no longer logged:\n{log}"
    );
}

/// An extension that stops itself (SIGSTOP) mid-call: the call times
/// out, and shutdown's SIGKILL ends it (a stopped process never acts
/// on `shutdown` or SIGTERM, and is not an exited one to reap).
#[test]
fn an_extension_that_stops_itself_mid_call_times_out_and_is_killed() {
    let t = TempDir::new("h2-stops");
    let second = std::time::Duration::from_secs(1);
    let (host, pid) = start_with_pid(&t, "stops", "stops.sh", json!({}), second);
    assert_eq!(
        host.command("c", "").map_err(|e| e.to_string()),
        Err("extension stops did not answer /c within 1 s".to_string())
    );
    let list = host.list().expect("list");
    assert_eq!(
        list.extension("stops").map(|e| &e.state),
        Some(&ExtensionState::Ready)
    );
    host.shutdown();
    assert!(process_gone(pid), "the stopped extension outlived shutdown");
    let log = log_of(&t, "stops");
    assert!(
        log.contains("SIGKILL") && log.contains("exited (signal 9)"),
        "{log}"
    );
}

/// A tool registered again replaces its registration, in the caps too:
/// 48 registrations of one 3 MiB tool hold 3 MiB, not 144, so the last
/// is taken like the first.
#[test]
fn a_tool_registered_again_and_again_counts_once() {
    let t = TempDir::new("h2-again");
    let done = t.join("again.done");
    let done_arg = done.to_string_lossy().into_owned();
    let size = HOARD_BYTES.to_string();
    let args = ["48", &size, &done_arg, "same"];
    let ext = hostile_ext(&t, "hoard", "hoard.py", &args, json!({}));
    let host = StopNow(start_ready(config(&t, &[ext])));
    wait_for_within(
        "the registrations to be written",
        std::time::Duration::from_secs(120),
        || done.exists(),
    );
    // The fixture serves `ping` only once all is written.
    assert_eq!(display_of(&host, "ping").as_deref(), Some("pong"));
    let list = host.list().expect("list");
    let tool = list.tools.iter().find(|t| t.name == "t").expect("tool t");
    let number = tool.description.split(' ').next().unwrap_or_default();
    assert_eq!(
        number, "47",
        "tool t kept registration {number}, not the last"
    );
}

/// Where an ELF64 file's PT_INTERP path starts, if it has one.
fn elf_interpreter_offset(elf: &[u8]) -> Option<usize> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    if elf.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    (0..usize::from(phnum)).find_map(|i| {
        let ph = usize::try_from(phoff).ok()? + i * usize::from(phentsize);
        let is_interp = elf.get(ph..ph + 4)? == 3u32.to_le_bytes();
        is_interp.then(|| usize::try_from(u64_at(ph + 8)?).ok())?
    })
}

// ----------------------------------------------------------------------
// Seeded randomized input: random and mutated lines fed to
// the frame reader (through a real extension process that replays
// them) and to the rpc request parser (through the real `zot rpc`).
// Whatever the lines hold, the stream goes on and the host answers.
//
// The seed is fixed; set `ZOT_FUZZ_SEED` to try another. A failure
// prints the seed that reproduces it.

/// Lines per run, and a bound on one line's size.
const LINES: usize = 300;
const MAX_DEPTH_TRIED: usize = 100_000;

fn seed() -> u64 {
    std::env::var("ZOT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026_0009)
}

/// Prints the seed if the test fails while this is alive.
struct SeedReport(u64);

impl Drop for SeedReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("fuzz_inputs failed with ZOT_FUZZ_SEED={}", self.0);
        }
    }
}

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Awkward values to splice into otherwise valid lines.
const ODD_VALUES: &[&str] = &[
    "1e999999",
    "-1e-999999",
    "123456789012345678901234567890123456789012345678901234567890",
    "18446744073709551616",
    "-9223372036854775809",
    "0.000000000000000000000000000000000000000000000001",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\"\\uDFFF\\uD800\"",
    "null",
    "[]",
    "{}",
    "true",
    "\"\"",
];

/// One mutated line built from `templates`; never contains `\n`.
fn mutated_line(rng: &mut Rng, templates: &[String]) -> Vec<u8> {
    let mut line = rng.pick(templates).clone().into_bytes();
    for _ in 0..=rng.below(3) {
        match rng.below(11) {
            // Truncated anywhere, UTF-8 sequences included.
            0 => line.truncate(rng.below(line.len() + 1)),
            // Invalid UTF-8 and NULs.
            1 => {
                let at = rng.below(line.len() + 1);
                const JUNK: [&[u8]; 5] = [b"\xff\xfe", b"\0", b"\xc3", b"\xed\xa0\x80", b"\0\0\0"];
                let junk = *rng.pick(&JUNK);
                line.splice(at..at, junk.iter().copied());
            }
            // Deep nesting, from just past the limit to very deep.
            2 => {
                let depth = *rng.pick(&[65, 86, 128, 1000, MAX_DEPTH_TRIED]);
                let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                line =
                    format!("{{\"type\":\"notify\",\"message\":\"m\",\"x\":{deep}}}").into_bytes();
            }
            // An odd value in place of the first value after a colon.
            3 => {
                let text = String::from_utf8_lossy(&line).into_owned();
                if let Some(i) = text.find(':') {
                    let end = text[i + 1..]
                        .find([',', '}'])
                        .map_or(text.len(), |j| i + 1 + j);
                    line = format!("{}{}{}", &text[..=i], rng.pick(ODD_VALUES), &text[end..])
                        .into_bytes();
                }
            }
            // CRLF ending, BOM start.
            4 => line.push(b'\r'),
            5 => {
                line.splice(0..0, *b"\xEF\xBB\xBF");
            }
            // A byte flipped.
            6 if !line.is_empty() => {
                let at = rng.below(line.len());
                line[at] ^= 1 << rng.below(8);
            }
            // Random bytes.
            7 => line = (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
            // Two lines glued, or a duplicate key.
            8 => line.extend_from_slice(rng.pick(templates).as_bytes()),
            9 if !line.is_empty() => {
                line.splice(1..1, *b"\"type\":7,");
            }
            // Unchanged.
            _ => {}
        }
    }
    for b in &mut line {
        if *b == b'\n' {
            *b = b' ';
        }
    }
    line
}

fn frame_templates() -> Vec<String> {
    [
        json!({"type": "notify", "level": "warn", "message": "fuzz"}),
        json!({"type": "register_command", "name": "fz", "description": "d"}),
        json!({"type": "register_tool", "name": "ft", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}),
        json!({"type": "subscribe", "events": ["turn_end"], "intercept": ["tool_call"]}),
        json!({"type": "tool_result", "id": "999", "content": [{"type": "text", "text": "t"}]}),
        json!({"type": "command_response", "id": "998", "action": "display", "display": "x"}),
        json!({"type": "event_intercept_response", "id": "997", "block": true}),
        json!({"type": "panel_render", "panel_id": "p", "lines": ["a", "b"]}),
        json!({"type": "panel_close", "panel_id": "p"}),
        json!({"type": "clear_notes"}),
        json!({"type": "hello", "name": "again"}),
    ]
    .iter()
    .map(|v| v.to_string())
    .collect()
}

fn request_templates() -> Vec<String> {
    [
        json!({"type": "ping", "id": "f"}),
        json!({"type": "list", "id": "f"}),
        json!({"type": "command", "id": "f", "name": "nope", "args": "a b"}),
        json!({"type": "tool_call", "id": "f", "name": "read", "args": {"path": "/x"}}),
        json!({"type": "tool_call", "id": "f", "name": "nope", "args": {"k": [1, 2, {"z": null}]}}),
        json!({"type": "intercept", "id": "f", "event": "tool_call", "tool_name": "bash", "tool_args": {}}),
        json!({"type": "event", "id": "f", "event": "turn_end", "stop": "done"}),
        json!({"type": "panel_key", "id": "f", "extension": "e", "panel_id": "p", "key": "up"}),
        json!({"type": "panel_close", "id": "f", "extension": "e", "panel_id": "p"}),
        json!({"type": "mystery", "id": "f"}),
    ]
    .iter()
    .map(|v| v.to_string())
    .collect()
}

/// Whether the host skips `line` without a response: blank once the
/// `\r` and a BOM are gone.
fn is_blank(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    line.iter().all(u8::is_ascii_whitespace)
}

#[test]
fn random_frames_never_stop_the_reader() {
    let seed = seed();
    let _report = SeedReport(seed);
    let mut rng = Rng(seed);
    let templates = frame_templates();
    let mut garbage = Vec::new();
    for _ in 0..LINES {
        garbage.extend(mutated_line(&mut rng, &templates));
        garbage.push(b'\n');
    }
    let t = TempDir::new("fuzz-frames");
    let dir = t.join("replay");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    std::fs::write(dir.join("garbage"), &garbage).expect("write garbage");
    let exe = fixture_path("hostile/replay.py");
    let manifest = json!({"name": "replay", "exec": exe, "args": [dir.join("garbage")]});
    write_manifest(&dir, &manifest);
    let mut rpc = Rpc::start(&t, &[dir]);
    rpc.until("the \"replay done\" note after the random frames", |v| {
        v["type"] == "notify" && v["message"] == "replay done"
    });
    let pong = rpc.call("after", json!({"type": "command", "name": "ping"}));
    assert_eq!(pong["data"]["display"], "pong", "{pong}");
    assert!(log_of(&t, "replay").contains("dropped frame"));
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc did not exit cleanly");
}

#[test]
fn random_requests_each_get_one_response() {
    let seed = seed();
    let _report = SeedReport(seed);
    let mut rng = Rng(seed ^ 0x00ff_00ff);
    let templates = request_templates();
    let t = TempDir::new("fuzz-rpc");
    let mut rpc = Rpc::start(&t, &[]);
    let mut expected = 0;
    let mut input = Vec::new();
    for _ in 0..LINES {
        let line = mutated_line(&mut rng, &templates);
        expected += usize::from(!is_blank(&line));
        input.extend(line);
        input.push(b'\n');
    }
    rpc.send_bytes(&input);
    rpc.send(json!({"type": "ping", "id": "last"}));
    let responses = |rpc: &Rpc| rpc.seen.iter().filter(|v| v["type"] == "response").count();
    rpc.until_nth("lines answered", expected + 1, |v| v["type"] == "response");
    assert_eq!(rpc.response("last")["data"]["pong"], true);
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc did not exit cleanly");
    assert_eq!(responses(&rpc), expected + 1, "one response per line");
}
