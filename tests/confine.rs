//! Confinement with Landlock, on this machine's kernel: real
//! extension processes (fixtures/confine/probe.py) try to write, read,
//! connect and signal, through `zot rpc`, the session, `zot mcp`,
//! `zot ext check` and the library.

#![cfg(feature = "confine")]
// Some tests need the `mcp` or `author` feature; their helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn probe_script() -> PathBuf {
    fixture_path("confine/probe.py")
}

/// A test's world: a temporary HOME, ZOT_HOME and project, never the real ones.
struct World {
    t: TempDir,
}

impl World {
    fn new(tag: &str) -> World {
        let t = TempDir::new(tag);
        for dir in ["user-home", "project", "home"] {
            std::fs::create_dir_all(t.join(dir)).expect("create dir");
        }
        World { t }
    }

    fn home(&self) -> PathBuf {
        self.t.join("user-home")
    }

    fn project(&self) -> PathBuf {
        self.t.join("project")
    }

    /// The probe as extension `name` in its own directory (its script
    /// copied there, so `"read": ["$EXT"]` covers it), run by `python3`
    /// from the PATH, with `permissions` when given.
    fn probe(&self, name: &str, permissions: Option<Value>) -> PathBuf {
        let dir = self.t.join(name);
        std::fs::create_dir_all(&dir).expect("create ext dir");
        std::fs::copy(probe_script(), dir.join("probe.py")).expect("copy probe");
        let mut manifest = json!({"name": name, "exec": "python3", "args": ["./probe.py"]});
        if let Some(p) = permissions {
            manifest["permissions"] = p;
        }
        write_manifest(&dir, &manifest);
        dir
    }

    /// `zot rpc --no-ext -e EXT... [extra]` in the project, with the
    /// temporary HOME and ZOT_HOME and `env` set.
    fn rpc(&self, exts: &[&Path], extra: &[&str], env: &[(&str, &str)]) -> Rpc {
        let mut cmd = zot();
        cmd.args(["rpc", "--no-ext", "--hello-timeout", "60", "--cwd"])
            .arg(self.project())
            .args(extra);
        for e in exts {
            cmd.arg("-e").arg(e);
        }
        self.env(&mut cmd, env);
        Rpc::spawn(&mut cmd)
    }

    fn env(&self, cmd: &mut Command, env: &[(&str, &str)]) {
        cmd.env("HOME", self.home())
            .env("ZOT_HOME", self.t.join("home"))
            .env_remove("ZOT_CONFINE")
            .env_remove("ZOT_LANDLOCK_ABI_OVERRIDE")
            .envs(env.iter().copied());
    }
}

