//! Shared test helpers: temporary directories, extension directories
//! for the configurable fixture `fixtures/testext/ext.py`, a library
//! host, and a driver for the real `zot rpc` binary.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use zot_host::{ExtensionState, Host, HostConfig, ToolOutcome, ToolResult};

/// Generous deadline for anything a loaded 2-core machine must finish.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// `$ZOT_SHUTDOWN_GRACE` (both graces of a stop: `shutdown` to SIGTERM,
/// 2 s, and SIGTERM to SIGKILL, 1 s) for a `zot` whose test ends with an
/// extension that outlasts `shutdown`, where those graces are not what
/// the test is about.
pub const SHORT_STOP: &str = "0.1";

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("zot-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir.canonicalize().expect("canonical temp dir"))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The configurable Python extension.
pub fn fixture() -> PathBuf {
    fixture_path("testext/ext.py")
}

/// A path under the repository (`README.md`, `src/lib.rs`, `.ci/...`).
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A path under the repository's `fixtures/`.
pub fn fixture_path(rel: &str) -> PathBuf {
    repo_path("fixtures").join(rel)
}

/// Writes `manifest` as `dir/extension.json`, creating `dir`; returns `dir`.
pub fn write_manifest(dir: &Path, manifest: &Value) -> PathBuf {
    write_manifest_text(dir, &manifest.to_string())
}

/// Writes `text` (any text: a test may want it broken) as
/// `dir/extension.json`, creating `dir`; returns `dir`.
pub fn write_manifest_text(dir: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create ext dir");
    std::fs::write(dir.join("extension.json"), text).expect("write manifest");
    dir.to_path_buf()
}

/// `manifest` with the fields of `extra` (an object) added, replacing
/// any of the same name.
pub fn with_fields(mut manifest: Value, extra: &Value) -> Value {
    if let (Some(m), Some(extra)) = (manifest.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    manifest
}

/// Writes an extension directory `dir` whose manifest is `name` and
/// whose behaviour is `cfg` (see the fixture's docstring).
pub fn ext_dir(dir: &Path, name: &str, cfg: Value) -> PathBuf {
    configured_ext(dir, name, &fixture(), cfg)
}

/// An extension directory running `exec` with `cfg` (its name filled
/// in) as its one argument.
pub fn configured_ext(dir: &Path, name: &str, exec: &Path, mut cfg: Value) -> PathBuf {
    if cfg.get("name").is_none() {
        cfg["name"] = json!(name);
    }
    let manifest = json!({
        "name": name,
        "version": "1.0.0",
        "exec": exec,
        "args": [cfg.to_string()],
    });
    write_manifest(dir, &manifest)
}

/// Writes extension `name` in `t/name` for `fixtures/supervision/ext.py`
/// configured by `cfg`, plus `manifest` fields; its starts are counted
/// in [`starts_file`] (see [`starts`]).
pub fn supervised_ext(t: &TempDir, name: &str, mut cfg: Value, manifest: Value) -> PathBuf {
    cfg["name"] = json!(name);
    cfg["starts"] = json!(starts_file(t, name));
    let exec = fixture_path("supervision/ext.py");
    let base = json!({"name": name, "exec": exec, "args": [cfg.to_string()]});
    write_manifest(&t.join(name), &with_fields(base, &manifest))
}

/// Where extension `name` of [`supervised_ext`] (or any fixture told
/// so) appends its pid at every start.
pub fn starts_file(t: &TempDir, name: &str) -> PathBuf {
    t.join(&format!("{name}.starts"))
}

/// The pids of every start of `name` so far ([`starts_file`]).
pub fn starts(t: &TempDir, name: &str) -> Vec<u32> {
    std::fs::read_to_string(starts_file(t, name))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A frame registering command `name` with `description`.
pub fn command(name: &str) -> Value {
    json!({"type": "register_command", "name": name, "description": format!("{name} command")})
}

/// A frame registering tool `name` with an object schema.
pub fn tool(name: &str) -> Value {
    json!({"type": "register_tool", "name": name, "description": format!("{name} tool"),
           "schema": {"type": "object", "properties": {}}})
}

/// A frame subscribing to `events` and intercepting `intercept`.
pub fn subscribe(events: &[&str], intercept: &[&str]) -> Value {
    json!({"type": "subscribe", "events": events, "intercept": intercept})
}

/// A host config for a test: its own ZOT_HOME, no discovery, fast
/// shutdown so misbehaving fixtures do not slow the suite.
pub fn config(home: &TempDir, exts: &[PathBuf]) -> HostConfig {
    let mut cfg = HostConfig::new(home.join("home"), home.path().to_path_buf());
    cfg.ext_paths = exts.to_vec();
    cfg.discover = false;
    cfg.provider = "test-provider".into();
    cfg.model = "test-model".into();
    cfg.timeouts.shutdown_grace = Duration::from_millis(500);
    cfg.timeouts.term_grace = Duration::from_millis(500);
    // Startup ends when every extension is settled; a starved machine can
    // outlast the 3 s default before a fixture even runs. Tests about the
    // grace itself set their own.
    cfg.timeouts.startup = DEADLINE;
    // Likewise a Python fixture (started through the pyenv shim, a bash
    // script that forks a dozen times) can take over the 10 s default to
    // say hello at load 10-14; tests about the hello limit set their own.
    cfg.timeouts.hello = Duration::from_secs(60);
    cfg
}

thread_local! {
    /// Whether [`start_host`] runs the loop on a thread of its own:
    /// `ZOT_TEST_HOST=threaded`, or inside [`threaded`].
    static THREADED: std::cell::Cell<bool> =
        std::cell::Cell::new(std::env::var_os("ZOT_TEST_HOST").is_some_and(|v| v == "threaded"));
}

/// Starts a library host: inline (the test's calls run the loop), or
/// threaded (`ZOT_TEST_HOST=threaded cargo test`, or inside [`threaded`]).
pub fn start_host(cfg: HostConfig) -> Host {
    let start = match THREADED.with(|t| t.get()) {
        true => Host::start_threaded,
        false => Host::start,
    };
    start(cfg).expect("start host")
}

/// Runs `test` with an inline host, then with a threaded one.
pub fn both(test: impl Fn()) {
    let was = THREADED.with(|t| t.replace(false));
    test();
    THREADED.with(|t| t.set(true));
    test();
    THREADED.with(|t| t.set(was));
}

/// Starts a host and waits for startup readiness.
pub fn start(cfg: HostConfig) -> Host {
    let host = start_host(cfg);
    host.wait_ready();
    host
}

/// The first host event matching `pred`, skipping others; fails the
/// test at the deadline instead of hanging.
pub fn wait_event(
    host: &Host,
    what: &str,
    pred: impl Fn(&zot_host::HostEvent) -> bool,
) -> zot_host::HostEvent {
    let end = Instant::now() + DEADLINE;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match host.next_event(left) {
            Some(event) if pred(&event) => return event,
            Some(_) => {}
            None => panic!("no {what} event before the deadline"),
        }
    }
}

/// The log of extension `name` under `home`'s ZOT_HOME.
pub fn log_of(home: &TempDir, name: &str) -> String {
    std::fs::read_to_string(home.join("home/logs").join(format!("ext-{name}.log")))
        .unwrap_or_default()
}

/// Polls `cond` until it holds or the deadline passes.
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_for_within(what, DEADLINE, cond);
}

/// Polls `attempt` every 10 ms until it gives `Ok`, returning what it
/// gave; past `limit` panics with the last `Err` (what was seen instead),
/// so a timeout names the state that never came right.
pub fn poll_until<T>(limit: Duration, attempt: impl FnMut() -> Result<T, String>) -> T {
    poll_every(Duration::from_millis(10), limit, attempt)
}

/// [`poll_until`], attempting every `every`: for a test whose attempt
/// also samples a bound that must hold at every look.
pub fn poll_every<T>(
    every: Duration,
    limit: Duration,
    mut attempt: impl FnMut() -> Result<T, String>,
) -> T {
    let end = Instant::now() + limit;
    loop {
        match attempt() {
            Ok(v) => return v,
            Err(seen) => assert!(Instant::now() < end, "timed out after {limit:?}: {seen}"),
        }
        std::thread::sleep(every);
    }
}

/// Waits for `cond` while the host loop runs: an inline host's timers,
/// frames and submitted requests advance only then.
pub fn wait_on(host: &Host, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        host.poll(Duration::from_millis(10));
    }
}

