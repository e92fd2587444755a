//! Confinement with Landlock (SPEC 16), on this machine's kernel: real
//! extension processes (fixtures/confine/probe.py) try to write, read,
//! connect and signal, through `zot rpc`, the session, `zot mcp`,
//! `zot ext check` and the library.

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
    let mut n = 0;
    let mut last = Value::Null;
    wait_for(&format!("{name} to settle"), || {
        n += 1;
        last = rpc.call(&format!("list-{n}"), json!({"type": "list"}))["data"].clone();
        let state = last["extensions"][0]["state"].clone();
        state != "starting"
    });
    assert_eq!(last["extensions"][0]["name"], name, "{last}");
    last["extensions"][0].clone()
}

#[test]
fn confined_writes_only_its_directory_and_its_tmpdir() {
    let w = World::new("confine-write");
    let ext = w.probe("probe", None);
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

    let own = ext.join("state.txt");
    let answer = probe(
        &mut rpc,
        "3",
        json!({"op": "write", "path": path_str(&own)}),
    );
    assert_ok(&answer, "writing into $EXT");
    assert!(own.is_file());
    let answer = probe(&mut rpc, "4", json!({"op": "tmp"}));
    assert_ok(&answer, "writing into its TMPDIR");
    let scratch = PathBuf::from(answer.trim_start_matches("ok "));
    assert!(scratch.is_file(), "{answer}");
    let tmpdir = scratch.parent().expect("tmpdir").to_path_buf();
    assert!(
        tmpdir.starts_with(std::env::temp_dir()) && tmpdir != std::env::temp_dir(),
        "TMPDIR should be a private directory under the temporary directory: {answer}"
    );
    let log = log_of(&w.t, "probe");
    assert!(log.contains("confined: write $EXT, its TMPDIR"), "{log}");

    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
    assert!(
        !tmpdir.exists(),
        "the private TMPDIR {} outlived the extension",
        tmpdir.display()
    );
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
        let call = zot_host::ToolRequest {
            name: "probe".into(),
            args: json!({"op": "connect", "port": port}),
            tool_id: None,
            operation_key: None,
            reconcile: false,
        };
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
            .any(|(s, m)| s == "pass" && m.contains("write $EXT, its TMPDIR, $CWD")),
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
        "permissions: write $EXT, its TMPDIR, $CWD/out; read everything; use TCP",
        "permissions: none declared (write $EXT, its TMPDIR; read everything; use no TCP when confined)",
    ] {
        assert!(shown.contains(want), "zot ext trust should show {want:?}:\n{shown}");
    }
}
