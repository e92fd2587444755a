//! MCP servers as extensions (docs/PROTOCOL.md#mcp-servers), against real servers nobody
//! here wrote: `@modelcontextprotocol/server-everything` (TypeScript SDK,
//! legacy era) and a server written with the official Python SDK 2.x
//! (stateless 2026-07-28 era), both installed by `.ci/mcp-deps`; plus a
//! hand-written fixture for the corners (pagination, refused server
//! requests, log levels, cancellation, a server that never answers).

#![cfg(feature = "mcp")]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use zot_host::HostEvent;

/// The Python SDK 2.x server of fixtures/mcp-servers/py2.
fn py2_server(dir: &Path) -> PathBuf {
    let python = mcp_deps().join("py2/bin/python");
    let script = fixture_path("mcp-servers/py2/server.py");
    mcp_manifest(
        dir,
        "py2",
        &python,
        &[script.to_str().expect("utf-8")],
        json!({}),
    )
}

fn corners(dir: &Path, args: &[&str]) -> PathBuf {
    let python = which("python3");
    let script = fixture_path("mcp-servers/corners.py");
    let mut argv = vec![script.to_str().expect("utf-8")];
    argv.extend(args);
    mcp_manifest(dir, "corners", &python, &argv, json!({}))
}

/// How long an SDK server may take to start: importing an SDK on a busy
/// 2-core machine can outlast the 10 s hello limit, which is not what
/// these tests are about.
const SDK_START: Duration = Duration::from_secs(60);

/// How long the `server/discover` probe may go unanswered
/// (`$ZOT_MCP_PROBE_TIMEOUT`) where its expiry is what a test waits for;
/// the default, 3 s (docs/PROTOCOL.md#timeouts), is checked by mcp_client's unit
/// tests.
const SHORT_PROBE: &str = "0.5";
const SHORT_PROBE_TEXT: &str = "no answer within 500 ms; trying the legacy initialize";

/// `zot rpc --no-ext -e ...` (as `Rpc::start`) with `--hello-timeout`
/// set to [`SDK_START`].
fn patient_rpc(t: &TempDir, exts: &[PathBuf]) -> Rpc {
    Rpc::spawn(&mut patient_cmd(t, exts))
}

/// The command [`patient_rpc`] runs.
fn patient_cmd(t: &TempDir, exts: &[PathBuf]) -> Command {
    let mut cmd = Rpc::command(t, exts);
    cmd.arg("--hello-timeout")
        .arg(SDK_START.as_secs().to_string());
    cmd
}

/// Polls `list` until extension `name` is ready (the SDK servers may
/// take longer than the 3 s startup grace on a busy machine, up to
/// [`SDK_START`]); returns that list response's data.
fn until_ready(rpc: &mut Rpc, name: &str) -> Value {
    let mut n = 0;
    poll_until(SDK_START + DEADLINE, || {
        n += 1;
        let last = rpc.call(&format!("ready-{n}"), json!({"type": "list"}))["data"].clone();
        let ext = last["extensions"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == name).cloned());
        let state = ext.as_ref().map(|e| e["state"].clone());
        assert_ne!(state, Some(json!("failed")), "{name} failed: {last}");
        if state == Some(json!("ready")) {
            Ok(last)
        } else {
            Err(format!("{name} not ready: {last}"))
        }
    })
}

fn tool_info<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["tools"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no tool {name} in {list}"))
}

fn tool_call(rpc: &mut Rpc, id: &str, name: &str, args: Value) -> Value {
    rpc.call(id, json!({"type": "tool_call", "name": name, "args": args}))
}

fn run_command(rpc: &mut Rpc, id: &str, name: &str, args: &str) -> Value {
    rpc.call(id, json!({"type": "command", "name": name, "args": args}))
}