/// The next value from `rx` (a submitted request's reply) while the host
/// loop runs ([`wait_on`]).
pub fn recv_on<T>(host: &Host, what: &str, rx: &crossbeam_channel::Receiver<T>) -> T {
    let mut got = None;
    wait_on(host, what, || {
        got = rx.try_recv().ok();
        got.is_some()
    });
    got.expect("wait_on returns once a value came")
}

/// Sends `sig` to process `pid` with kill(2): whether it was sent (it is
/// not when the process is gone).
pub fn send_signal(pid: u32, sig: libc::c_int) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    // SAFETY: kill(2) takes two integers and touches none of our memory.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Whether process `pid` is gone (or a zombie nobody of ours owns).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Whether no live process is left in process group `pgid`, read from
/// `/proc` (an unreaped zombie would still answer `kill -0`).
pub fn group_gone(pgid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    let pgid = pgid.to_string();
    !dir.flatten().any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid
    })
}

/// Reaps `child` (`what`) with wait4(2), which gives what std's `Child`
/// does not: the resources it and the children it reaped used. Returns
/// its exit code (`None` after a signal) and that usage; kills it and
/// fails the test if it has not exited within `limit`.
pub fn wait_with_usage(child: Child, what: &str, limit: Duration) -> (Option<i32>, libc::rusage) {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
    let end = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 on our own child, which
        // `child` never waits for after this.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if got == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return (code, usage);
        }
        assert_eq!(got, 0, "wait4: {}", std::io::Error::last_os_error());
        if Instant::now() >= end {
            send_signal(child.id(), libc::SIGKILL);
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The CPU time (user + system) in `usage`.
pub fn cpu_time_of(usage: &libc::rusage) -> Duration {
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Reads a pid written by the fixture.
pub fn read_pid(path: &Path) -> u32 {
    wait_for("pid file", || {
        std::fs::read_to_string(path).is_ok_and(|s| !s.is_empty())
    });
    std::fs::read_to_string(path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid")
}

/// Lines of a record file, parsed.
pub fn recorded(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The real `zot` binary.
pub fn zot() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zot"))
}

/// Spawns `cmd` with piped stdin and stdout; a thread turns stdout into
/// lines on the returned channel, so reads can have deadlines.
pub fn spawn_piped(
    cmd: &mut Command,
) -> (
    Child,
    Option<ChildStdin>,
    crossbeam_channel::Receiver<String>,
) {
    spawn_piped_within(cmd, None)
}

/// [`spawn_piped`], with at most `cap` lines read ahead of the test: with
/// a cap, a test that stops taking lines stops reading zot's stdout.
pub fn spawn_piped_within(
    cmd: &mut Command,
    cap: Option<usize>,
) -> (
    Child,
    Option<ChildStdin>,
    crossbeam_channel::Receiver<String>,
) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn zot");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = match cap {
        Some(cap) => crossbeam_channel::bounded(cap),
        None => crossbeam_channel::unbounded(),
    };
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stdin = child.stdin.take();
    (child, stdin, lines)
}

/// `zot rpc` driven over pipes.
pub struct Rpc {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: crossbeam_channel::Receiver<String>,
    pub seen: Vec<Value>,
}

impl Rpc {
    /// Starts `zot rpc --no-ext -e ...` with its own ZOT_HOME.
    pub fn start(home: &TempDir, exts: &[PathBuf]) -> Rpc {
        Rpc::spawn(&mut Rpc::command(home, exts))
    }

    /// The command [`Rpc::start`] runs, for a test to add to.
    pub fn command(home: &TempDir, exts: &[PathBuf]) -> Command {
        let mut cmd = zot();
        cmd.arg("rpc").arg("--no-ext").arg("--cwd").arg(home.path());
        for e in exts {
            cmd.arg("-e").arg(e);
        }
        // Python fixtures start through the pyenv shim (a bash script that
        // forks a dozen times): on a starved machine that outlasts the
        // 10 s default hello limit. Tests about the limit set their own.
        cmd.env("ZOT_HELLO_TIMEOUT", "60");
        cmd.env("ZOT_HOME", home.join("home"));
        cmd
    }

    pub fn spawn(cmd: &mut Command) -> Rpc {
        Rpc::spawn_within(cmd, None)
    }

    /// [`Rpc::spawn`] reading at most `cap` lines ahead of the test, so a
    /// test that stops taking lines is a client that stops reading.
    pub fn spawn_within(cmd: &mut Command, cap: Option<usize>) -> Rpc {
        let (child, stdin, lines) = spawn_piped_within(cmd.stderr(Stdio::piped()), cap);
        Rpc {
            stdin,
            child,
            lines,
            seen: Vec::new(),
        }
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write request");
        stdin.flush().expect("flush");
    }

    pub fn send(&mut self, request: Value) {
        self.send_raw(&request.to_string());
    }

    /// Next stdout line as JSON; every stdout line must be JSON.
    pub fn next(&mut self) -> Option<Value> {
        self.next_within(DEADLINE)
    }

    /// Reads until a line matches `pred`; returns it.
    pub fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return v.clone();
        }
        loop {
            let v = self
                .next()
                .unwrap_or_else(|| panic!("no {what} before the deadline; seen {:?}", self.seen));
            if pred(&v) {
                return v;
            }
        }
    }

    /// Reads until `n` lines matching `pred` were seen in all.
    pub fn until_nth(&mut self, what: &str, n: usize, pred: impl Fn(&Value) -> bool) {
        let count = |seen: &[Value]| seen.iter().filter(|v| pred(v)).count();
        while count(&self.seen) < n {
            if self.next().is_none() {
                panic!(
                    "{what}: saw {} of {n} before the deadline; seen {:?}",
                    count(&self.seen),
                    self.seen
                );
            }
        }
    }

    /// Waits until `n` extensions are ready, however slow their start:
    /// those the `ready` event lists, then those the startup grace left
    /// out, as each announces `registered`.
    pub fn wait_ready(&mut self, n: usize) {
        let ready = self.until("ready event", |v| v["type"] == "ready");
        let listed = ready["extensions"].as_array().map_or(0, Vec::len);
        let what = format!(
            "{n} extensions ready, {listed} listed in the ready event, the rest registered late"
        );
        self.until_nth(&what, n.saturating_sub(listed), |v| {
            v["type"] == "registered"
        });
    }

    /// The response to request `id`.
    pub fn response(&mut self, id: &str) -> Value {
        self.until(&format!("response {id}"), |v| {
            v["type"] == "response" && v["id"] == id
        })
    }

    /// Sends a request with `id` and waits for its response.
    pub fn call(&mut self, id: &str, mut request: Value) -> Value {
        request["id"] = json!(id);
        self.send(request);
        self.response(id)
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `sig` to zot; fails the test if it could not be sent.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.child.id();
        assert!(send_signal(pid, sig), "kill -{sig} {pid} (zot) failed");
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait(&mut self) -> Option<i32> {
        let seen = &mut self.seen;
        wait_exit(&mut self.child, &self.lines, "zot rpc", |line| {
            if let Ok(v) = serde_json::from_str(&line) {
                seen.push(v);
            }
        })
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Rpc {
    /// Next stdout line as JSON, or `None` when none comes within `wait`.
    pub fn next_within(&mut self, wait: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(wait).ok()?;
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
        self.seen.push(v.clone());
        Some(v)
    }
}

/// Sets `key` to `value` in the manifest of the extension in `dir`
/// (e.g. `"restart": "never"` for a test about a plain exit).
pub fn set_manifest_field(dir: &Path, key: &str, value: Value) {
    let path = dir.join("extension.json");
    let text = std::fs::read_to_string(&path).expect("read manifest");
    let mut manifest: Value = serde_json::from_str(&text).expect("manifest JSON");
    manifest[key] = value;
    std::fs::write(&path, manifest.to_string()).expect("write manifest");
}

/// Starts a host and waits until every extension in it is ready, not
/// just until the startup grace ends (a loaded machine can outlast it:
/// Python alone may take seconds to start). Fails naming the extension
/// that is not ready, and why.
pub fn start_ready(cfg: HostConfig) -> Host {
    let host = start(cfg);
    poll_until(DEADLINE, || {
        let list = host.list().expect("list extensions");
        let waiting: Vec<String> = list
            .extensions
            .iter()
            .filter(|e| e.state != ExtensionState::Ready)
            .map(|e| {
                let why = e.state.error().unwrap_or("");
                format!("extension {} not ready ({} {why})", e.name, e.state)
            })
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        let settled = list
            .extensions
            .iter()
            .any(|e| e.state != ExtensionState::Ready && e.state != ExtensionState::Starting);
        assert!(!settled, "{}", waiting.join("; "));
        Err(waiting.join("; "))
    });
    host
}

impl Rpc {
    /// Writes raw bytes to stdin (any bytes: the caller adds newlines).
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write request bytes");
        stdin.flush().expect("flush");
    }
}

/// Writes an extension directory `dir` for the SDK-like fixture
/// `fixtures/sdk-like/ext.py` (handlers on threads after a delay, exit
/// at once on `shutdown`), configured by `cfg` (see its docstring).
pub fn sdk_ext(dir: &Path, name: &str, cfg: Value) -> PathBuf {
    let exec = fixture_path("sdk-like/ext.py");
    configured_ext(dir, name, &exec, cfg)
}

/// Peak resident memory of process `pid` in kB (`VmHWM`), if readable.
pub fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs `zot` (args `args`, ZOT_HOME and --cwd under `home`) with `input`
/// on stdin and returns its stdout lines once it exits, or fails the
/// test at the deadline.
pub fn run_zot(home: &TempDir, args: &[&str], input: &str) -> (Option<i32>, Vec<String>) {
    let mut cmd = zot();
    cmd.args(args)
        .arg("--cwd")
        .arg(home.path())
        .env("ZOT_HOME", home.join("home"))
        .stderr(Stdio::null());
    let (mut child, stdin, lines) = spawn_piped(&mut cmd);
    if let Some(mut stdin) = stdin {
        stdin.write_all(input.as_bytes()).expect("write stdin");
    }
    let end = Instant::now() + DEADLINE;
    let mut out = Vec::new();
    loop {
        match lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(line) => out.push(line),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("zot {args:?} did not finish before the deadline; output so far: {out:?}");
            }
        }
    }
    let status = child.wait().expect("wait zot");
    (status.code(), out)
}

