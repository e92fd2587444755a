//! More hostile extensions: what an extension sends or does that
//! tests/hostile.rs does not cover. Fixtures in
//! fixtures/hostile2/.

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

/// An extension directory whose manifest runs `fixtures/hostile2/<script>`
/// with `args`; `extra` fields are added to the manifest.
fn hostile_ext(t: &TempDir, name: &str, script: &str, args: &[&str], extra: Value) -> PathBuf {
    let dir = t.join(name);
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let exe = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/hostile2")
        .join(script);
    let mut manifest = json!({"name": name, "exec": exe, "args": args});
    if let (Some(m), Some(extra)) = (manifest.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    dir
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
    let reply = reply.recv_timeout(DEADLINE).expect(late);
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
/// the extension is failed and killed (SPEC 3.5 says so before hello).
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
        std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
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
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let script = r#"printf '{"type":"hello","name":"crashy"}\n'; exit 3"#;
    let manifest = json!({"name": "crashy", "exec": "/bin/sh", "args": ["-c", script]});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    let mut rpc = Rpc::start(&t, &[dir]);
    let reason = "crashed 5 times in 3 min (last: exit code 3)";
    let end = std::time::Instant::now() + DEADLINE + std::time::Duration::from_secs(10);
    loop {
        let v = rpc.next_within(end.saturating_duration_since(std::time::Instant::now()));
        let v = v.unwrap_or_else(|| panic!("no give-up within 30 s; seen {:?}", rpc.seen));
        if v["type"] == "extension_failed" && v["error"] == reason {
            break;
        }
    }
    let cpu = cpu_time(rpc.child.id());
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    assert!(
        cpu < std::time::Duration::from_secs(1),
        "zot used {cpu:?} of CPU through 5 crashes and 7.5 s of backoff: it spins while it waits"
    );
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
        let call = zot_host::ToolRequest {
            name: "rotate".into(),
            args: json!({}),
            tool_id: None,
        };
        let outcome = host.call_tool_direct(call).expect("rotate answered");
        let big = format!("big{n}");
        assert_eq!(outcome.content, [json!({"type": "text", "text": big})]);
        let end = std::time::Instant::now() + DEADLINE;
        while !host
            .list()
            .expect("list")
            .tools
            .iter()
            .any(|t| t.name == big)
        {
            assert!(
                std::time::Instant::now() < end,
                "tool {big} never registered after {n} list changes:\n{}",
                log_of(&t, "churn")
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
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