fn first_text(response: &Value) -> String {
    response["data"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text block in {response}"))
        .to_string()
}

#[test]
fn everything_server_tools_prompts_and_notes_through_rpc() {
    let t = TempDir::new("mcp-everything");
    let ev = everything_server(&t.join("ev"));
    // Its simulated logging keeps node running past `shutdown`: the end
    // below would wait out the 2 s shutdown grace.
    let mut rpc = Rpc::spawn(patient_cmd(&t, &[ev]).env("ZOT_SHUTDOWN_GRACE", SHORT_STOP));
    let list = until_ready(&mut rpc, "everything");

    // Tools arrive with their schemas and the prefix.
    let echo = tool_info(&list, "ev_echo");
    assert_eq!(echo["extension"], "everything");
    assert_eq!(echo["description"], "Echoes back the input string");
    assert_eq!(echo["schema"]["required"], json!(["message"]));
    assert!(tool_info(&list, "ev_get-sum")["schema"]["properties"]["a"].is_object());
    let ext = &list["extensions"][0];
    assert_eq!(ext["version"], "2.0.0", "serverInfo.version: {ext}");
    assert!(!list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "echo"));

    // Calls and results: text, image, structured content.
    let r = tool_call(&mut rpc, "1", "ev_echo", json!({"message": "hi there"}));
    assert_eq!(first_text(&r), "Echo: hi there", "{r}");
    assert_eq!(r["data"]["is_error"], false);
    let r = tool_call(&mut rpc, "2", "ev_get-sum", json!({"a": 2, "b": 3}));
    assert!(first_text(&r).contains("is 5"), "{r}");
    let r = tool_call(&mut rpc, "3", "ev_get-tiny-image", json!({}));
    let image = r["data"]["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "image"))
        .unwrap_or_else(|| panic!("no image block: {r}"));
    assert_eq!(image["mime_type"], "image/png");
    assert!(image["data"]
        .as_str()
        .is_some_and(|d| d.starts_with("iVBOR")));
    let r = tool_call(
        &mut rpc,
        "4",
        "ev_get-structured-content",
        json!({"location": "New York"}),
    );
    let weather: Value = serde_json::from_str(&first_text(&r)).expect("JSON text");
    assert!(weather["temperature"].is_number(), "{r}");
    // A tool error from the server (bad arguments) is an error result.
    let r = tool_call(&mut rpc, "5", "ev_echo", json!({"wrong": 1}));
    assert_eq!(r["data"]["is_error"], true, "{r}");

    // Prompts are commands: without arguments, with key=value pairs,
    // with a JSON object; a missing required argument is named.
    let r = run_command(&mut rpc, "6", "ev_simple-prompt", "ignored words");
    assert_eq!(r["data"]["action"], "prompt");
    assert_eq!(
        r["data"]["prompt"],
        "This is a simple prompt without arguments."
    );
    let r = run_command(
        &mut rpc,
        "7",
        "ev_args-prompt",
        r#"city="San Francisco" state=CA"#,
    );
    assert_eq!(
        r["data"]["prompt"], "What's weather in San Francisco, CA?",
        "{r}"
    );
    let r = run_command(&mut rpc, "8", "ev_args-prompt", r#"{"city": "Paris"}"#);
    assert_eq!(r["data"]["prompt"], "What's weather in Paris?", "{r}");
    let r = run_command(&mut rpc, "9", "ev_args-prompt", "state=CA");
    let error = r["data"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("missing required argument `city`"), "{r}");
    let commands = &list["commands"];
    assert!(
        commands
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "ev_args-prompt"
                && c["description"]
                    == "A prompt with two arguments, one required and one optional"),
        "{commands}"
    );

    // Log messages are notes.
    tool_call(&mut rpc, "10", "ev_toggle-simulated-logging", json!({}));
    let note = rpc.until("a note from the server", |v| {
        v["type"] == "notify" && v["extension"] == "everything"
    });
    assert!(
        note["message"]
            .as_str()
            .unwrap_or_default()
            .contains("message"),
        "{note}"
    );
    assert!(["info", "warn", "error"].contains(&note["level"].as_str().unwrap_or_default()));

    // A legacy server: it refuses server/discover and the host falls
    // back to initialize; when node starts slower than the 3 s probe
    // limit (a busy machine), the host falls back at that limit instead.
    let log = log_of(&t, "everything");
    let refused = log.contains("using the legacy initialize (2025-11-25)");
    let slow = log.contains("server/discover: no answer within 3 s; trying the legacy initialize");
    assert!(
        (refused || slow) && log.contains("speaking MCP 2025-11-25 (initialize)"),
        "{log}"
    );
    // It announced a list change after `initialized`: the host listed again.
    assert!(log.contains("tools changed: listing it again"), "{log}");

    // Shutdown: stdin closed, the server exits, nothing is left running.
    let pid = ext["pid"].as_u64().expect("pid") as u32;
    rpc.call("11", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    assert!(
        process_gone(pid),
        "server-everything (pid {pid}) outlived the host"
    );
}

#[test]
fn a_guard_blocks_an_mcp_tool_and_sees_its_tool_call_event() {
    let t = TempDir::new("mcp-guard");
    let record = t.join("guard.jsonl");
    // A plain zot extension (higher precedence) guards every tool.
    let guard = ext_dir(
        &t.join("guard"),
        "guard",
        json!({"register": [subscribe(&["tool_call"], &["tool_call"])],
               "guard": {"block_if": "forbidden", "reason": "no forbidden words"},
               "record": record}),
    );
    let ev = everything_server(&t.join("ev"));
    let mut rpc = patient_rpc(&t, &[guard, ev]);
    until_ready(&mut rpc, "everything");
    // On a busy machine the guard may start after the startup grace too:
    // its subscription counts only once it arrives (docs/PROTOCOL.md#readiness).
    until_ready(&mut rpc, "guard");
    let r = tool_call(
        &mut rpc,
        "1",
        "ev_echo",
        json!({"message": "forbidden fruit"}),
    );
    assert_eq!(r["data"]["blocked"], true, "{r}");
    assert_eq!(r["data"]["reason"], "no forbidden words");
    let r = tool_call(&mut rpc, "2", "ev_echo", json!({"message": "fine"}));
    assert_eq!(first_text(&r), "Echo: fine", "{r}");
    let events: Vec<Value> = recorded(&record)
        .into_iter()
        .filter(|f| f["type"] == "event" && f["event"] == "tool_call")
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1]["tool_name"], "ev_echo");
    assert_eq!(events[1]["tool_args"], json!({"message": "fine"}));
}

#[test]
fn python_sdk_server_in_the_stateless_era() {
    let t = TempDir::new("mcp-py2");
    let py = py2_server(&t.join("py2"));
    let mut rpc = patient_rpc(&t, &[py]);
    let list = until_ready(&mut rpc, "py2");
    let add = tool_info(&list, "add");
    assert_eq!(add["description"], "Adds two integers");
    assert_eq!(add["schema"]["required"], json!(["a", "b"]));
    assert_eq!(list["extensions"][0]["version"], "1.0.0");
    let log = log_of(&t, "py2");
    assert!(
        log.contains("speaking MCP 2026-07-28 (server/discover)"),
        "{log}"
    );
    assert!(log.contains("subscriptions/listen acknowledged"), "{log}");

    let r = tool_call(&mut rpc, "1", "add", json!({"a": 2, "b": 40}));
    assert_eq!(first_text(&r), "42", "{r}");
    // Its log message (opted in through _meta) is a note, warning -> warn.
    let r = tool_call(&mut rpc, "2", "chatty", json!({"text": "yo"}));
    assert_eq!(first_text(&r), "said");
    let note = rpc.until("chatty's note", |v| v["type"] == "notify");
    assert_eq!(
        (&note["level"], &note["message"]),
        (&json!("warn"), &json!("chatty says yo"))
    );

    // A single-argument prompt takes the whole text; the host names a
    // missing required argument (the SDK would say "Internal server error").
    let r = run_command(&mut rpc, "3", "greet", "  Ann Lee ");
    assert_eq!(r["data"]["prompt"], "Please greet Ann Lee warmly.", "{r}");
    let r = run_command(&mut rpc, "4", "greet", "");
    assert!(
        r["data"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("`name`"),
        "{r}"
    );

    // A change announced on the listen stream updates the registrations.
    tool_call(&mut rpc, "5", "grow", json!({}));
    let mut n = 0;
    wait_for("the tool `extra` to be registered", || {
        n += 1;
        let list = rpc.call(&format!("l{n}"), json!({"type": "list"}));
        list["data"]["tools"]
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t["name"] == "extra"))
    });
    let r = tool_call(&mut rpc, "6", "extra", json!({}));
    assert_eq!(first_text(&r), "extra here", "{r}");
}