/// Waits until extension `name` of `host` is ready, failing with its
/// state and error once it settles otherwise (or at the deadline): for
/// tests where another extension is meant to fail, so `start_ready`
/// does not fit, but this one must have registered first.
pub fn wait_ext_ready(host: &Host, name: &str) {
    poll_until(DEADLINE, || {
        let list = host.list().expect("list extensions");
        let ext = list
            .extension(name)
            .unwrap_or_else(|| panic!("no extension {name} in the list"));
        if ext.state == ExtensionState::Ready {
            return Ok(());
        }
        let why = ext.state.error().unwrap_or("");
        let seen = format!("extension {name} not ready ({} {why})", ext.state);
        assert!(ext.state == ExtensionState::Starting, "{seen}");
        Err(seen)
    });
}

/// `wait_for` with its own limit, for work whose volume is the point of
/// the test (hundreds of MB through a debug build take far longer than
/// `DEADLINE` on a loaded 2-core machine).
pub fn wait_for_within(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    poll_until(limit, || {
        cond()
            .then_some(())
            .ok_or_else(|| format!("waiting for {what}"))
    });
}

/// `zot ARGS --no-ext -e EXT --cwd T` with ZOT_HOME under `t`, stdin and
/// stdout piped and stderr discarded: a raw child for the tests that
/// decide themselves when (or whether) its stdout is read.
pub fn spawn_raw(t: &TempDir, args: &[&str], ext: &Path) -> Child {
    zot()
        .args(args)
        .args(["--no-ext", "-e"])
        .arg(ext)
        .arg("--cwd")
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn zot {args:?}: {e}"))
}

