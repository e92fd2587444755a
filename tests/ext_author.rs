//! `zot ext check` against fixture extensions that keep or break each
//! rule (fixtures/check/), and `zot ext new` for every language whose
//! runtime is on this machine: the new extension passes `check --strict`
//! and its tool answers through `zot rpc`.

#![cfg(feature = "author")]

mod common;

use common::{
    fixture, fixture_path, group_gone, process_gone, read_pid, send_signal, wait_for,
    wait_with_usage, write_manifest, write_manifest_text, zot, Rpc, TempDir, DEADLINE,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `zot ext check` with `args`; ZOT_HOME is a fresh directory that
/// the check must not touch.
fn run_check(args: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> Output {
    let home = TempDir::new("check-home");
    let mut cmd = zot();
    cmd.args(["ext", "check"])
        .args(args)
        .env("ZOT_HOME", home.path());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run zot ext check");
    let left: Vec<_> = std::fs::read_dir(home.path()).expect("home").collect();
    assert!(left.is_empty(), "check wrote into ZOT_HOME: {left:?}");
    out
}

/// `zot ext check DIR --json ARGS...`: exit code and report.
fn check_json(dir: &Path, args: &[&str]) -> (i32, Value) {
    check_json_with(dir, args, &[])
}

/// The same, for an extension that sends `ready` and must pass `--strict`:
/// a startup grace of 60 s (`$ZOT_STARTUP_TIMEOUT`), so that a slow start
/// on a busy machine is not the "slower than the startup grace" warning.
fn patient_check_json(dir: &Path, args: &[&str]) -> (i32, Value) {
    check_json_with(dir, args, &[("ZOT_STARTUP_TIMEOUT", "60".as_ref())])
}

fn check_json_with(dir: &Path, args: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> (i32, Value) {
    let dir = dir.to_str().expect("utf-8 path");
    let mut all = vec![dir, "--json"];
    all.extend_from_slice(args);
    let out = run_check(&all, envs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "--json printed no JSON object ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exit code"), report)
}

/// The findings for `rule` as (status, message) pairs.
fn findings<'a>(report: &'a Value, rule: &str) -> Vec<(&'a str, &'a str)> {
    report["checks"]
        .as_array()
        .expect("checks array")
        .iter()
        .filter(|c| c["rule"] == rule)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or(""),
            )
        })
        .collect()
}

/// Asserts that `rule` has a finding with `status` whose message has `want`.
fn assert_finding(report: &Value, rule: &str, status: &str, want: &str) {
    let found = findings(report, rule);
    assert!(
        found.iter().any(|(s, m)| *s == status && m.contains(want)),
        "expected {status} {rule} mentioning {want:?}; {rule} has {found:?}\nreport: {report:#}"
    );
}

/// The first finding of `rule` (null when there is none).
fn first_check<'a>(report: &'a Value, rule: &str) -> &'a Value {
    let checks = report["checks"].as_array();
    let found = checks.and_then(|c| c.iter().find(|c| c["rule"] == rule));
    found.unwrap_or(&Value::Null)
}

fn statuses(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| format!("{} {}", c["status"], c["rule"]))
        .collect()
}