#[test]
fn a_response_that_is_not_one_fails_its_call_at_once() {
    let t = TempDir::new("mcp-broken-response");
    let c = corners(&t.join("c"), &[]);
    // The tool timeout is far beyond the test's deadline: only the
    // broken response itself can end these calls in time.
    let mut rpc = Rpc::spawn(Rpc::command(&t, &[c]).args(["--tool-timeout", "600"]));
    until_ready(&mut rpc, "corners");
    for (id, respond, why) in [
        ("1", json!({}), "`result` or `error`"),
        (
            "2",
            json!({"jsonrpc": "1.0", "result": {}}),
            "`jsonrpc` must be",
        ),
    ] {
        let r = tool_call(&mut rpc, id, "t1", json!({"respond": respond}));
        assert_eq!(r["data"]["is_error"], true, "{r}");
        let text = first_text(&r);
        for part in [
            "MCP server \"corners\"",
            "invalid response to request",
            why,
            "\"id\":",
        ] {
            assert!(text.contains(part), "{part:?} not in {text:?}");
        }
    }
    // The server goes on serving.
    let r = tool_call(&mut rpc, "3", "t2", json!({"n": 1}));
    assert_eq!(first_text(&r), r#"t2 ran with {"n": 1}"#);
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn corners_pagination_refusals_log_levels_cancellation_and_removal() {
    let t = TempDir::new("mcp-corners");
    let c = corners(&t.join("c"), &[]);
    let mut rpc = Rpc::spawn(Rpc::command(&t, &[c]).args(["--tool-timeout", "2.5"]));
    let list = until_ready(&mut rpc, "corners");
    // Every page of both lists.
    let tools: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        tools,
        ["ask", "logs", "shrink", "slow", "t1", "t2", "t3", "t4", "t5", "whoami"]
    );
    let commands: Vec<&str> = list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(commands, ["p_none", "p_one", "p_two"]);
    assert_eq!(
        list["commands"][0]["description"], "No arguments",
        "title as description"
    );

    // The handshake it saw: the probe with the 2026 envelope, then initialize.
    let who: Value =
        serde_json::from_str(&first_text(&tool_call(&mut rpc, "1", "whoami", json!({})))).unwrap();
    let meta = &who["discover"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert_eq!(
        meta["io.modelcontextprotocol/clientCapabilities"],
        json!({})
    );
    assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "zot");
    let init = &who["initialize"];
    assert_eq!(
        (&init["protocolVersion"], &init["capabilities"]),
        (&json!("2025-11-25"), &json!({}))
    );
    assert_eq!(init["clientInfo"]["name"], "zot");

    // Requests from the server: refused with -32601, except ping.
    for (id, method) in [
        ("2", "sampling/createMessage"),
        ("3", "elicitation/create"),
        ("4", "roots/list"),
    ] {
        let r = tool_call(&mut rpc, id, "ask", json!({"method": method}));
        let answer: Value = serde_json::from_str(&first_text(&r)).unwrap();
        assert_eq!(answer["error"]["code"], -32601, "{method}: {r}");
    }
    let r = tool_call(&mut rpc, "5", "ask", json!({"method": "ping"}));
    assert_eq!(first_text(&r), r#"{"result": {}}"#);

    // Log levels map to note levels; logger prefixes the message.
    tool_call(&mut rpc, "6", "logs", json!({}));
    let mut notes = Vec::new();
    while notes.len() < 7 {
        let v = rpc.until("notes", |v| v["type"] == "notify" && !notes.contains(v));
        notes.push(v);
    }
    let got: Vec<(String, String)> = notes
        .iter()
        .map(|n| {
            (
                n["level"].as_str().unwrap().into(),
                n["message"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("info", "corners: debug line"),
        ("info", "corners: info line"),
        ("info", "corners: notice line"),
        ("warn", "corners: warning line"),
        ("error", "corners: error line"),
        ("error", "corners: critical line"),
        ("error", r#"{"n":1}"#),
    ];
    assert_eq!(got, want.map(|(l, m)| (l.to_string(), m.to_string())));
    let log = log_of(&t, "corners");
    assert!(
        log.contains("dropped MCP message (expected value"),
        "the stray line: {log}"
    );

    // Prompt arguments: JSON values as text, key=value pairs, and only
    // the user messages' text.
    let r = run_command(&mut rpc, "7", "p_two", r#"{"a": 1, "b": [true]}"#);
    assert_eq!(
        r["data"]["prompt"], "p_two {\"a\": \"1\", \"b\": \"[true]\"}\n\nsecond part",
        "{r}"
    );
    let r = run_command(&mut rpc, "8", "p_two", "b=2");
    assert!(r["data"]["error"]
        .as_str()
        .unwrap_or_default()
        .contains("missing required argument `a`"));
    let r = run_command(&mut rpc, "9", "p_none", "anything");
    assert_eq!(r["data"]["prompt"], "p_none {}\n\nsecond part");

    // A tool that never answers: the host's timeout, then the server is
    // told with notifications/cancelled for that request.
    let r = tool_call(&mut rpc, "10", "slow", json!({}));
    assert_eq!(r["success"], false, "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("did not answer tool slow within 2500 ms"),
        "{r}"
    );
    wait_for("the cancellation to reach the server", || {
        log_of(&t, "corners").contains("cancelled: {")
    });
    let who: Value =
        serde_json::from_str(&first_text(&tool_call(&mut rpc, "11", "whoami", json!({})))).unwrap();
    assert_eq!(who["cancelled"].as_array().map(Vec::len), Some(1), "{who}");

    // A tool leaving the list leaves the registry.
    tool_call(&mut rpc, "12", "shrink", json!({}));
    let mut n = 0;
    wait_for("t5 to be unregistered", || {
        n += 1;
        let l = rpc.call(&format!("l{n}"), json!({"type": "list"}));
        l["data"]["tools"]
            .as_array()
            .is_some_and(|a| !a.iter().any(|t| t["name"] == "t5"))
    });
    let r = tool_call(&mut rpc, "13", "t5", json!({}));
    assert_eq!(r["success"], false, "{r}");
    let r = tool_call(&mut rpc, "14", "t4", json!({"n": 4}));
    assert_eq!(first_text(&r), r#"t4 ran with {"n": 4}"#);

    // A reload stops it (stdin closed) and starts it afresh: all five again.
    let pid = list["extensions"][0]["pid"].as_u64().expect("pid") as u32;
    let r = rpc.call("15", json!({"type": "reload"}));
    assert_eq!(
        (&r["data"]["stopped"], &r["data"]["loaded"]),
        (&json!(1), &json!(1)),
        "{r}"
    );
    assert!(
        process_gone(pid),
        "the first corners process outlived the reload"
    );
    // It left on its own when its stdin closed: no SIGTERM was needed.
    let log = log_of(&t, "corners");
    assert!(
        log.contains("exited (exit code 0)") && !log.contains("SIGTERM"),
        "{log}"
    );
    let list = until_ready(&mut rpc, "corners");
    tool_info(&list, "t5");
    let r = tool_call(&mut rpc, "16", "t5", json!({}));
    assert_eq!(first_text(&r), "t5 ran with {}");
}

#[test]
fn a_server_that_never_answers_initialize_fails_alone() {
    let t = TempDir::new("mcp-mute");
    let mute = corners(&t.join("mute"), &["mute"]);
    let good = ext_dir(
        &t.join("good"),
        "good",
        json!({"register": [command("ok")],
               "commands": {"ok": {"action": "display", "display": "fine"}}}),
    );
    let mut cfg = config(&t, &[mute, good]);
    // The probe gets half a second, initialize the rest.
    cfg.timeouts.mcp_probe = Duration::from_millis(500);
    cfg.timeouts.hello = Duration::from_secs(3);
    let host = start(cfg);
    assert_eq!(display_of(&host, "ok").as_deref(), Some("fine"));
    let failed = wait_event(&host, "extension_failed", |e| {
        matches!(e, HostEvent::ExtensionFailed { .. })
    });
    let HostEvent::ExtensionFailed { extension, error } = failed else {
        unreachable!()
    };
    assert_eq!(extension, "corners");
    assert!(error.contains("no hello within 3 s"), "{error}");
    let log = log_of(&t, "corners");
    assert!(
        log.contains(&format!("server/discover: {SHORT_PROBE_TEXT}")),
        "{log}"
    );
    assert!(log.contains("mute: ignoring initialize"), "{log}");
    assert_eq!(display_of(&host, "ok").as_deref(), Some("fine"));
    host.shutdown();
}

#[test]
fn the_session_runs_mcp_prompts_and_tools() {
    let t = TempDir::new("mcp-session");
    let ev = everything_server(&t.join("ev"));
    let mut cmd = zot();
    cmd.args(["--no-ext", "--hello-timeout", "60", "-e"])
        .arg(&ev)
        .arg("--cwd")
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .env("NO_COLOR", "1");
    let (mut child, stdin, lines) = spawn_piped(&mut cmd);
    let mut stdin = stdin.expect("stdin");
    use std::io::Write;
    let mut seen = String::new();
    let mut read_until =
        |want: &str, resend: Option<&str>, stdin: &mut std::process::ChildStdin| {
            poll_until(DEADLINE, || {
                if !seen.contains(want) {
                    if let Some(line) = resend {
                        writeln!(stdin, "{line}").expect("write");
                    }
                    while let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
                        seen.push_str(&line);
                        seen.push('\n');
                    }
                }
                match seen.contains(want) {
                    true => Ok(()),
                    false => Err(format!("no {want:?} in session output: {seen}")),
                }
            })
        };
    // Ask until the server's tools are in (startup may outlast the grace).
    read_until("ev_echo", Some("/tools"), &mut stdin);
    writeln!(stdin, "/ev_args-prompt city=Paris").expect("write");
    read_until("What's weather in Paris?", None, &mut stdin);
    writeln!(stdin, "/call ev_echo {{\"message\": \"from the session\"}}").expect("write");
    read_until("Echo: from the session", None, &mut stdin);
    writeln!(stdin, "/quit").expect("write");
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}: {seen}");
}

#[test]
fn zot_ext_list_shows_protocol_and_prefix() {
    let t = TempDir::new("mcp-list");
    let home = t.join("home");
    everything_server(&home.join("extensions/everything"));
    let out = zot()
        .args(["ext", "list", "--json", "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", &home)
        .output()
        .expect("run zot ext list");
    assert!(out.status.success(), "{out:?}");
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (&rows[0]["protocol"], &rows[0]["prefix"]),
        (&json!("mcp"), &json!("ev_")),
        "{rows}"
    );
    assert_eq!(rows[0]["status"], "ok");
    // Another protocol makes the manifest invalid, naming the field.
    std::fs::write(
        home.join("extensions/everything/extension.json"),
        r#"{"name": "everything", "exec": "node", "protocol": "grpc"}"#,
    )
    .expect("write");
    let out = zot()
        .args(["ext", "list", "--json", "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", &home)
        .output()
        .expect("run zot ext list");
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let status = rows[0]["status"].as_str().unwrap_or_default();
    assert!(
        status.starts_with("invalid:") && status.contains("`protocol`"),
        "{rows}"
    );
}

#[test]
fn zot_mcp_serves_an_mcp_server_behind_zot_guards() {
    let t = TempDir::new("mcp-bridge");
    let ev = everything_server(&t.join("ev"));
    let clients = fixture_path("mcp-clients");
    let guard = clients.join("exts/guard");
    let args = json!(["mcp", "--no-ext", "--cwd", t.path(), "-e", guard, "-e", ev]);
    let python = mcp_deps().join("py2/bin/python");
    let out = Command::new(&python)
        .arg(clients.join("bridge_client.py"))
        .env("ZOT_BIN", env!("CARGO_BIN_EXE_zot"))
        .env("ZOT_MCP_ARGS", args.to_string())
        .env("ZOT_HELLO_TIMEOUT", SDK_START.as_secs().to_string())
        .env("ZOT_HOME", t.join("home"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let steps = [
        "tools/list",
        "tools/call",
        "guard block",
        "image",
        "prompts",
    ];
    assert_client_passed("bridge_client.py", out.status, &out, &steps);
}

#[test]
fn timeout_options_want_a_positive_number_of_seconds() {
    for (option, value) in [
        ("--tool-timeout", "abc"),
        ("--command-timeout", "0"),
        ("--tool-timeout", "-1"),
    ] {
        let out = zot()
            .args(["rpc", "--no-ext", option, value])
            .output()
            .expect("run zot rpc");
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(option) && stderr.contains("positive number of seconds"),
            "{stderr}"
        );
    }
}

/// `zot rpc` with fixtures/mcp-servers/hostile.py misbehaving as `mode`
/// says (`more`: its further arguments); not restarted, so a failure
/// stays visible.
fn hostile_rpc(t: &TempDir, mode: &str, more: &[&Path]) -> Rpc {
    Rpc::spawn(&mut hostile_cmd(t, mode, more))
}

/// The command [`hostile_rpc`] runs.
fn hostile_cmd(t: &TempDir, mode: &str, more: &[&Path]) -> Command {
    let python = which("python3");
    let script = fixture_path("mcp-servers/hostile.py");
    let mut args = vec![script.to_str().expect("utf-8"), mode];
    args.extend(more.iter().map(|p| p.to_str().expect("utf-8")));
    let restart = json!({"restart": "never"});
    let h = mcp_manifest(&t.join("h"), "hostile", &python, &args, restart);
    patient_cmd(t, &[h])
}

/// [`hostile_rpc`] for a server that leaves the probe unanswered: the
/// probe gets [`SHORT_PROBE`].
fn hostile_rpc_silent_probe(t: &TempDir, mode: &str, more: &[&Path]) -> Rpc {
    let mut cmd = hostile_cmd(t, mode, more);
    Rpc::spawn(cmd.env("ZOT_MCP_PROBE_TIMEOUT", SHORT_PROBE))
}

/// `rpc` once the server is ready listing the one tool `ok`.
fn ready_with_ok(mut rpc: Rpc) -> Rpc {
    let list = until_ready(&mut rpc, "hostile");
    assert_eq!(names(&list, "tools"), ["ok"], "{list}");
    rpc
}

/// [`hostile_rpc`], once the server is ready listing the one tool `ok`.
fn hostile_ready_with_ok(t: &TempDir, mode: &str, more: &[&Path]) -> Rpc {
    ready_with_ok(hostile_rpc(t, mode, more))
}

/// The server in `mode`, run by `rpc` ([`hostile_rpc`] or
/// [`hostile_rpc_silent_probe`]), refuses initialize: that refusal is the
/// reason it failed (`not`: the symptom it must not be).
fn fails_for_the_refused_initialize(
    rpc: fn(&TempDir, &str, &[&Path]) -> Rpc,
    mode: &str,
    not: &str,
) {
    let t = TempDir::new(&format!("mcp-{mode}"));
    let mut rpc = rpc(&t, mode, &[]);
    let failed = rpc.until("extension_failed", |v| v["type"] == "extension_failed");
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("initialize failed: MCP error -32603: boom: no licence key"),
        "{not}: {failed}"
    );
}

fn names(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_refused_initialize_is_the_reason_the_server_failed() {
    fails_for_the_refused_initialize(
        hostile_rpc,
        "init-error",
        "the user is told why the handshake failed, not a symptom",
    );
}

/// A refused initialize waits for the outstanding probe's answer (it
/// may still win), but only one more probe limit, not the whole hello
/// timeout (60 s here), and the reason stays the refusal.
#[test]
fn a_refused_initialize_with_a_silent_probe_fails_with_its_reason() {
    fails_for_the_refused_initialize(
        hostile_rpc_silent_probe,
        "silent-init-error",
        "failed for the refusal, not at the hello timeout",
    );
}

#[test]
fn bad_names_and_garbage_from_a_server_are_logged_and_dropped() {
    let t = TempDir::new("mcp-names");
    let mut rpc = hostile_rpc(&t, "names", &[]);
    let list = until_ready(&mut rpc, "hostile");
    assert_eq!(names(&list, "tools"), ["noisy"], "{list}");
    assert_eq!(names(&list, "commands"), ["fine"], "{list}");
    let log = log_of(&t, "hostile");
    for refused in [
        r#"rejected tool """#,
        r#"rejected tool "has space""#,
        r#"rejected tool "tab\there""#,
        r#"rejected command "two words""#,
    ] {
        assert!(log.contains(refused), "{refused}: {log}");
    }
    // Garbage, strangers' ids and a too-deep line before the answer:
    // the call is answered, twice, and each bad line is logged.
    for id in ["1", "2"] {
        let r = tool_call(&mut rpc, id, "noisy", json!({}));
        assert_eq!(first_text(&r), "noisy ran", "{r}");
    }
    let r = run_command(&mut rpc, "3", "fine", "");
    assert_eq!(r["data"]["prompt"], "fine", "{r}");
    let log = log_of(&t, "hostile");
    for dropped in [
        "dropped MCP message (expected value",
        "dropped MCP message (not a JSON object): [1,2]",
        "id 999 is unknown",
        r#"id "abc" is unknown"#,
        "nested deeper than",
    ] {
        assert!(log.contains(dropped), "{dropped}: {log}");
    }
}

#[test]
fn a_cursor_that_repeats_ends_the_listing() {
    let t = TempDir::new("mcp-cursor-loop");
    let _rpc = hostile_ready_with_ok(&t, "cursor-loop", &[]);
    let log = log_of(&t, "hostile");
    assert!(log.contains("repeated the cursor \"again\""), "{log}");
}

#[test]
fn a_2026_result_that_wants_input_is_an_error_result() {
    let t = TempDir::new("mcp-input-required");
    let mut rpc = hostile_rpc(&t, "input-required", &[]);
    let list = until_ready(&mut rpc, "hostile");
    // Its version from a top-level `serverInfo` (not in `_meta`).
    assert_eq!(list["extensions"][0]["version"], "0.2.0", "{list}");
    let r = tool_call(&mut rpc, "1", "ok", json!({}));
    assert_eq!(r["data"]["is_error"], true, "{r}");
    let text = first_text(&r);
    assert!(
        text.contains("input_required") && text.contains("elicitation/create"),
        "{r}"
    );
}

#[test]
fn hello_timeout_option_and_environment_set_the_handshake_limit() {
    for (how, value) in [("option", "1"), ("environment", "1")] {
        let t = TempDir::new("mcp-hello-timeout");
        let mute = corners(&t.join("mute"), &["mute"]);
        let mut cmd = zot();
        cmd.args(["rpc", "--no-ext", "--cwd"])
            .arg(t.path())
            .arg("-e")
            .arg(&mute)
            .env("ZOT_HOME", t.join("home"));
        match how {
            "option" => cmd.args(["--hello-timeout", value]),
            _ => cmd.env("ZOT_HELLO_TIMEOUT", value),
        };
        let mut rpc = Rpc::spawn(&mut cmd);
        let failed = rpc.until("extension_failed", |v| v["type"] == "extension_failed");
        assert_eq!(failed["error"], "no hello within 1 s", "{how}: {failed}");
    }
    for var in ["ZOT_HELLO_TIMEOUT", "ZOT_MCP_PROBE_TIMEOUT"] {
        let out = zot()
            .args(["rpc", "--no-ext"])
            .env(var, "soon")
            .output()
            .expect("run zot rpc");
        assert_eq!(out.status.code(), Some(2), "{var}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(var),
            "{out:?}"
        );
    }
}

#[test]
fn a_silent_discover_falls_back_to_initialize_and_shutdown_leaves_nothing() {
    let t = TempDir::new("mcp-silent-discover");
    let pids = t.join("pids");
    let rpc = hostile_rpc_silent_probe(&t, "silent-discover", &[&pids]);
    let mut rpc = ready_with_ok(rpc);
    let log = log_of(&t, "hostile");
    assert!(
        log.contains(&format!("server/discover: {SHORT_PROBE_TEXT}"))
            && log.contains("speaking MCP 2025-11-25 (initialize)"),
        "{log}"
    );
    let r = tool_call(&mut rpc, "1", "ok", json!({}));
    assert_eq!(first_text(&r), "ok ran", "{r}");
    let text = std::fs::read_to_string(&pids).expect("pid file");
    let pids: Vec<u32> = text
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    rpc.call("2", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    for pid in pids {
        wait_for(&format!("pid {pid} of the server's group to end"), || {
            process_gone(pid)
        });
    }
}

#[test]
fn a_late_discover_answer_wins_over_the_refused_initialize() {
    let t = TempDir::new("mcp-late-discover");
    let rpc = hostile_rpc_silent_probe(&t, "late-discover", &[]);
    let mut rpc = ready_with_ok(rpc);
    let log = log_of(&t, "hostile");
    assert!(
        log.contains("speaking MCP 2026-07-28 (server/discover)"),
        "{log}"
    );
    let r = tool_call(&mut rpc, "1", "ok", json!({}));
    assert_eq!(first_text(&r), "ok ran", "{r}");
}

#[test]
fn a_server_that_outlives_its_stdin_gets_sigterm_then_sigkill() {
    let t = TempDir::new("mcp-stubborn");
    let pid_file = t.join("pid");
    let mut rpc = hostile_rpc(&t, "stubborn", &[&pid_file]);
    until_ready(&mut rpc, "hostile");
    let pid = read_pid(&pid_file);
    rpc.call("1", json!({"type": "shutdown"}));
    assert_eq!(rpc.wait(), Some(0));
    assert!(
        process_gone(pid),
        "the stubborn server (pid {pid}) outlived the host"
    );
    let log = log_of(&t, "hostile");
    let order = [
        "stdin closed; staying anyway",
        "no exit within the shutdown grace: SIGTERM",
        "ignoring SIGTERM",
        "still running after SIGTERM: SIGKILL",
    ];
    let mut at = 0;
    for line in order {
        let found = log[at..].find(line);
        assert!(found.is_some(), "no {line:?} after byte {at}: {log}");
        at += found.unwrap_or_default();
    }
}

#[test]
fn pages_that_never_end_end_the_listing() {
    let t = TempDir::new("mcp-cursor-forever");
    let _rpc = hostile_ready_with_ok(&t, "cursor-forever", &[]);
    let log = log_of(&t, "hostile");
    assert!(
        log.contains("tools/list: stopped after 1000 pages"),
        "{log}"
    );
}

#[test]
fn notes_sent_before_the_handshake_ends_are_bounded() {
    let t = TempDir::new("mcp-early-notes");
    let mut rpc = hostile_rpc(&t, "early-notes", &[]);
    until_ready(&mut rpc, "hostile");
    // The last early note is kept (the oldest go first), and one more
    // request orders everything before it.
    rpc.until("the last early note", |v| {
        v["type"] == "notify" && v["message"] == "early 299"
    });
    rpc.call("1", json!({"type": "ping"}));
    let notes = rpc.seen.iter().filter(|v| v["type"] == "notify").count();
    assert_eq!(notes, 100, "held notes are capped");
    assert!(
        !rpc.seen.iter().any(|v| v["message"] == "early 0"),
        "the oldest are dropped"
    );
    let log = log_of(&t, "hostile");
    assert!(
        log.contains("dropped 200 notes sent before the handshake ended"),
        "{log}"
    );
}

/// Peak memory `zot rpc` may reach hosting a server that floods it (a
/// 16 MiB stdin backlog, registrations within their caps, the process).
const HOSTED_FLOOD_RSS_KB: u64 = 96 * 1024;

/// Waits until the hosted server's log has `needle`, failing as soon as
/// the host's peak memory passes [`HOSTED_FLOOD_RSS_KB`].
fn bounded_until_logged(t: &TempDir, rpc: &Rpc, needle: &str) {
    let pid = rpc.child.id();
    let limit = SDK_START + Duration::from_secs(60);
    wait_for_within(&format!("{needle:?} in the server's log"), limit, || {
        let peak = peak_rss_kb(pid).unwrap_or(0);
        assert!(
            peak < HOSTED_FLOOD_RSS_KB,
            "host peak RSS {peak} kB over {HOSTED_FLOOD_RSS_KB} kB"
        );
        log_of(t, "hostile").contains(needle)
    });
    eprintln!("host peak RSS {} kB", peak_rss_kb(pid).unwrap_or(0));
}

#[test]
fn a_server_flooding_requests_without_reading_is_not_read_either() {
    let t = TempDir::new("mcp-flood-requests");
    let mut rpc = hostile_rpc(&t, "flood-requests", &[]);
    bounded_until_logged(&t, &rpc, "not reading its stdin");
    // The host goes on serving.
    let pong = rpc.call("p", json!({"type": "ping"}));
    assert_eq!(pong["data"], json!({"pong": true}), "{pong}");
    let peak = peak_rss_kb(rpc.child.id()).unwrap_or(0);
    assert!(peak < HOSTED_FLOOD_RSS_KB, "host peak RSS {peak} kB");
}

/// A server whose `tools/list` pages never end, in `mode`: the listing
/// stops at the registration caps, which hold `names` tools.
fn paging_stops_at_the_caps(mode: &str, names: impl Fn(usize) -> bool) {
    let t = TempDir::new(&format!("mcp-{mode}"));
    let mut rpc = hostile_rpc(&t, mode, &[]);
    bounded_until_logged(&t, &rpc, "tools/list: stopped at the cap");
    let list = until_ready(&mut rpc, "hostile");
    let listed = list["tools"].as_array().map_or(0, Vec::len);
    assert!(names(listed), "{listed} tools registered");
    let log = log_of(&t, "hostile");
    assert!(!log.contains("stopped after 1000 pages"), "{log}");
}

#[test]
fn paged_tools_stop_at_the_name_cap() {
    paging_stops_at_the_caps("pages-of-names", |n| n == 10_000);
}

#[test]
fn paged_tools_stop_at_the_byte_cap() {
    // 16 MiB of 128 KiB descriptions.
    paging_stops_at_the_caps("pages-of-bytes", |n| (100..128).contains(&n));
}

#[test]
fn a_cancelled_call_reaches_a_hosted_server_as_notifications_cancelled() {
    let t = TempDir::new("mcp-hosted-cancel");
    let c = corners(&t.join("c"), &[]);
    let mut rpc = Rpc::start(&t, &[c]);
    until_ready(&mut rpc, "corners");
    rpc.send(json!({"type": "tool_call", "id": "s", "name": "slow", "args": {}}));
    wait_for("the server to get the call", || {
        log_of(&t, "corners").contains("will never be answered")
    });
    let r = rpc.call("c", json!({"type": "cancel", "target": "s"}));
    assert_eq!(r["data"], json!({"cancelled": true}), "{r}");
    assert_eq!(rpc.response("s")["error"], "cancelled");
    wait_for("notifications/cancelled at the server", || {
        log_of(&t, "corners").contains("cancelled by the host")
    });
    let who: Value =
        serde_json::from_str(&first_text(&tool_call(&mut rpc, "w", "whoami", json!({})))).unwrap();
    assert_eq!(who["cancelled"].as_array().map(Vec::len), Some(1), "{who}");
}

/// An extension directory `dir` for fixtures/mcp-servers/unreadable.py,
/// its `initialize` answered as `mode` says.
fn unreadable(dir: &Path, mode: &str) -> PathBuf {
    let python = which("python3");
    let script = fixture_path("mcp-servers/unreadable.py");
    let args = [script.to_str().expect("utf-8"), mode];
    mcp_manifest(
        dir,
        "unreadable",
        &python,
        &args,
        json!({"restart": "never"}),
    )
}

/// `zot rpc` with the unreadable server, once it is ready, with
/// `--tool-timeout SECS`; and that first list.
fn unreadable_rpc(t: &TempDir, timeout: &str) -> (Rpc, Value) {
    let u = unreadable(&t.join("u"), "");
    let mut rpc = Rpc::spawn(patient_cmd(t, &[u]).args(["--tool-timeout", timeout]));
    let list = until_ready(&mut rpc, "unreadable");
    (rpc, list)
}

#[test]
fn lone_surrogate_escapes_in_answers_read_as_the_replacement_character() {
    let t = TempDir::new("mcp-surrogates");
    let (mut rpc, list) = unreadable_rpc(&t, "600");
    let fname = tool_info(&list, "fname");
    assert_eq!(fname["description"], "file caf\u{fffd}.txt", "{fname}");
    let r = tool_call(&mut rpc, "1", "fname", json!({}));
    assert_eq!(r["data"]["is_error"], false, "{r}");
    assert_eq!(first_text(&r), "caf\u{fffd}.txt", "{r}");
}

#[test]
fn an_answer_too_deep_or_too_long_to_read_fails_its_call_at_once() {
    let t = TempDir::new("mcp-unreadable-answers");
    // Far beyond the test's deadline: only the dropped answer itself
    // can end these calls in time.
    let (mut rpc, _) = unreadable_rpc(&t, "600");
    let deep = tool_call(&mut rpc, "deep", "deep", json!({}));
    assert_eq!(deep["data"]["is_error"], true, "{deep}");
    let text = first_text(&deep);
    assert!(
        text.contains("could not be read") && text.contains("nested deeper than 64 levels"),
        "{deep}"
    );
    // Its `id` comes last, after 17 MiB.
    let huge = tool_call(&mut rpc, "huge", "huge", json!({}));
    assert_eq!(huge["data"]["is_error"], true, "{huge}");
    assert!(
        first_text(&huge).contains("over the 16 MiB frame limit"),
        "{huge}"
    );
    let ok = tool_call(&mut rpc, "ok", "ok", json!({}));
    assert_eq!(first_text(&ok), "ok", "the server is still served: {ok}");
}

#[test]
fn an_answer_too_costly_to_parse_fails_its_call_within_a_memory_limit() {
    let t = TempDir::new("mcp-costly-answer");
    let u = unreadable(&t.join("u"), "");
    // Its 16 MiB line of small objects would take over 1 GB to parse.
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--as={}", 1u64 << 30))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_zot"));
    let patient = patient_cmd(&t, &[u]);
    cmd.args(patient.get_args())
        .args(["--tool-timeout", "600"])
        .envs(patient.get_envs().filter_map(|(k, v)| Some((k, v?))))
        // One malloc arena: a thread's own arena reserves 64 MiB of
        // address space, which is not what this limit is about.
        .env("MALLOC_ARENA_MAX", "1");
    let mut rpc = Rpc::spawn(&mut cmd);
    until_ready(&mut rpc, "unreadable");
    let costly = tool_call(&mut rpc, "costly", "costly", json!({}));
    assert_eq!(costly["data"]["is_error"], true, "{costly}");
    let text = first_text(&costly);
    assert!(
        text.contains("could not be read") && text.contains("over the 256 MiB limit"),
        "{costly}"
    );
    let ok = tool_call(&mut rpc, "ok", "ok", json!({}));
    assert_eq!(first_text(&ok), "ok", "{ok}");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "the host lived through it");
}

#[test]
fn a_relist_left_unanswered_gives_way_to_the_next_one() {
    let t = TempDir::new("mcp-relist-deadline");
    let (mut rpc, _) = unreadable_rpc(&t, "2");
    let grow = tool_call(&mut rpc, "grow", "grow", json!({}));
    assert_eq!(first_text(&grow), "growing", "{grow}");
    // The first re-list is never answered; the second change waits for
    // it, and so does `grown`, until the first one's deadline.
    let mut n = 0;
    poll_until(DEADLINE, || {
        n += 1;
        let list = rpc.call(&format!("l{n}"), json!({"type": "list"}))["data"].clone();
        let tools = names(&list, "tools");
        match tools.iter().any(|t| t == "grown") {
            true => Ok(()),
            false => Err(format!("no `grown` yet: {tools:?}")),
        }
    });
    let log = log_of(&t, "unreadable");
    assert!(log.contains("no answer within 2 s"), "{log}");
}

#[test]
fn commands_that_differ_only_in_case_follow_the_server_list() {
    let t = TempDir::new("mcp-prompt-case");
    let (mut rpc, list) = unreadable_rpc(&t, "600");
    let commands = names(&list, "commands");
    assert_eq!(commands, ["Report"], "the first spelling is kept: {list}");
    let r = run_command(&mut rpc, "c0", "report", "");
    assert_eq!(r["data"]["prompt"], "ran Report", "{r}");
    let shrink = tool_call(&mut rpc, "shrink", "shrink", json!({}));
    assert_eq!(first_text(&shrink), "shrunk", "{shrink}");
    // Now the server lists `report` alone: it is registered.
    let mut n = 0;
    poll_until(DEADLINE, || {
        n += 1;
        let r = run_command(&mut rpc, &format!("c{n}"), "report", "");
        match r["data"]["prompt"] == "ran report" {
            true => Ok(()),
            false => Err(format!("not yet the new spelling: {r}")),
        }
    });
    let list = rpc.call("last", json!({"type": "list"}))["data"].clone();
    assert_eq!(names(&list, "commands"), ["report"], "{list}");
}

#[test]
fn a_server_answering_initialize_with_a_version_zot_does_not_speak_fails() {
    for (mode, named) in [("old-version", "\"1999-01-01\""), ("no-version", "(none)")] {
        let t = TempDir::new(&format!("mcp-{mode}"));
        let u = unreadable(&t.join("u"), mode);
        let mut rpc = Rpc::spawn(&mut patient_cmd(&t, &[u]));
        let failed = rpc.until("extension_failed", |v| v["type"] == "extension_failed");
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("protocolVersion {named}"))
                && error.contains("which zot does not speak"),
            "{mode}: {failed}"
        );
    }
}

#[test]
fn a_prefix_longer_than_64_bytes_makes_the_manifest_invalid() {
    let t = TempDir::new("mcp-long-prefix");
    let python = which("python3");
    let script = fixture_path("mcp-servers/unreadable.py");
    let prefix = "p".repeat(40 << 10);
    let args = [script.to_str().expect("utf-8")];
    let u = mcp_manifest(
        &t.join("u"),
        "unreadable",
        &python,
        &args,
        json!({"prefix": prefix}),
    );
    let (code, lines) = run_zot(&t, &["ext", "check", u.to_str().expect("utf-8")], "");
    let said = lines.join("\n");
    assert_ne!(code, Some(0), "{said}");
    assert!(
        said.contains("field `prefix` is 40960 bytes, longer than the 64 allowed"),
        "{said}"
    );
}