/// Frames of type `kind` in a record file.
pub fn frames(path: &Path, kind: &str) -> Vec<Value> {
    recorded(path)
        .into_iter()
        .filter(|f| f["type"] == kind)
        .collect()
}

/// `zot` (the interactive session) over pipes.
pub struct Zot {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: crossbeam_channel::Receiver<String>,
    /// Every stdout line read so far.
    pub seen: Vec<String>,
}

impl Zot {
    /// `zot --no-ext --cwd <t> -e ...` plus `extra` arguments, with its
    /// own ZOT_HOME; returns once it says `ready: `.
    pub fn start(t: &TempDir, exts: &[PathBuf], extra: &[&str]) -> Zot {
        let mut cmd = zot();
        cmd.arg("--no-ext").arg("--cwd").arg(t.path());
        for e in exts {
            cmd.arg("-e").arg(e);
        }
        // A loaded machine may take longer than the 3 s startup default.
        cmd.args(extra)
            .env("ZOT_HOME", t.join("home"))
            .env("ZOT_STARTUP_TIMEOUT", "20");
        let (child, stdin, lines) = spawn_piped(cmd.stderr(Stdio::inherit()));
        let mut z = Zot {
            stdin,
            child,
            lines,
            seen: Vec::new(),
        };
        z.expect("ready: ");
        z
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write line");
        stdin.flush().expect("flush");
    }