/// Calls the probe tool with `args` and returns its answer text.
fn probe(rpc: &mut Rpc, id: &str, args: Value) -> String {
    let r = rpc.call(
        id,
        json!({"type": "tool_call", "name": "probe", "args": args}),
    );
    r["data"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer from the probe: {r}"))
        .to_string()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn assert_denied(answer: &str, what: &str) {
    assert!(
        answer.starts_with("denied EACCES") || answer.starts_with("denied EPERM"),
        "{what} should be denied with a permission error, got {answer:?}"
    );
}

fn assert_ok(answer: &str, what: &str) {
    assert!(
        answer.starts_with("ok"),
        "{what} should work, got {answer:?}"
    );
}

/// The one extension of a `list` response, once it has settled.
fn settled(rpc: &mut Rpc, name: &str) -> Value {
    // Ids unique in the test: a response seen before is never taken again.
    static LISTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut last = Value::Null;
    wait_for(&format!("{name} to settle"), || {
        let n = LISTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        last = rpc.call(&format!("list-{n}"), json!({"type": "list"}))["data"].clone();
        let state = last["extensions"][0]["state"].clone();
        state != "starting"
    });
    assert_eq!(last["extensions"][0]["name"], name, "{last}");
    last["extensions"][0].clone()
}

#[test]
fn confined_writes_its_data_dir_and_tmpdir_never_its_own_directory() {
    let w = World::new("confine-write");
    let ext = w.probe("probe", None);
    let manifest = std::fs::read(ext.join("extension.json")).expect("read manifest");
    let mut rpc = w.rpc(&[&ext], &["--confine"], &[]);
    assert_eq!(settled(&mut rpc, "probe")["state"], "ready");

    let rc = w.home().join(".bashrc");
    let answer = probe(&mut rpc, "1", json!({"op": "write", "path": path_str(&rc)}));
    assert_denied(&answer, "writing into $HOME");
    assert!(!rc.exists(), "{} was created", rc.display());
    let in_project = w.project().join("notes.txt");
    let answer = probe(
        &mut rpc,
        "2",
        json!({"op": "write", "path": path_str(&in_project)}),
    );
    assert_denied(&answer, "writing into the project");

    // $EXT is read only: no new file, and above all not its manifest.
    let own = ext.join("state.txt");
    let answer = probe(
        &mut rpc,
        "3",
        json!({"op": "write", "path": path_str(&own)}),
    );
    assert_denied(&answer, "writing into $EXT");
    assert!(!own.exists());
    let widened = json!({"name": "probe", "exec": "python3", "args": ["./probe.py"],
        "permissions": {"write": ["/"], "network": true}});
    let answer = probe(
        &mut rpc,
        "4",
        json!({"op": "write", "path": path_str(&ext.join("extension.json")),
               "text": widened.to_string()}),
    );
    assert_denied(&answer, "rewriting its own manifest");
    let now = std::fs::read(ext.join("extension.json")).expect("read manifest");
    assert_eq!(now, manifest, "the manifest changed");

    // Its data directory (hello_ack.data_dir) is outside $EXT and its own.
    let data = probe(&mut rpc, "5", json!({"op": "data_dir"}));
    let data = PathBuf::from(data.strip_prefix("ok ").expect("a data_dir"));
    assert!(
        data.starts_with(w.t.join("home/data")) && !data.starts_with(&ext),
        "data_dir {} should be under $ZOT_HOME/data",
        data.display()
    );
    let kept = data.join("state.txt");
    let answer = probe(
        &mut rpc,
        "6",
        json!({"op": "write", "path": path_str(&kept)}),
    );
    assert_ok(&answer, "writing into its data directory");

    let answer = probe(&mut rpc, "7", json!({"op": "tmp"}));
    assert_ok(&answer, "writing into its TMPDIR");
    let scratch = PathBuf::from(answer.trim_start_matches("ok "));
    assert!(scratch.is_file(), "{answer}");
    let tmpdir = scratch.parent().expect("tmpdir").to_path_buf();
    assert!(
        tmpdir.starts_with(std::env::temp_dir()) && tmpdir != std::env::temp_dir(),
        "TMPDIR should be a private directory under the temporary directory: {answer}"
    );
    // Reading everything, it still opens none of the host's pipes.
    let host = rpc.child.id();
    assert_grabs_nothing(&mut rpc, host);
    let log = log_of(&w.t, "probe");
    assert!(
        log.contains(&format!(
            "confined: write its data directory ({}), its TMPDIR",
            data.display()
        )),
        "{log}"
    );

    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    assert!(
        !tmpdir.exists(),
        "the private TMPDIR {} outlived the extension",
        tmpdir.display()
    );
    assert!(kept.is_file(), "its data directory is kept");
}

#[test]
fn tcp_is_denied_unless_the_manifest_allows_network() {
    let w = World::new("confine-tcp");
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("port").port();
    let closed = w.probe("closed", None);
    let open = w.probe("open", Some(json!({"network": true})));
    // The library surface: HostConfig::confine.
    for (ext, allowed) in [(closed, false), (open, true)] {
        let mut cfg = config(&w.t, &[ext]);
        cfg.confine = true;
        let host = start_ready(cfg);
        let call = zot_host::ToolRequest::new("probe", json!({"op": "connect", "port": port}));
        let out = host.call_tool(call).expect("probe answers").result();
        let answer = out.content[0].text().unwrap_or_default();
        match allowed {
            true => assert_ok(answer, "TCP with \"network\": true"),
            false => assert_denied(answer, "TCP without \"network\": true"),
        }
        host.shutdown();
    }
}

#[test]
fn a_read_list_hides_home_and_the_extension_still_starts() {
    let w = World::new("confine-read");
    let secret = w.home().join("secret.txt");
    std::fs::write(&secret, "hunter2\n").expect("write secret");
    let ext = w.probe("reader", Some(json!({"read": ["$EXT"]})));
    std::fs::write(ext.join("own.txt"), "mine\n").expect("write own");
    // ZOT_CONFINE=1 instead of the flag.
    let mut rpc = w.rpc(&[&ext], &[], &[("ZOT_CONFINE", "1")]);
    let state = settled(&mut rpc, "reader");
    assert_eq!(
        state["state"], "ready",
        "python3 from the PATH must start: {state}"
    );
    let answer = probe(
        &mut rpc,
        "1",
        json!({"op": "read", "path": path_str(&secret)}),
    );
    assert_denied(&answer, "reading a file in $HOME");
    let own = ext.join("own.txt");
    let answer = probe(&mut rpc, "2", json!({"op": "read", "path": path_str(&own)}));
    assert_eq!(answer, "ok read mine");
    let answer = probe(&mut rpc, "3", json!({"op": "read", "path": "/etc/passwd"}));
    assert_ok(&answer, "reading a system directory");
}

#[test]
fn a_declared_write_path_is_writable() {
    let w = World::new("confine-cwd");
    let ext = w.probe("writer", Some(json!({"write": ["$CWD"]})));
    let mut rpc = w.rpc(&[&ext], &["--confine"], &[]);
    let target = w.project().join("out.txt");
    let answer = probe(
        &mut rpc,
        "1",
        json!({"op": "write", "path": path_str(&target)}),
    );
    assert_ok(
        &answer,
        "writing into the project with \"write\": [\"$CWD\"]",
    );
    assert!(target.is_file());
    let answer = probe(
        &mut rpc,
        "2",
        json!({"op": "write", "path": path_str(&w.home().join("x"))}),
    );
    assert_denied(&answer, "writing into $HOME");
}

#[test]
fn signals_and_abstract_sockets_outside_its_domain_are_denied() {
    use std::os::linux::net::SocketAddrExt;
    let w = World::new("confine-signal");
    let ext = w.probe("signaller", None);
    let me = std::process::id();
    let name = format!("zot-confine-test-{me}");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).expect("name");
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).expect("listen");
    for (flag, allowed) in [(None, true), (Some("--confine"), false)] {
        let mut rpc = w.rpc(&[&ext], flag.as_slice(), &[]);
        let signal = probe(&mut rpc, "1", json!({"op": "signal", "pid": me}));
        let socket = probe(&mut rpc, "2", json!({"op": "abstract", "name": name}));
        match allowed {
            true => {
                assert_ok(&signal, "signalling the test unconfined");
                assert_ok(&socket, "an abstract socket unconfined");
            }
            false => {
                assert_denied(&signal, "signalling a process outside its domain");
                assert_denied(&socket, "an abstract socket opened outside its domain");
            }
        }
    }
}