#[test]
fn a_clean_extension_passes_every_rule() {
    let (code, report) = patient_check_json(&fixture_path("check/clean"), &["--strict"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["ok"], true);
    let all = statuses(&report);
    assert!(
        all.iter().all(|s| s.starts_with("\"pass\"")),
        "not all pass: {all:?}"
    );
    for rule in [
        "manifest",
        "exec",
        "hello",
        "command /greet",
        "tool add",
        "subscribe",
        "ready",
        "event session_start",
        "event turn_end",
        "intercept tool_call",
        "intercept turn_start",
        "intercept assistant_message",
        "shutdown",
        "process group",
        "stdout",
    ] {
        assert_eq!(findings(&report, rule).len(), 1, "no {rule} line: {all:?}");
    }
    assert_eq!(report["stderr_tail"], json!([]), "no failure, no stderr");
}

#[test]
fn the_text_report_has_one_line_per_rule_with_times() {
    let out = run_check(&[fixture_path("check/clean").to_str().unwrap()], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let hello = text
        .lines()
        .find(|l| l.starts_with("pass  hello"))
        .unwrap_or_else(|| panic!("no hello line: {text}"));
    assert!(hello.ends_with(" ms)") || hello.ends_with(" s)"), "{hello}");
    assert!(
        text.lines()
            .last()
            .unwrap_or("")
            .starts_with("ok: 0 failed"),
        "{text}"
    );
}

#[test]
fn json_report_shape() {
    // Without `ready` the check waits out the startup grace: 1 s, not 3.
    let grace = [("ZOT_STARTUP_TIMEOUT", "1".as_ref())];
    let (code, report) = check_json_with(&fixture_path("check/no-ready"), &[], &grace);
    assert_eq!(code, 0, "a warning alone does not fail: {report:#}");
    for (key, kind) in [
        ("dir", "string"),
        ("extension", "string"),
        ("ok", "bool"),
        ("strict", "bool"),
        ("failed", "number"),
        ("warnings", "number"),
        ("ms", "number"),
        ("checks", "array"),
        ("stderr_tail", "array"),
    ] {
        let v = &report[key];
        let ok = match kind {
            "string" => v.is_string(),
            "bool" => v.is_boolean(),
            "number" => v.is_number(),
            _ => v.is_array(),
        };
        assert!(ok, "`{key}` should be a {kind}: {report:#}");
    }
    assert_eq!(report["extension"], "no-ready");
    assert_eq!(
        (report["failed"].clone(), report["warnings"].clone()),
        (json!(0), json!(1))
    );
    for check in report["checks"].as_array().unwrap() {
        assert!(
            check["rule"].is_string() && check["message"].is_string(),
            "{check}"
        );
        assert!(["pass", "warn", "fail"].contains(&check["status"].as_str().unwrap_or("")));
        assert!(check["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{check}");
    }
}

#[test]
fn without_ready_a_warning_that_fails_only_with_strict() {
    // Without `ready` the check waits out the whole startup grace for a
    // late one: a 1 s grace instead of 3 s (the warning comes once the
    // 250 ms idle watchdog would have fired, however late the names are).
    let grace = [("ZOT_STARTUP_TIMEOUT", "1".as_ref())];
    let (code, report) = check_json_with(&fixture_path("check/no-ready"), &[], &grace);
    assert_eq!(code, 0);
    assert_finding(&report, "ready", "warn", "250 ms idle watchdog");
    let (code, report) = check_json_with(&fixture_path("check/no-ready"), &["--strict"], &grace);
    assert_eq!(code, 1, "--strict fails on warnings: {report:#}");
    assert_eq!(report["ok"], false);
    let out = run_check(
        &[fixture_path("check/no-ready").to_str().unwrap(), "--strict"],
        &grace,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--strict: warnings fail"), "{text}");
}

#[test]
fn a_stray_print_is_named_with_the_advice_to_use_stderr() {
    let (code, report) = check_json(&fixture_path("check/stray-print"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "stdout", "fail", "debug: registered everything");
    let hint = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["rule"] == "stdout")
        .and_then(|c| c["hint"].as_str())
        .unwrap_or("");
    assert!(hint.contains("stderr"), "hint: {hint}");
    // The rest still ran: the stray line does not stop the check.
    assert_finding(&report, "shutdown", "pass", "shutdown_ack");
}

#[test]
fn a_line_printed_while_exiting_is_still_caught() {
    let (code, report) = check_json(&fixture_path("check/prints-at-exit"), &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_finding(&report, "shutdown", "pass", "shutdown_ack");
    assert_finding(&report, "stdout", "fail", "goodbye!");
}

#[test]
fn a_hello_name_unlike_the_manifest_and_disabled_are_warnings() {
    let (code, report) = check_json(&fixture_path("check/misnamed"), &[]);
    assert_eq!(code, 0, "{report:#}");
    assert_finding(&report, "hello", "warn", "hello says \"other-name\"");
    assert_finding(&report, "manifest", "warn", "\"enabled\": false");
    let (code, _) = check_json(&fixture_path("check/misnamed"), &["--strict"]);
    assert_eq!(code, 1);
}

#[test]
fn a_missing_interpreter_is_explained() {
    let (code, report) = check_json(&fixture_path("check/bad-shebang"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "spawn", "fail", "cannot start");
    let hint = first_check(&report, "spawn")["hint"].as_str().unwrap_or("");
    assert!(hint.contains("#! line"), "hint: {hint}");
}

#[test]
fn registering_before_hello_fails_the_handshake() {
    let (code, report) = check_json(&fixture_path("check/no-hello"), &[]);
    assert_eq!(code, 1);
    assert_finding(
        &report,
        "hello",
        "fail",
        "first frame was `register_command`, expected `hello`",
    );
    assert!(
        findings(&report, "shutdown").is_empty(),
        "nothing after a failed handshake"
    );
}

#[test]
fn a_malformed_hello_is_named() {
    let (code, report) = check_json(&fixture_path("check/bad-hello"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "hello", "fail", "its hello cannot be read");
    assert_finding(&report, "stdout", "fail", "field `name`");
    let hello_ms = first_check(&report, "hello")["ms"]
        .as_f64()
        .unwrap_or(f64::MAX);
    assert!(
        hello_ms < 10_000.0,
        "waited the whole hello limit: {hello_ms} ms"
    );
}

#[test]
fn an_exit_before_hello_shows_the_exit_status_and_stderr() {
    let (code, report) = check_json(&fixture_path("check/crash-before-hello"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "hello", "fail", "exit code 3");
    let tail = report["stderr_tail"].to_string();
    assert!(tail.contains("cannot read config.toml"), "tail: {tail}");
    let out = run_check(
        &[fixture_path("check/crash-before-hello").to_str().unwrap()],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("| crash-before-hello: cannot read config.toml"),
        "{text}"
    );
}

#[test]
fn an_extension_that_ignores_shutdown_fails_and_is_stopped() {
    let (code, report) = check_json(&fixture_path("check/ignores-shutdown"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "shutdown", "fail", "no shutdown_ack");
    // It ignores SIGTERM too; check kills it, so nothing is left.
    assert_finding(&report, "process group", "pass", "nothing");
}

#[test]
fn a_surviving_grandchild_fails_and_is_killed() {
    let tmp = TempDir::new("check-gc");
    let pid_file = tmp.join("pid");
    let dir = fixture_path("check/grandchild");
    // The check looks for the group until the shutdown grace ends (2 s);
    // half a second is time enough for the shell fixture to ack and exit.
    let grace = ("ZOT_SHUTDOWN_GRACE", "0.5".as_ref());
    let out = run_check(
        &[dir.to_str().unwrap(), "--json"],
        &[("PID_FILE", pid_file.as_os_str()), grace],
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_finding(&report, "shutdown", "pass", "shutdown_ack");
    assert_finding(&report, "shutdown", "pass", "within the 500 ms grace");
    assert_finding(
        &report,
        "process group",
        "fail",
        "still run after it exited",
    );
    let pid = read_pid(&pid_file);
    wait_for("the grandchild to be killed", || process_gone(pid));
}

#[test]
fn broken_schemas_are_named() {
    let (code, report) = check_json(&fixture_path("check/broken-schema"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "tool fine", "pass", "JSON Schema object");
    assert_finding(&report, "tool not_object", "fail", "not a JSON object");
    assert_finding(&report, "tool wrong_type", "fail", "expected \"object\"");
    assert_finding(&report, "tool list_properties", "fail", "\"properties\"");
    assert_finding(
        &report,
        "tool required_unknown",
        "fail",
        "required \"b\" is not in \"properties\"",
    );
}

#[test]
fn bad_names_duplicates_descriptions_and_subscriptions() {
    let (code, report) = check_json(&fixture_path("check/bad-names"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "command /two words", "fail", "whitespace");
    assert_finding(&report, "command /twice", "fail", "registered twice");
    assert_finding(&report, "command /undescribed", "fail", "no description");
    assert_finding(&report, "tool bash", "warn", "built-in tool bash");
    assert_finding(&report, "tool schemaless", "warn", "no schema");
    assert_finding(&report, "subscribe", "warn", "unknown event \"turn_begin\"");
    assert_finding(
        &report,
        "subscribe",
        "warn",
        "cannot intercept \"session_start\"",
    );
    // The valid subscription is still exercised.
    assert_finding(&report, "event turn_end", "pass", "sent");
}

#[test]
fn an_intercept_without_answer_fails_after_the_limit() {
    // The host's intercept limit (5 s, docs/PROTOCOL.md#timeouts) set to 1 s.
    let limit = [("ZOT_INTERCEPT_TIMEOUT", "1".as_ref())];
    let (code, report) = check_json_with(&fixture_path("check/silent-guard"), &[], &limit);
    assert_eq!(code, 1);
    assert_finding(
        &report,
        "intercept tool_call",
        "fail",
        "no answer within 1 s",
    );
}

#[test]
fn a_missing_exec_and_a_missing_manifest() {
    let (code, report) = check_json(&fixture_path("check/missing-exec"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "exec", "fail", "no such file");
    assert!(findings(&report, "hello").is_empty(), "not started");

    let empty = TempDir::new("check-empty");
    std::fs::write(empty.join("main.py"), "print('hi')\n").unwrap();
    let (code, report) = check_json(empty.path(), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "manifest", "fail", "no extension.json");
    assert_eq!(report["extension"], Value::Null);

    let (code, report) = check_json(&empty.join("nope"), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "manifest", "fail", "not a directory");
}

#[test]
fn an_invalid_manifest_names_the_field() {
    let dir = TempDir::new("check-invalid");
    write_manifest_text(
        dir.path(),
        r#"{"name": "x", "exec": "./x", "enabled": "yes"}"#,
    );
    let (code, report) = check_json(dir.path(), &[]);
    assert_eq!(code, 1);
    assert_finding(&report, "manifest", "fail", "invalid type");
}

#[test]
fn call_and_command_run_and_their_answers_are_checked() {
    let (code, report) = check_json(
        &fixture_path("check/probes"),
        &[
            "--call",
            "echo",
            r#"{"a": 1}"#,
            "--call",
            "bad_image",
            "{}",
            "--call",
            "nope",
            "{}",
            "--command",
            "hi",
            "there",
            "--command",
            "/bad_action",
            "",
            "--command",
            "no_text",
            "x",
        ],
    );
    assert_eq!(code, 1, "{report:#}");
    // The default tool answer echoes the arguments it got.
    assert_finding(&report, "call echo", "pass", r#"{"a": 1}"#);
    assert_finding(&report, "call bad_image", "fail", "not valid base64");
    assert_finding(&report, "call nope", "fail", "registered no tool nope");
    assert_finding(&report, "run /hi", "pass", "display: hello there");
    assert_finding(&report, "run /bad_action", "fail", "action \"shout\"");
    assert_finding(&report, "run /no_text", "fail", "without a `prompt` text");
    // In the order given, before shutdown.
    let rules: Vec<String> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["rule"].as_str().unwrap_or("").to_string())
        .collect();
    let at = |r: &str| rules.iter().position(|x| x == r).unwrap_or(usize::MAX);
    assert!(at("call echo") < at("run /hi") && at("run /no_text") < at("shutdown"));
}

#[test]
fn usage_errors_exit_2() {
    let clean = fixture_path("check/clean");
    let clean = clean.to_str().unwrap();
    for args in [
        vec![clean, "--call", "add", "not json"],
        vec![clean, "--call", "add"],
        vec![clean, "--bogus"],
        vec![clean, "extra-path"],
    ] {
        let out = run_check(&args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("zot: "), "{args:?}: {err}");
    }
}

// ------------------------------------------------------------ templates

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `zot ext new NAME --lang LANG` in `parent`.
fn new_ext(parent: &Path, name: &str, lang: &str) -> Output {
    zot()
        .args(["ext", "new", name, "--lang", lang])
        .current_dir(parent)
        .output()
        .expect("run zot ext new")
}

/// Why `lang`'s template cannot be tested here, if it cannot.
fn missing_runtime(lang: &str) -> Option<&'static str> {
    let (needs, why) = match lang {
        "python" => ("python3", "python3 is not installed"),
        "sh" => ("jq", "jq is not installed"),
        "node" => ("node", "node is not installed"),
        "go" => ("go", "go is not installed (apt-get install golang-go)"),
        _ => ("cargo", "cargo is not installed"),
    };
    (!have(needs)).then_some(why)
}

/// Runs the build command `zot ext new` printed (`said`) in `dir`, with
/// CARGO_TARGET_DIR pointing elsewhere, as a user's environment may: the
/// binary must still land where the manifest runs it.
fn build(dir: &Path, lang: &str, said: &str) {
    let line = said
        .lines()
        .find(|l| l.contains("build it:"))
        .expect("a build step");
    let command = line.split("&& ").nth(1).and_then(|c| c.strip_suffix(')'));
    let command: Vec<&str> = command
        .expect("(cd DIR && COMMAND)")
        .split_whitespace()
        .collect();
    let elsewhere = dir.with_file_name("cargo-target-elsewhere");
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(command[0]);
        cmd.args(&command[1..]).args(extra).current_dir(dir);
        // A private Go cache: the test must not depend on one being set up.
        cmd.env("GOCACHE", dir.join(".gocache"));
        cmd.env("CARGO_TARGET_DIR", &elsewhere);
        cmd.output().expect("run the build")
    };
    let cache = rust_deps_cache();
    if lang == "rust" && cache.is_dir() {
        copy_tree(&cache, &dir.join("target"));
    }
    let out = match lang {
        "go" => run(&[]),
        // serde_json is in the local registry already (zot uses it);
        // the network is only needed when it is not.
        _ => {
            let offline = run(&["--quiet", "--offline"]);
            if offline.status.success() {
                offline
            } else {
                run(&["--quiet"])
            }
        }
    };
    assert!(
        out.status.success(),
        "{lang} build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if lang == "rust" && !cache.is_dir() {
        // Copied, then renamed: a build running at once never sees half a cache.
        let fresh = cache.with_extension(format!("new-{}", std::process::id()));
        copy_tree(&dir.join("target"), &fresh);
        if std::fs::rename(&fresh, &cache).is_err() {
            let _ = std::fs::remove_dir_all(&fresh);
        }
    }
}

/// The Rust template's release target dir from an earlier build: its
/// dependencies (serde_json) compiled once, so a later run of the test
/// compiles only the new crate itself (cargo rebuilds it: its path differs).
fn rust_deps_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("rust-template-target")
}

/// `cp -a FROM TO`: keeps the times cargo's fingerprints compare.
fn copy_tree(from: &Path, to: &Path) {
    let out = Command::new("cp").arg("-a").arg(from).arg(to).output();
    let out = out.expect("run cp");
    assert!(
        out.status.success(),
        "cp -a {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn template_round_trip(lang: &str) {
    if let Some(why) = missing_runtime(lang) {
        eprintln!("skipping the {lang} template: {why}");
        return;
    }
    let tmp = TempDir::new(&format!("new-{lang}"));
    let name = format!("hello-{lang}");
    let tool = format!("hello_{lang}_echo");
    let out = new_ext(tmp.path(), &name, lang);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "new failed: {said}");
    assert!(said.contains(&format!("zot -e ./{name}")), "{said}");
    assert!(said.contains(&format!("zot ext check ./{name}")), "{said}");
    assert!(
        said.contains(&format!("zot ext install ./{name}")),
        "{said}"
    );
    let dir = tmp.join(&name);
    if lang == "go" || lang == "rust" {
        // Before the build, check says how to build it.
        let (code, report) = check_json(&dir, &[]);
        assert_eq!(code, 1);
        let hint = report["checks"][1]["hint"].as_str().unwrap_or("");
        let want = if lang == "go" {
            "go build"
        } else {
            "cargo build --release --target-dir target"
        };
        assert!(hint.contains(want), "{lang}: hint {hint:?}");
        build(&dir, lang, &said);
    }

    let (code, report) = patient_check_json(
        &dir,
        &[
            "--strict",
            "--confine",
            "--call",
            &tool,
            r#"{"text": "hi", "upper": true}"#,
            "--call",
            &tool,
            r#"{"text": 5}"#,
            "--command",
            &name,
            "you",
        ],
    );
    assert_eq!(code, 0, "{lang}: {report:#}");
    assert_eq!(report["warnings"], 0);
    assert_finding(&report, &format!("call {tool}"), "pass", "tool_result: HI");
    assert_finding(
        &report,
        &format!("call {tool}"),
        "pass",
        "(is_error): `text`",
    );
    assert_finding(&report, &format!("run /{name}"), "pass", "hello, you!");
    // Confined by the permissions it declares, nothing it does is denied.
    assert_finding(
        &report,
        "permissions",
        "pass",
        "declared: write its data directory",
    );
    assert_finding(&report, "confine", "pass", "no denied operation");

    // It works in `zot rpc`: its tool answers, its argument checking too.
    let home = TempDir::new(&format!("new-{lang}-rpc"));
    let mut rpc = Rpc::start(&home, std::slice::from_ref(&dir));
    let r = rpc.call(
        "1",
        json!({"type": "tool_call", "name": tool, "args": {"text": "hi", "upper": true}}),
    );
    assert_eq!(r["success"], true, "{lang}: {r}");
    assert_eq!(
        r["data"]["content"],
        json!([{"type": "text", "text": "HI"}]),
        "{r}"
    );
    assert_eq!(r["data"]["is_error"], false);
    let r = rpc.call(
        "2",
        json!({"type": "tool_call", "name": tool, "args": {"txt": "hi"}}),
    );
    assert_eq!(r["data"]["is_error"], true, "{lang}: {r}");
    let r = rpc.call("3", json!({"type": "command", "name": name, "args": "rpc"}));
    assert_eq!(r["data"]["display"], "hello, rpc!", "{lang}: {r}");
    rpc.call("4", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn python_template() {
    template_round_trip("python");
}

#[test]
fn sh_template() {
    template_round_trip("sh");
}

#[test]
fn node_template() {
    template_round_trip("node");
}

#[test]
fn go_template() {
    template_round_trip("go");
}

#[test]
fn rust_template() {
    template_round_trip("rust");
}

#[test]
fn new_refuses_to_overwrite_and_checks_its_arguments() {
    let tmp = TempDir::new("new-refuse");
    assert!(new_ext(tmp.path(), "mine", "python").status.success());
    let main = tmp.join("mine/main.py");
    std::fs::write(&main, "# my own work\n").unwrap();
    let out = new_ext(tmp.path(), "mine", "sh");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&main).unwrap(), "# my own work\n");
    assert!(!tmp.join("mine/main.sh").exists());

    // An empty directory is fine (--dir .); a bad name or language is not.
    std::fs::create_dir(tmp.join("empty")).unwrap();
    let out = zot()
        .args(["ext", "new", "here", "--dir", "."])
        .current_dir(tmp.join("empty"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tmp.join("empty/extension.json").is_file());
    for (name, lang) in [("bad name", "python"), ("ok", "cobol"), ("-x", "python")] {
        let out = new_ext(tmp.path(), name, lang);
        assert_eq!(out.status.code(), Some(2), "{name} {lang}");
    }
}

/// The extension runs in its own process group, so the terminal's
/// Ctrl-C does not reach it: an interrupted check kills it itself, and
/// a killed one takes it along (PDEATHSIG and the watchdog).
#[test]
fn an_interrupted_check_leaves_nothing_running() {
    interrupted_check_leaves_nothing("INT", libc::SIGINT, Some(130));
}

#[test]
fn a_killed_check_leaves_nothing_running() {
    interrupted_check_leaves_nothing("KILL", libc::SIGKILL, None);
}

fn interrupted_check_leaves_nothing(signal: &str, sig: libc::c_int, code: Option<i32>) {
    let t = TempDir::new("check-int");
    let pid_file = t.join("pid");
    // Never says hello, ignores SIGTERM and stdin EOF: only SIGKILL ends it.
    let script = format!(
        "trap '' TERM; echo $$ > '{}'; while :; do sleep 1; done",
        pid_file.display()
    );
    let dir = t.join("stuck");
    let manifest = json!({"name": "stuck", "exec": "/bin/sh", "args": ["-c", script]});
    write_manifest(&dir, &manifest);
    let home = TempDir::new("check-int-home");
    let check = zot()
        .args(["ext", "check"])
        .arg(&dir)
        .env("ZOT_HOME", home.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run zot ext check");
    let pid = read_pid(&pid_file);
    assert!(send_signal(check.id(), sig), "kill -{signal} zot failed");
    let out = check.wait_with_output().expect("wait for the check");
    assert_eq!(out.status.code(), code, "exit status after SIG{signal}");
    if code.is_some() {
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("interrupted"),
            "stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    wait_for(
        &format!("extension {pid} and its group to die with the check (SIG{signal})"),
        || process_gone(pid) && group_gone(pid),
    );
}

/// A `ready` that comes after a quiet spell longer than the host's idle
/// watchdog (a slow start, or a starved machine) is still a `ready`: the
/// check waits for it up to the startup grace instead of warning.
#[test]
fn a_late_ready_is_not_reported_as_missing() {
    let t = TempDir::new("check-late");
    let dir = t.join("late");
    let ext = fixture();
    let cfg = json!({"name": "late", "register_delay_ms": 800,
        "register": [{"type": "register_command", "name": "hi", "description": "hi command"}]});
    let manifest = json!({"name": "late", "exec": ext, "args": [cfg.to_string()]});
    write_manifest(&dir, &manifest);
    let (code, report) = patient_check_json(&dir, &["--strict"]);
    assert_eq!(code, 0, "{report:#}");
    assert_finding(&report, "ready", "pass", "ready");
    assert!(
        findings(&report, "ready").iter().all(|(s, _)| *s == "pass"),
        "{report:#}"
    );
}

/// The check judges against the limits `zot` would use here:
/// `$ZOT_HELLO_TIMEOUT`, `$ZOT_STARTUP_TIMEOUT` and `$ZOT_SHUTDOWN_GRACE`
/// as for the session and `zot rpc`, and a bad value is a usage error
/// naming the variable.
#[test]
fn the_limits_come_from_the_environment() {
    let t = TempDir::new("check-env");
    let dir = t.join("mute");
    let manifest = json!({"name": "mute", "exec": "/bin/sh", "args": ["-c", "exec sleep 30"]});
    write_manifest(&dir, &manifest);
    let (code, report) = check_json_with(&dir, &[], &[("ZOT_HELLO_TIMEOUT", "1".as_ref())]);
    assert_eq!(code, 1, "{report:#}");
    assert_finding(&report, "hello", "fail", "no hello within 1 s");
    for (var, bad) in [("ZOT_STARTUP_TIMEOUT", "soon"), ("ZOT_SHUTDOWN_GRACE", "0")] {
        let out = run_check(&[dir.to_str().unwrap()], &[(var, bad.as_ref())]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={bad}: {stderr}");
        assert!(stderr.contains(var), "{var}={bad}: {stderr}");
    }
}

/// An extension directory `dir/name` whose exec is `sh -c script`.
fn sh_ext(t: &TempDir, name: &str, script: &str) -> PathBuf {
    let dir = t.join(name);
    let manifest = json!({"name": name, "exec": "/bin/sh", "args": ["-c", script]});
    write_manifest(&dir, &manifest);
    dir
}

/// Runs `zot ext check --json DIR` and returns its report with the
/// peak resident memory (kB) of the check process, from `wait4`.
fn check_peak_rss(dir: &Path) -> (Value, i64) {
    let home = TempDir::new("check-rss-home");
    let mut child = zot()
        .args(["ext", "check", "--json"])
        .arg(dir)
        .env("ZOT_HOME", home.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn zot ext check");
    let mut stdout = String::new();
    use std::io::Read;
    let mut pipe = child.stdout.take().expect("stdout");
    pipe.read_to_string(&mut stdout).expect("read report");
    let (_, usage) = wait_with_usage(child, "zot ext check", DEADLINE);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("--json printed no JSON object ({e}): {stdout}"));
    (report, usage.ru_maxrss)
}

/// The stderr tail shown on a failure is read from the end of the log:
/// 100 MB of stderr (long lines or 2-byte ones) cost the check no more
/// than a few MiB, and the last lines are still shown.
#[test]
fn a_huge_stderr_is_tailed_in_bounded_memory() {
    let t = TempDir::new("check-stderr");
    for (name, line) in [("long-lines", "x".repeat(70)), ("short-lines", "a".into())] {
        let script = format!(
            "yes '{line}' | head -c 100000000 >&2; echo 'last words before exit' >&2; exit 3"
        );
        let dir = sh_ext(&t, name, &script);
        let (report, peak_kb) = check_peak_rss(&dir);
        assert_finding(&report, "hello", "fail", "exit code 3");
        let tail = report["stderr_tail"].as_array().expect("stderr_tail");
        // `head -c` cuts the flood mid-line: the last words end that line.
        let last = tail.last().and_then(Value::as_str).unwrap_or("");
        assert!(last.ends_with("last words before exit"), "{name}: {tail:?}");
        assert!(tail.len() <= 20, "{name}: {} lines shown", tail.len());
        // A bound far above the check's own few MiB, far below the log.
        assert!(
            peak_kb < 40 * 1024,
            "{name}: zot ext check peaked at {peak_kb} kB reading a 100 MB stderr"
        );
    }
}

/// 200,000 commands in one write: the check applies the host's caps
/// (10,000 names per kind, the rest ignored) and finishes.
#[test]
fn a_flood_of_registrations_is_capped_like_the_host_does() {
    let t = TempDir::new("check-flood");
    let script = "printf '%s\\n' '{\"type\":\"hello\",\"name\":\"flood\"}'; \
        i=0; while [ $i -lt 200000 ]; do \
        printf '{\"type\":\"register_command\",\"name\":\"c%d\",\"description\":\"d\"}\\n' $i; \
        i=$((i+1)); done > cmds; \
        read ack; cat cmds; echo '{\"type\":\"ready\"}'; \
        while read line; do case $line in *shutdown*) \
        echo '{\"type\":\"shutdown_ack\"}'; exit 0;; esac; done";
    let dir = sh_ext(&t, "flood", script);
    // Quadratic checks took minutes here: a deadline, not a hang.
    let home = TempDir::new("check-flood-home");
    let mut cmd = zot();
    cmd.args(["ext", "check", "--json"])
        .arg(&dir)
        .env("ZOT_HOME", home.path())
        .env("ZOT_STARTUP_TIMEOUT", "60")
        .stderr(std::process::Stdio::null());
    let (mut child, _stdin, lines) = common::spawn_piped(&mut cmd);
    let (_, ended) = common::exit_within(&mut child, 6 * common::DEADLINE);
    assert!(
        ended,
        "zot ext check did not finish 200,000 registrations within 120 s"
    );
    let stdout: String = lines.iter().collect();
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("--json printed no JSON object ({e}): {stdout}"));
    let commands: Vec<_> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| {
            c["rule"]
                .as_str()
                .is_some_and(|r| r.starts_with("command /"))
        })
        .collect();
    assert!(
        commands.len() <= 10_001,
        "{} command findings: the host's cap is 10,000 names",
        commands.len()
    );
    assert_finding(&report, "registrations", "warn", "more than 10000 commands");
    assert_finding(&report, "shutdown", "pass", "shutdown_ack");
}

/// Only registrations that arrive after the startup grace are names
/// the host's startup leaves out: a `ready` after the grace, with every
/// name in before it (a slow start on a busy machine), is no warning,
/// and the measured time is said either way.
#[test]
fn the_startup_grace_warning_is_about_late_registrations() {
    let t = TempDir::new("check-grace");
    let hello = |name| format!(r#"sleep 1; echo '{{"type":"hello","name":"{name}"}}'; read ack"#);
    let reg = r#"echo '{"type":"register_command","name":"hi","description":"hi command"}'"#;
    let rest = r#"echo '{"type":"ready"}'; while read line; do case $line in *shutdown*)
        echo '{"type":"shutdown_ack"}'; exit 0;; esac; done"#;
    let grace = [("ZOT_STARTUP_TIMEOUT", "2".as_ref())];
    // Names at about 1 s, ready at about 2.5 s: after the 2 s grace.
    let early = sh_ext(
        &t,
        "early",
        &format!("{}; {reg}; sleep 1.5; {rest}", hello("early")),
    );
    let (code, report) = check_json_with(&early, &["--strict"], &grace);
    assert_eq!(code, 0, "{report:#}");
    assert_finding(&report, "ready", "pass", "after it was started");
    // Names and ready at about 2.5 s: the host's startup is over by then.
    let late = sh_ext(
        &t,
        "late",
        &format!("{}; sleep 1.5; {reg}; {rest}", hello("late")),
    );
    let (code, report) = check_json_with(&late, &["--strict"], &grace);
    assert_eq!(code, 1, "{report:#}");
    assert_finding(&report, "ready", "pass", "after it was started");
    assert_finding(&report, "ready", "warn", "registered");
}