    /// Reads lines until one contains `needle`; returns the lines read,
    /// the matching one last.
    pub fn read_until(&mut self, needle: &str) -> Vec<String> {
        let end = Instant::now() + DEADLINE;
        let mut got = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                panic!(
                    "no line containing {needle:?} before the deadline; output so far:\n{}",
                    self.seen.join("\n")
                );
            };
            self.seen.push(line.clone());
            got.push(line.clone());
            if line.contains(needle) {
                return got;
            }
        }
    }

    /// Whether a line containing `needle` was seen, or comes next.
    pub fn saw(&mut self, needle: &str) {
        if !self.seen.iter().any(|l| l.contains(needle)) {
            self.expect(needle);
        }
    }

    /// The next line containing `needle`.
    pub fn expect(&mut self, needle: &str) -> String {
        self.read_until(needle).pop().unwrap_or_default()
    }

    /// Sends `line`, then reads until the output of a `/clear` sent
    /// after it: everything `line` printed (the queue runs in order).
    pub fn run(&mut self, line: &str) -> Vec<String> {
        self.send(line);
        self.send("/clear");
        let mut got = self.read_until("notes cleared (");
        got.pop();
        got
    }

    /// Fails if a line containing `text` was read.
    pub fn assert_never_shown(&self, text: &str) {
        assert!(
            !self.seen.iter().any(|l| l.contains(text)),
            "{text:?} was shown:\n{}",
            self.seen.join("\n")
        );
    }

    /// Sends `sig` to zot; fails the test if it could not be sent.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.child.id();
        assert!(send_signal(pid, sig), "kill -{sig} {pid} (zot) failed");
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for exit; returns the exit code and collects what is left.
    pub fn wait(&mut self) -> Option<i32> {
        let seen = &mut self.seen;
        wait_exit(&mut self.child, &self.lines, "zot", |line| seen.push(line))
    }

    /// The pid `/ext` shows for extension `name`.
    pub fn pid_of(&mut self, name: &str) -> u32 {
        self.send("/ext");
        let line = self.expect(&format!("  {name}  "));
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "pid").expect("pid shown");
        words[at + 1].parse().expect("pid number")
    }
}

impl Drop for Zot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What command `name` of `host`, run without arguments, displays.
pub fn display_of(host: &Host, name: &str) -> Option<String> {
    host.command(name, "")
        .unwrap_or_else(|e| panic!("/{name} failed: {e}"))
        .display
}

/// A finished command's stderr, as text.
pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A finished command's stdout, as text.
pub fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails unless the command exited 0, showing its status and output.
pub fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "zot failed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        stdout_of(out),
        stderr_of(out)
    );
}

/// Exit status 1 with a stderr naming every one of `want`.
pub fn assert_fails_naming(out: &std::process::Output, want: &[&str]) {
    let err = stderr_of(out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr: {err}",
        stdout_of(out)
    );
    for w in want {
        assert!(err.contains(w), "stderr should mention {w:?}: {err}");
    }
}

/// Runs `git ARGS` in `dir` with a fixed identity and default branch.
pub fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("this test needs git installed (running git failed: {e})"));
    assert!(status.success(), "git {args:?} failed in {}", dir.display());
}