#[test]
fn unconfined_runs_as_before() {
    let w = World::new("confine-off");
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("port").port();
    let ext = w.probe("free", Some(json!({"read": ["$EXT"]})));
    let mut rpc = w.rpc(&[&ext], &[], &[]);
    let rc = w.home().join(".bashrc");
    let answer = probe(&mut rpc, "1", json!({"op": "write", "path": path_str(&rc)}));
    assert_ok(&answer, "writing into $HOME unconfined");
    let answer = probe(&mut rpc, "2", json!({"op": "read", "path": path_str(&rc)}));
    assert_ok(
        &answer,
        "reading $HOME unconfined (permissions apply only confined)",
    );
    let answer = probe(&mut rpc, "3", json!({"op": "connect", "port": port}));
    assert_ok(&answer, "TCP unconfined");
    let answer = probe(&mut rpc, "4", json!({"op": "tmp"}));
    assert_ok(&answer, "writing a temporary file unconfined");
    // What the confined tests check it cannot: unconfined it opens the
    // host's pipes through /proc.
    let host = rpc.child.id();
    let grabbed = probe(&mut rpc, "5", json!({"op": "grab", "pid": host}));
    assert!(!grabbed.starts_with("ok opened 0 "), "{grabbed}");
    let _ = std::fs::remove_file(answer.trim_start_matches("ok "));
    assert!(
        !answer.contains("zot-free-"),
        "an unconfined extension gets no private TMPDIR: {answer}"
    );
}

#[test]
fn a_kernel_without_the_needed_abi_refuses_to_start() {
    let w = World::new("confine-old");
    let closed = w.probe("closed", None);
    let open = w.probe("open", Some(json!({"network": true})));
    let cases = [
        (
            &closed,
            "3",
            "needs Landlock ABI 4, this kernel has Landlock ABI 3",
        ),
        (&open, "3", ""),
        (
            &open,
            "2",
            "needs Landlock ABI 3, this kernel has Landlock ABI 2",
        ),
        (
            &closed,
            "0",
            "needs Landlock ABI 4, this kernel has no Landlock (ABI 0)",
        ),
    ];
    for (ext, abi, refusal) in cases {
        let env = [("ZOT_LANDLOCK_ABI_OVERRIDE", abi)];
        let mut rpc = w.rpc(&[ext], &["--confine"], &env);
        let name = ext.file_name().and_then(|n| n.to_str()).expect("name");
        let state = settled(&mut rpc, name);
        if refusal.is_empty() {
            assert_eq!(state["state"], "ready", "ABI {abi}: {state}");
            continue;
        }
        assert_eq!(state["state"], "failed", "ABI {abi}: {state}");
        let error = state["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(refusal),
            "ABI {abi}: {error:?} should say {refusal:?}"
        );
        assert_eq!(state.get("pid"), None, "it must not run: {state}");
    }
}