/// Waits for `child` (`what`) to exit, failing at the deadline; then
/// hands each stdout line left to `line`, up to EOF (the reader thread
/// then ends), however slow that is. Returns the exit code.
fn wait_exit(
    child: &mut Child,
    lines: &crossbeam_channel::Receiver<String>,
    what: &str,
    mut line: impl FnMut(String),
) -> Option<i32> {
    let (status, ended) = exit_within(child, DEADLINE);
    assert!(ended, "{what} did not exit");
    let end = Instant::now() + DEADLINE;
    while let Ok(l) = lines.recv_deadline(end) {
        line(l);
    }
    status.code()
}

/// Waits up to `limit` for `child` to exit, killing it if it has not:
/// its exit status, and whether it ended by itself.
pub fn exit_within(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, bool) {
    let end = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return (status, true);
        }
        if Instant::now() > end {
            let _ = child.kill();
            return (child.wait().expect("wait"), false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A host with `exts` and the test's `tune` of [`config`], once every
/// extension is ready.
pub fn start_with(t: &TempDir, exts: &[PathBuf], tune: impl FnOnce(&mut HostConfig)) -> Host {
    let mut cfg = config(t, exts);
    tune(&mut cfg);
    start_ready(cfg)
}

/// A host with one extension, `a` (under `t`) behaving as `cfg`, once
/// it is ready.
pub fn start_one(t: &TempDir, cfg: Value) -> Host {
    start_ready(config(t, &[ext_dir(&t.join("a"), "a", cfg)]))
}

/// A client fixture (`script`) ended with `status` and printed
/// `ok STEP` for every one of `steps`.
pub fn assert_client_passed(
    script: &str,
    status: std::process::ExitStatus,
    out: &std::process::Output,
    steps: &[&str],
) {
    let (stdout, stderr) = (stdout_of(out), stderr_of(out));
    let output = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(status.success(), "{script} failed ({status}).\n{output}");
    for step in steps {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "{script}: step {step:?} did not pass.\n{output}"
        );
    }
}

/// An extension `held` (in `t`) whose tool `held` answers only once
/// [`release_held`] is called, then at once; returns its directory and
/// the file its pid is written to.
pub fn held_tool(t: &TempDir) -> (PathBuf, PathBuf) {
    let pid_file = t.join("held.pid");
    let cfg = json!({
        "register": [tool("held")],
        "tools": {"held": {"hold": true}},
        "pid_file": pid_file,
    });
    (ext_dir(&t.join("held"), "held", cfg), pid_file)
}

/// Lets the `held` tool of [`held_tool`] answer (SIGUSR1).
pub fn release_held(pid_file: &Path) {
    let pid = read_pid(pid_file);
    assert!(send_signal(pid, libc::SIGUSR1), "kill -USR1 {pid} failed");
}

/// Writes an extension directory `dir` for `fixtures/tools/ext.py`, which
/// speaks upstream's newer tool frames like its Go SDK (docs/PROTOCOL.md#tools),
/// configured by `cfg` (see its docstring).
pub fn tools_ext(dir: &Path, name: &str, cfg: Value) -> PathBuf {
    let exec = fixture_path("tools/ext.py");
    configured_ext(dir, name, &exec, cfg)
}

/// What a test that calls an extension's tool expects: its result.
pub trait ExtResult {
    /// The extension's result; panics on a built-in tool's verdict.
    fn result(self) -> ToolResult;
}

impl ExtResult for ToolOutcome {
    fn result(self) -> ToolResult {
        match self {
            ToolOutcome::Ran(result) => result,
            other => panic!("expected an extension's tool result, got {other:?}"),
        }
    }
}

/// A tool call of `name` with `args`, its `tool_id` `call-1`.
pub fn call(name: &str, args: Value) -> zot_host::ToolRequest {
    zot_host::ToolRequest::new(name, args).with_id("call-1")
}

/// A `tool_call` interception of `bash` with `args`.
pub fn tool_call_intercept(args: Value) -> zot_host::InterceptRequest {
    zot_host::InterceptRequest {
        event: zot_host::InterceptEvent::ToolCall,
        payload: zot_host::EventPayload {
            tool_id: Some("x".into()),
            tool_name: Some("bash".into()),
            tool_args: Some(args),
            ..Default::default()
        },
    }
}

/// The frames fixture, `fixtures/frames/ext.py`.
pub fn frames_fixture() -> PathBuf {
    fixture_path("frames/ext.py")
}

/// An extension directory `t/name` running the frames fixture with `cfg`.
pub fn frames_ext(t: &TempDir, name: &str, cfg: Value) -> PathBuf {
    configured_ext(&t.join(name), name, &frames_fixture(), cfg)
}

/// The `event` frames recorded in `record`.
pub fn events_in(record: &Path) -> Vec<Value> {
    frames(record, "event")
}

/// An event payload made of `fields`.
pub fn payload(fields: Value) -> zot_host::EventPayload {
    serde_json::from_value(fields).expect("payload")
}

/// The official MCP SDKs' directory, installed by `.ci/mcp-deps` on
/// first use (or `$ZOT_MCP_DEPS`, which the script prints at once).
pub fn mcp_deps() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let script = repo_path(".ci/mcp-deps");
        let out = Command::new(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "MCP test dependencies are missing and {} could not install them \
             (needs python3 with venv, node and npm, and network access; or set \
             ZOT_MCP_DEPS to a directory it filled): {}",
            script.display(),
            stderr_of(&out)
        );
        let stdout = stdout_of(&out);
        let dir = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        assert!(
            dir.is_dir(),
            "{} printed {stdout:?}, not a directory",
            script.display()
        );
        dir
    })
}