#[cfg(feature = "author")]
#[test]
fn bad_permissions_make_the_manifest_invalid() {
    let w = World::new("confine-bad");
    let cases = [
        (
            json!({"write": ["data"]}),
            "field `permissions.write[0]` \"data\" is relative",
        ),
        (
            json!({"read": ["$EXT", "$PROJECT/src"]}),
            "field `permissions.read[1]` \"$PROJECT/src\" uses an unknown variable",
        ),
        (
            json!({"network": "yes"}),
            "field `permissions.network` must be true or false",
        ),
    ];
    for (i, (permissions, want)) in cases.into_iter().enumerate() {
        let ext = w.probe(&format!("bad{i}"), Some(permissions));
        let out = zot()
            .args(["ext", "check", "--json"])
            .arg(&ext)
            .env("HOME", w.home())
            .env("ZOT_HOME", w.t.join("home"))
            .output()
            .expect("run zot ext check");
        assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
        assert!(
            stdout_of(&out).contains(&want.replace('"', "\\\"")),
            "{}",
            stdout_of(&out)
        );
        // The host reports it and does not start it, confined or not.
        let mut rpc = w.rpc(&[&ext], &["--confine"], &[]);
        let state = settled(&mut rpc, &format!("bad{i}"));
        let error = state["error"].as_str().unwrap_or_default();
        assert!(error.contains(want), "{error:?} should say {want:?}");
    }
}

/// The interactive session and `zot mcp` confine too.
#[cfg(feature = "mcp")]
#[test]
fn the_session_and_zot_mcp_confine() {
    let w = World::new("confine-surfaces");
    let ext = w.probe("probe", None);
    let rc = w.home().join(".profile");
    let call = format!(r#"/call probe {{"op":"write","path":"{}"}}"#, path_str(&rc));
    let (code, lines) = run_session(&w, &ext, &call);
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("denied EACCES")),
        "the session's extension wrote into $HOME: {lines:?}"
    );

    let mut cmd = zot();
    cmd.args([
        "mcp",
        "--no-ext",
        "--confine",
        "--hello-timeout",
        "60",
        "-e",
    ])
    .arg(&ext)
    .arg("--cwd")
    .arg(w.project());
    w.env(&mut cmd, &[("ZOT_STARTUP_TIMEOUT", "60")]);
    let mut mcp = Rpc::spawn(&mut cmd);
    mcp.mcp_initialize("2025-06-18");
    mcp.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "probe", "arguments": {"op": "write", "path": path_str(&rc)}}}),
    );
    let answer = mcp.mcp_response(&json!(2));
    mcp.close_stdin();
    let _ = mcp.wait();
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_denied(text, "writing into $HOME through zot mcp");
    assert!(!rc.exists());
}

fn run_session(w: &World, ext: &Path, input: &str) -> (Option<i32>, Vec<String>) {
    let mut cmd = zot();
    cmd.args(["--no-ext", "--confine", "-e"])
        .arg(ext)
        .arg("--cwd")
        .arg(w.project())
        .stderr(Stdio::null());
    w.env(
        &mut cmd,
        &[("ZOT_STARTUP_TIMEOUT", "60"), ("ZOT_HELLO_TIMEOUT", "60")],
    );
    let out = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            let mut stdin = child.stdin.take().expect("stdin");
            writeln!(stdin, "{input}")?;
            drop(stdin);
            child.wait_with_output()
        })
        .expect("run the session");
    let lines = stdout_of(&out).lines().map(str::to_string).collect();
    (out.status.code(), lines)
}

#[cfg(feature = "mcp")]
#[cfg(feature = "author")]
#[test]
fn a_hosted_mcp_server_works_confined() {
    let w = World::new("confine-mcp");
    let dir = everything_server(&w.t.join("everything"));
    let mut rpc = w.rpc(&[&dir], &["--confine"], &[("ZOT_STARTUP_TIMEOUT", "60")]);
    let state = settled(&mut rpc, "everything");
    assert_eq!(state["state"], "ready", "{state}");
    let r = rpc.call(
        "1",
        json!({"type": "tool_call", "name": "ev_echo", "args": {"message": "boxed"}}),
    );
    assert_eq!(r["data"]["content"][0]["text"], "Echo: boxed", "{r}");
    let log = log_of(&w.t, "everything");
    assert!(log.contains("confined: "), "{log}");
    // A graceful stop removes its private TMPDIR (a killed host cannot).
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    let left = std::fs::read_dir(std::env::temp_dir())
        .expect("read the temporary directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("zot-everything-{}-", rpc.child.id())))
        .collect::<Vec<_>>();
    assert!(left.is_empty(), "its TMPDIR outlived it: {left:?}");
}

/// `zot ext check` with the temporary HOME, in the project; its JSON report.
fn check_json(w: &World, ext: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value) {
    let mut cmd = zot();
    cmd.args(["ext", "check", "--json", "--cwd"])
        .arg(w.project())
        .arg(ext)
        .args(args);
    w.env(&mut cmd, env);
    let out = cmd.output().expect("run zot ext check");
    let report = serde_json::from_str(&stdout_of(&out))
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {}", stdout_of(&out)));
    (out.status.code(), report)
}

/// (status, message) of each finding of `rule`.
fn findings(report: &Value, rule: &str) -> Vec<(String, String)> {
    let checks = report["checks"].as_array().cloned().unwrap_or_default();
    checks
        .iter()
        .filter(|c| c["rule"] == rule)
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("status"), text("message"))
        })
        .collect()
}

#[cfg(feature = "author")]
#[test]
fn ext_check_reports_permissions_and_denials_when_confined() {
    let w = World::new("confine-check");
    let ext = w.probe("probe", Some(json!({"write": ["$CWD"]})));
    let rc = w.home().join(".bashrc");
    let call = json!({"op": "write", "path": path_str(&rc)}).to_string();
    let args = ["--confine", "--call", "probe", &call];

    let (code, report) = check_json(&w, &ext, &args, &[]);
    assert_eq!(code, Some(0), "a denial is a warning: {report:#}");
    let declared = findings(&report, "permissions");
    assert!(
        declared
            .iter()
            .any(|(s, m)| s == "pass" && m.contains("write its data directory, its TMPDIR, $CWD")),
        "{declared:?}"
    );
    let confine = findings(&report, "confine");
    assert!(
        confine
            .iter()
            .any(|(s, m)| s == "pass" && m.starts_with("runs confined")),
        "{confine:?}"
    );
    assert!(
        confine
            .iter()
            .any(|(s, m)| s == "warn" && m.contains("1 denied operation") && m.contains(".bashrc")),
        "the denial in its stderr should be reported: {confine:?}"
    );
    assert!(!rc.exists());
    let (code, _) = check_json(&w, &ext, &[&args[..], &["--strict"]].concat(), &[]);
    assert_eq!(code, Some(1), "--strict fails on the denial");

    // Unconfined, the same call writes and nothing is said about denials.
    let (code, report) = check_json(&w, &ext, &args[1..], &[]);
    assert_eq!(code, Some(0), "{report:#}");
    assert!(rc.exists(), "unconfined the write happens");
    assert!(findings(&report, "confine").is_empty(), "{report:#}");

    // A kernel too old: refused, and not run unconfined instead.
    let old = [("ZOT_LANDLOCK_ABI_OVERRIDE", "3")];
    let (code, report) = check_json(&w, &ext, &["--confine"], &old);
    assert_eq!(code, Some(1));
    let confine = findings(&report, "confine");
    assert!(
        confine
            .iter()
            .any(|(s, m)| s == "fail" && m.contains("needs Landlock ABI 4")),
        "{confine:?}"
    );
    assert!(findings(&report, "hello").is_empty(), "it ran: {report:#}");
}

#[cfg(feature = "author")]
#[test]
fn doctor_shows_why_an_extension_cannot_be_confined() {
    let w = World::new("confine-doctor");
    let ext = w.probe("probe", None);
    let mut cmd = zot();
    cmd.args(["ext", "doctor", "--json", "--no-ext", "--confine", "--cwd"])
        .arg(w.project())
        .arg("-e")
        .arg(&ext);
    w.env(&mut cmd, &[("ZOT_LANDLOCK_ABI_OVERRIDE", "3")]);
    let out = cmd.output().expect("run zot ext doctor");
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    let report: Value = serde_json::from_str(&stdout_of(&out)).expect("JSON report");
    let probe = &report["extensions"][0];
    assert_eq!(probe["status"], "failed", "{report:#}");
    let error = probe["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("needs Landlock ABI 4, this kernel has Landlock ABI 3"),
        "{report:#}"
    );
}

#[test]
fn trust_shows_the_declared_permissions() {
    let w = World::new("confine-trust");
    let project_exts = w.project().join(".zot/extensions");
    std::fs::create_dir_all(&project_exts).expect("create .zot/extensions");
    let declared = w.probe(
        "declared",
        Some(json!({"write": ["$CWD/out"], "network": true})),
    );
    let silent = w.probe("silent", None);
    for dir in [&declared, &silent] {
        let to = project_exts.join(dir.file_name().expect("name"));
        std::fs::rename(dir, to).expect("move into the project");
    }
    let mut cmd = zot();
    cmd.args(["ext", "trust", "--yes", "--cwd"])
        .arg(w.project());
    w.env(&mut cmd, &[]);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .expect("run zot ext trust");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let shown = format!("{}{}", stdout_of(&out), stderr_of(&out));
    for want in [
        "permissions: write its data directory, its TMPDIR, $CWD/out; read everything; use TCP",
        "permissions: none declared (write its data directory, its TMPDIR; read everything; use no TCP when confined)",
    ] {
        assert!(shown.contains(want), "zot ext trust should show {want:?}:\n{shown}");
    }
}