/// Writes an MCP server manifest into `dir`.
pub fn mcp_manifest(dir: &Path, name: &str, exec: &Path, args: &[&str], extra: Value) -> PathBuf {
    let manifest = json!({"name": name, "protocol": "mcp", "exec": exec, "args": args});
    write_manifest(dir, &with_fields(manifest, &extra))
}

/// An extension directory `dir` for `@modelcontextprotocol/server-everything`
/// (from [`mcp_deps`]), its names prefixed `ev_`.
pub fn everything_server(dir: &Path) -> PathBuf {
    let entry = mcp_deps()
        .join("node-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "server-everything missing at {}",
        entry.display()
    );
    let node = which("node");
    mcp_manifest(
        dir,
        "everything",
        &node,
        &[entry.to_str().expect("utf-8 path"), "stdio"],
        json!({"prefix": "ev_"}),
    )
}

/// Where `program` is in `$PATH`.
pub fn which(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is not in $PATH (the MCP tests need it)"))
}

/// A whole MCP client script, on a busy machine, with interpreter start-up.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(240);

/// Runs the MCP client script `script` with `cmd` (its interpreter, with
/// any extra environment) against `zot mcp` started with `args` (in
/// `$ZOT_MCP_ARGS`, ZOT_HOME under `t`), until it exits or
/// [`CLIENT_DEADLINE`] passes (then it is killed).
pub fn run_client_script(
    mut cmd: Command,
    script: &Path,
    args: &Value,
    t: &TempDir,
) -> (std::process::ExitStatus, std::process::Output) {
    let mut child = cmd
        .arg(script)
        .env("ZOT_BIN", env!("CARGO_BIN_EXE_zot"))
        .env("ZOT_MCP_ARGS", args.to_string())
        .env("MCP_DEPS", mcp_deps())
        .env("ZOT_HOME", t.join("home"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let (status, _) = exit_within(&mut child, CLIENT_DEADLINE);
    (status, child.wait_with_output().expect("client output"))
}

impl Rpc {
    /// `zot mcp` with `exts` (startup waits for them, however busy the
    /// machine), initialized in the 2025-11-25 era.
    pub fn mcp(t: &TempDir, exts: &[PathBuf]) -> Rpc {
        let mut mcp = Rpc::spawn(&mut Rpc::mcp_command(t, exts, 120));
        mcp.mcp_initialize("2025-11-25");
        mcp
    }

    /// `zot mcp --no-ext --startup-timeout SECS --cwd T -e EXT...` with
    /// ZOT_HOME under `t` and a generous hello limit, for a test to add to.
    pub fn mcp_command(t: &TempDir, exts: &[PathBuf], startup_secs: u32) -> Command {
        let mut cmd = zot();
        cmd.args(["mcp", "--no-ext", "--startup-timeout"])
            .arg(startup_secs.to_string())
            .arg("--cwd")
            .arg(t.path());
        for e in exts {
            cmd.arg("-e").arg(e);
        }
        // Python fixtures start through the pyenv shim, which can outlast
        // the 10 s default hello limit on a starved machine.
        cmd.env("ZOT_HOME", t.join("home"))
            .env("ZOT_HELLO_TIMEOUT", "60");
        cmd
    }

    /// The JSON-RPC response to `id` (not a request or notification
    /// carrying the same id). On failure it says how many lines came,
    /// not what they were (floods).
    pub fn mcp_response(&mut self, id: &Value) -> Value {
        let is_it = |v: &Value| v.get("id") == Some(id) && v.get("method").is_none();
        if let Some(v) = self.seen.iter().find(|v| is_it(v)) {
            return v.clone();
        }
        loop {
            let Some(v) = self.next() else {
                panic!(
                    "no response to {id} before the deadline ({} lines read)",
                    self.seen.len()
                );
            };
            if is_it(&v) {
                return v;
            }
        }
    }

    /// The MCP handshake as the official clients do it: `initialize`
    /// (id 0, protocol `version`) answered with that version, then
    /// `notifications/initialized`. Returns the initialize result.
    pub fn mcp_initialize(&mut self, version: &str) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}));
        let r = self.mcp_response(&json!(0));
        assert_eq!(r["result"]["protocolVersion"], version, "{r}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }
}

/// Data limit (`ulimit -d`: writable memory, not reserved address space,
/// which glibc's per-thread arenas use a lot of) for a `zot` that might
/// read `/dev/zero` to the end: the test then fails at once instead of
/// eating the machine.
pub const MEMORY_LIMIT_KB: u32 = 1 << 20;

/// Startup grace for every `zot` started here: a loaded machine may
/// take longer than the 3 s default to start Python extensions.
pub const STARTUP: &str = "20";

/// `$ZOT_HOME` and a project directory, for tests of `zot` with the
/// files a user (or an attacker) puts in them.
pub struct Project {
    pub tmp: TempDir,
}

impl Project {
    pub fn new(tag: &str) -> Project {
        let tmp = TempDir::new(tag);
        std::fs::create_dir_all(tmp.join("proj/.zot/extensions")).expect("project dir");
        std::fs::create_dir_all(tmp.join("home/extensions")).expect("global dir");
        Project { tmp }
    }

    pub fn home(&self) -> PathBuf {
        self.tmp.join("home")
    }

    pub fn proj(&self) -> PathBuf {
        self.tmp.join("proj")
    }

    pub fn project_ext(&self, name: &str) -> PathBuf {
        self.proj().join(".zot/extensions").join(name)
    }

    pub fn global_ext(&self, name: &str) -> PathBuf {
        self.home().join("extensions").join(name)
    }

    /// `zot <args>` in the project directory, under a memory limit,
    /// killed (and the test failed) at the deadline.
    pub fn zot(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -d {MEMORY_LIMIT_KB} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_zot"))
            .args(args)
            .current_dir(self.proj())
            .env("ZOT_HOME", self.home())
            .env("ZOT_STARTUP_TIMEOUT", STARTUP)
            .env_remove("NO_COLOR");
        run_bounded(&mut cmd, &args.join(" "))
    }

    /// Entries of `$ZOT_HOME/extensions`, sorted, hidden ones included.
    pub fn installed(&self) -> Vec<String> {
        installed(&self.home())
    }

    /// `zot ext list --json`, as a map from directory name to status.
    pub fn statuses(&self) -> Vec<(String, String)> {
        statuses_by(&self.zot(&["ext", "list", "--json"]), dir_name)
    }
}

/// The rows of `zot ext list --json` output as (`key` of the row, status).
pub fn statuses_by(
    out: &std::process::Output,
    key: impl Fn(&Value) -> String,
) -> Vec<(String, String)> {
    list_rows(out)
        .iter()
        .map(|r| (key(r), r["status"].as_str().expect("status").into()))
        .collect()
}

/// Entries of `home/extensions` (a `$ZOT_HOME`), sorted, hidden ones
/// included; none when the directory does not exist.
pub fn installed(home: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.join("extensions"))
        .map(|rd| {
            rd.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The rows of a successful `zot ext list --json`.
pub fn list_rows(out: &std::process::Output) -> Vec<Value> {
    assert_ok(out);
    match serde_json::from_slice(&out.stdout) {
        Ok(Value::Array(rows)) => rows,
        other => panic!("list --json is not a JSON array ({other:?}): {out:?}"),
    }
}

/// The directory name of a `zot ext list --json` row.
pub fn dir_name(row: &Value) -> String {
    let dir = Path::new(row["dir"].as_str().expect("dir"));
    let name = dir.file_name().expect("dir name").to_string_lossy();
    name.into_owned()
}

/// A command's stdout lines, each of which must be JSON.
pub fn json_lines(out: &std::process::Output) -> Vec<Value> {
    stdout_of(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Appends `text` to the file at `path`.
pub fn append(path: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open to append");
    file.write_all(text.as_bytes()).expect("append");
}

/// A committed git repository at `dir` holding what `fill` wrote; its
/// file:// URL.
pub fn git_repo(dir: &Path, fill: impl FnOnce(&Path)) -> String {
    std::fs::create_dir_all(dir).expect("repository dir");
    fill(dir);
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "init"]);
    format!("file://{}", dir.display())
}

/// Runs `cmd` with stdin closed; kills it and fails the test if it is
/// not done by the deadline (a hang is the bug some tests look for).
pub fn run_bounded(cmd: &mut Command, what: &str) -> std::process::Output {
    run_fed(cmd, None, DEADLINE, what)
}

/// Runs `cmd` with `input` on stdin, then EOF (`None`: stdin closed);
/// kills it and fails the test if it is not done within `limit`.
pub fn run_fed(
    cmd: &mut Command,
    input: Option<&str>,
    limit: Duration,
    what: &str,
) -> std::process::Output {
    let stdin = match input {
        Some(_) => Stdio::piped(),
        None => Stdio::null(),
    };
    let mut child = cmd
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zot");
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input.as_bytes()).expect("write stdin");
    }
    let pid = child.id();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for zot"),
        Err(_) => {
            send_signal(pid, libc::SIGKILL);
            panic!("`zot {what}` did not finish within {limit:?} (hung?)");
        }
    }
}

pub fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A manifest of `name` that runs the test fixture, as bytes.
pub fn manifest_text(name: &str) -> String {
    let dir = TempDir::new("manifest-text");
    ext_dir(dir.path(), name, json!({}));
    std::fs::read_to_string(dir.join("extension.json")).expect("manifest")
}

/// The status of directory `dir` in [`Project::statuses`].
pub fn status_of<'a>(statuses: &'a [(String, String)], dir: &str) -> &'a str {
    statuses
        .iter()
        .find(|(d, _)| d == dir)
        .map(|(_, s)| s.as_str())
        .unwrap_or_else(|| panic!("{dir} missing from zot ext list: {statuses:?}"))
}