/// The lines of the probe's log that report a write it tried at a start.
fn start_attempts(w: &World, name: &str, path: &Path) -> Vec<String> {
    let needle = format!("[probe] at start: write {}: ", path.display());
    let log = log_of(&w.t, name);
    log.lines()
        .filter(|l| l.starts_with(&needle))
        .map(|l| l[needle.len()..].to_string())
        .collect()
}

/// The session's `/reload-ext`, sent by the extension itself with
/// `submit_slash`: its manifest stayed as it was, and the new process
/// is as confined as the first.
#[cfg(feature = "panels")]
#[test]
fn a_reload_the_extension_asks_for_cannot_widen_it() {
    let w = World::new("confine-slash");
    let ext = w.probe("probe", None);
    let manifest = std::fs::read(ext.join("extension.json")).expect("read manifest");
    let outside = w.home().join("pwned");
    let attempts = format!(
        "{}\n{}\n",
        outside.display(),
        ext.join("extension.json").display()
    );
    std::fs::write(ext.join("attempts.txt"), attempts).expect("write attempts.txt");
    let mut z = Zot::start(&w.t, std::slice::from_ref(&ext), &["--confine"]);
    let widened = json!({"name": "probe", "exec": "python3", "args": ["./probe.py"],
        "permissions": {"write": ["/"], "network": true}});
    let rewrite = json!({"op": "write", "path": path_str(&ext.join("extension.json")),
        "text": widened.to_string()});
    z.send(&format!("/call probe {rewrite}"));
    z.expect("denied E");
    z.send(r#"/call probe {"op": "slash", "text": "/reload-ext"}"#);
    z.expect("reloaded: 1 stopped, 1 loaded (1 ready)");
    let write = json!({"op": "write", "path": path_str(&outside)});
    z.send(&format!("/call probe {write}"));
    z.expect("denied E");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));

    assert_eq!(
        std::fs::read(ext.join("extension.json")).expect("read manifest"),
        manifest,
        "the manifest changed"
    );
    assert!(!outside.exists(), "{} was written", outside.display());
    // Both starts tried, and both were denied.
    for path in [&outside, &ext.join("extension.json")] {
        let tried = start_attempts(&w, "probe", path);
        assert_eq!(
            tried.len(),
            2,
            "two starts should have tried {path:?}: {tried:?}"
        );
        for answer in tried {
            assert_denied(&answer, "a write at start");
        }
    }
}

/// Restarts reuse what the first start resolved: a declared directory
/// the extension swaps for a link to elsewhere is denied afterwards.
/// A manifest whose permissions change waits for a new host.
#[test]
fn permissions_are_resolved_once_per_host() {
    let w = World::new("confine-once");
    let ext = w.probe(
        "probe",
        Some(json!({"write": ["$EXT/data", "$EXT/data/out"]})),
    );
    std::fs::create_dir_all(ext.join("data/out")).expect("create data/out");
    let out = ext.join("data/out");
    let mut rpc = w.rpc(&[&ext], &["--confine"], &[]);
    let first = settled(&mut rpc, "probe");
    assert_eq!(first["state"], "ready", "{first}");
    let answer = probe(
        &mut rpc,
        "1",
        json!({"op": "write", "path": path_str(&out.join("a.txt"))}),
    );
    assert_ok(&answer, "writing a declared directory");
    // It cannot replace $EXT/data ($EXT is read only) ...
    let answer = probe(
        &mut rpc,
        "2",
        json!({"op": "replace", "path": path_str(&ext.join("data")), "target": "/"}),
    );
    assert_denied(&answer, "replacing $EXT/data");
    // ... but it can replace data/out, inside data, then crash.
    let target = path_str(&w.home()).to_string();
    let answer = probe(
        &mut rpc,
        "3",
        json!({"op": "replace", "path": path_str(&out), "target": target}),
    );
    assert_ok(&answer, "replacing a directory inside a writable one");
    rpc.send(json!({"type": "tool_call", "id": "4", "name": "probe",
        "args": {"op": "exit", "code": 3}}));
    rpc.until("the restart", |v| v["type"] == "extension_restarted");
    let mut n = 0;
    wait_for("the restarted probe to be ready", || {
        n += 1;
        let list = rpc.call(&format!("l{n}"), json!({"type": "list"}));
        let e = &list["data"]["extensions"][0];
        e["state"] == "ready" && e["pid"] != first["pid"]
    });
    let pwned = out.join("pwned");
    let answer = probe(
        &mut rpc,
        "5",
        json!({"op": "write", "path": path_str(&pwned)}),
    );
    assert_denied(&answer, "writing through the swapped directory");
    assert!(!w.home().join("pwned").exists(), "it wrote into $HOME");
    let log = log_of(&w.t, "probe");
    let denied = format!(
        "changed since its first start, so denied: {}",
        out.display()
    );
    assert!(log.contains(&denied), "{log}");

    // The permissions change on disk: a reload does not start it ...
    set_manifest_field(
        &ext,
        "permissions",
        json!({"write": ["$EXT/data", "$EXT/data/out"], "network": true}),
    );
    let reload = rpc.call("6", json!({"type": "reload"}));
    assert_eq!(reload["type"], "response", "{reload}");
    let state = settled(&mut rpc, "probe");
    assert_eq!(state["state"], "failed", "{state}");
    let error = state["error"].as_str().unwrap_or_default();
    let changed = "its permissions changed since this host first started it";
    assert!(error.contains(changed), "{state}");
    assert_eq!(state.get("pid"), None, "it must not run: {state}");
    assert!(log_of(&w.t, "probe").contains(changed));
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));

    // ... a new host resolves them again, and refuses the link it finds.
    let mut rpc = w.rpc(&[&ext], &["--confine"], &[]);
    let state = settled(&mut rpc, "probe");
    let error = state["error"].as_str().unwrap_or_default();
    let link = format!("permissions.write \"$EXT/data/out\" is a symbolic link (to {target})");
    assert!(error.contains(&link), "{state}");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    std::fs::remove_file(&out).expect("remove the link");
    let mut rpc = w.rpc(&[&ext], &["--confine"], &[]);
    assert_eq!(settled(&mut rpc, "probe")["state"], "ready");
}

/// What a repository ships cannot point a declared path elsewhere.
#[test]
fn a_declared_path_that_is_or_passes_a_symlink_is_refused() {
    let w = World::new("confine-link");
    let shipped = w.probe("shipped", Some(json!({"write": ["$EXT/data"]})));
    std::os::unix::fs::symlink("/", shipped.join("data")).expect("symlink data -> /");
    let through = w.probe("through", Some(json!({"read": ["$EXT/d/.ssh"]})));
    std::fs::create_dir_all(w.home().join(".ssh")).expect("create .ssh");
    std::os::unix::fs::symlink(w.home(), through.join("d")).expect("symlink d -> home");
    let cases = [
        (
            &shipped,
            "permissions.write \"$EXT/data\" is a symbolic link (to /)".to_string(),
        ),
        (
            &through,
            format!(
                "permissions.read \"$EXT/d/.ssh\" passes through the symbolic link {} (to {})",
                through.join("d").display(),
                w.home().display()
            ),
        ),
    ];
    for (ext, want) in cases {
        let name = ext.file_name().and_then(|n| n.to_str()).expect("name");
        let mut rpc = w.rpc(&[ext], &["--confine"], &[]);
        let state = settled(&mut rpc, name);
        assert_eq!(state["state"], "failed", "{state}");
        let error = state["error"].as_str().unwrap_or_default();
        assert!(error.contains(&want), "{error:?} should say {want:?}");
        assert!(log_of(&w.t, name).contains(&want));
    }
}

/// A declared write path may not hold the manifest or touch $ZOT_HOME.
#[test]
fn write_paths_over_its_manifest_or_zot_home_are_refused() {
    let w = World::new("confine-over");
    let zot_home = w.t.join("home");
    let cases = [
        (
            json!(["$EXT"]),
            "permissions.write \"$EXT\" holds the extension's own manifest",
        ),
        (
            json!([path_str(w.t.path())]),
            "holds the extension's own manifest",
        ),
        (json!([path_str(&zot_home)]), "overlaps $ZOT_HOME"),
        (
            json!([path_str(&zot_home.join("logs"))]),
            "overlaps $ZOT_HOME",
        ),
    ];
    std::fs::create_dir_all(zot_home.join("logs")).expect("create logs");
    for (i, (write, want)) in cases.into_iter().enumerate() {
        let name = format!("over{i}");
        let ext = w.probe(&name, Some(json!({"write": write})));
        let mut rpc = w.rpc(&[&ext], &["--confine"], &[]);
        let state = settled(&mut rpc, &name);
        assert_eq!(state["state"], "failed", "{state}");
        let error = state["error"].as_str().unwrap_or_default();
        assert!(error.contains(want), "{error:?} should say {want:?}");
    }
}

/// `$HOME/bin` and `~/.local/bin` on `PATH` grant themselves, never
/// `$HOME` or `~/.local`.
#[test]
fn path_entries_in_home_never_expose_home() {
    let w = World::new("confine-path");
    let home = w.home();
    for dir in [".ssh", "bin", ".local/bin", ".local/share"] {
        std::fs::create_dir_all(home.join(dir)).expect("create dir");
    }
    let key = home.join(".ssh/id_rsa");
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\n").expect("write key");
    let local = home.join(".local/share/history");
    std::fs::write(&local, "secret\n").expect("write history");
    let tool = home.join("bin/tool");
    std::fs::write(&tool, "a tool\n").expect("write tool");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        [home.join("bin"), home.join(".local/bin")]
            .into_iter()
            .chain(std::env::split_paths(&path)),
    )
    .expect("PATH");
    let ext = w.probe("reader", Some(json!({"read": []})));
    let path = path.to_str().expect("utf-8 PATH");
    let mut rpc = w.rpc(&[&ext], &["--confine"], &[("PATH", path)]);
    let state = settled(&mut rpc, "reader");
    assert_eq!(state["state"], "ready", "{state}");
    for (i, secret) in [&key, &local].into_iter().enumerate() {
        let answer = probe(
            &mut rpc,
            &format!("s{i}"),
            json!({"op": "read", "path": path_str(secret)}),
        );
        assert_denied(&answer, &format!("reading {}", secret.display()));
    }
    let answer = probe(
        &mut rpc,
        "t",
        json!({"op": "read", "path": path_str(&tool)}),
    );
    assert_eq!(answer, "ok read a tool", "a PATH entry is readable");
}

/// Asserts the probe opens none of the pipes and sockets of `pid`.
fn assert_grabs_nothing(rpc: &mut Rpc, pid: u32) {
    let grabbed = probe(rpc, "grab", json!({"op": "grab", "pid": pid}));
    let tried = grabbed
        .strip_prefix("ok opened 0 of ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse::<u32>().ok());
    assert!(tried.is_some_and(|n| n > 0), "{grabbed}");
}

/// What else a confined extension could reach: the host's memory and
/// pipes through /proc, its own log, the trust record, another
/// extension's manifest, data directory and TMPDIR.
#[test]
fn the_host_and_other_extensions_stay_out_of_reach() {
    let w = World::new("confine-reach");
    let a = w.probe("a", Some(json!({"read": ["$EXT"]})));
    let b = w.probe("b", None);
    let zot_home = w.t.join("home");
    std::fs::write(zot_home.join("trust.json"), "{}").expect("write trust.json");
    let mut rpc = w.rpc(&[&a, &b], &["--confine"], &[]);
    rpc.wait_ready(2);
    // Both register `probe`: a's is the one called; b has a data
    // directory and a TMPDIR of its own, which a tries to reach.
    let data = probe(&mut rpc, "0", json!({"op": "data_dir"}));
    let b_real = std::fs::canonicalize(&b).expect("resolve b");
    let b_name = b_real.file_name().and_then(|n| n.to_str()).expect("b");
    let b_data = Path::new(data.trim_start_matches("ok ")).with_file_name(format!("{b_name}~"));
    assert!(b_data.is_dir(), "b's data directory {}", b_data.display());
    let host = rpc.child.id();
    let b_tmp = std::fs::read_dir(std::env::temp_dir())
        .expect("read the temporary directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("zot-b-{host}-")))
        })
        .expect("b's TMPDIR");
    let denied = [
        ("read", format!("/proc/{host}/mem")),
        ("read", path_str(&zot_home.join("trust.json")).to_string()),
        ("list", path_str(&b_tmp).to_string()),
        ("list", path_str(&b_data).to_string()),
        ("write", path_str(&zot_home.join("trust.json")).to_string()),
        (
            "write",
            path_str(&zot_home.join("logs/ext-a.log")).to_string(),
        ),
        (
            "write",
            path_str(&zot_home.join("logs/ext-b.log")).to_string(),
        ),
        ("write", path_str(&b_data.join("planted")).to_string()),
        ("write", path_str(&b_tmp.join("planted")).to_string()),
        ("write", path_str(&b.join("extension.json")).to_string()),
    ];
    for (i, (op, path)) in denied.iter().enumerate() {
        let answer = probe(&mut rpc, &format!("r{i}"), json!({"op": op, "path": path}));
        assert_denied(&answer, &format!("{op} {path}"));
    }
    // The host's pipes to and from the other extension, through
    // /proc/PID/fd: none opens, for reading or writing.
    assert_grabs_nothing(&mut rpc, host);
    assert_eq!(
        std::fs::read_to_string(zot_home.join("trust.json")).expect("trust.json"),
        "{}"
    );
    assert!(!b_data.join("planted").exists());
}
