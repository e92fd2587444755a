//! The interactive session (`zot [-e PATH]...`, docs/PROTOCOL.md#session) driven
//! through pipes: commands and their actions, `/call`, `/reload-ext`,
//! notes, panels, turns through `--agent-cmd`, Ctrl-C, EOF and SIGTERM.
//!
//! Nothing here sleeps to wait: a reader thread feeds stdout lines to a
//! channel and each step reads until the line it expects (or fails at
//! the deadline, showing everything seen).

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `line` with runs of whitespace made one space.
fn squash(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Lifecycle events an observer recorded, as `(event, frame)`.
fn events(path: &Path) -> Vec<(String, Value)> {
    frames(path, "event")
        .into_iter()
        .map(|f| (f["event"].as_str().unwrap_or("").to_string(), f))
        .collect()
}

/// An extension that records every event of a turn.
fn observer(t: &TempDir, rec: &Path) -> PathBuf {
    let events = [
        "session_start",
        "turn_start",
        "assistant_message",
        "turn_end",
        "tool_call",
    ];
    ext_dir(
        &t.join("o"),
        "o",
        json!({"record": rec, "register": [subscribe(&events, &[])]}),
    )
}

#[test]
fn host_commands_list_commands_tools_and_extensions() {
    let t = TempDir::new("sess-list");
    let weather = json!({"type": "register_tool", "name": "weather", "description": "weather now",
        "schema": {"type": "object", "properties": {"city": {"type": "string"},
                   "unit": {"enum": ["c", "f"]}}, "required": ["city"]}});
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [command("greet"), tool("echo"), weather]}),
    );
    let bad = t.join("bad");
    write_manifest_text(&bad, r#"{"name": "bad"}"#);
    let mut z = Zot::start(&t, &[a, bad], &[]);

    let help = z.run("/help");
    for host in [
        "/help",
        "/commands",
        "/tools",
        "/ext",
        "/call TOOL [JSON]",
        "/reload-ext",
    ] {
        assert!(
            help.iter().any(|l| l.trim_start().starts_with(host)),
            "{host} in {help:?}"
        );
    }
    assert!(
        help.contains(&"extension commands:".to_string()),
        "{help:?}"
    );
    let greet = help.iter().find(|l| l.contains("/greet")).expect("greet");
    assert!(greet.ends_with("greet command (a)"), "{greet}");

    let commands = z.run("/commands");
    assert_eq!(commands[0], "extension commands:");
    assert!(commands[1].contains("/greet") && commands[1].ends_with("(a)"));

    let tools = z.run("/tools");
    let tools: Vec<String> = tools.iter().map(|l| squash(l)).collect();
    assert_eq!(
        tools,
        [
            "tools:",
            "echo() echo tool (a)",
            r#"weather(city: string, unit?: "c"|"f") weather now (a)"#,
        ]
    );

    let exts = z.run("/ext");
    let a_line = exts
        .iter()
        .find(|l| l.starts_with("  a "))
        .expect("a listed");
    assert!(a_line.contains("explicit  ready  pid "), "{a_line}");
    let bad_line = exts
        .iter()
        .find(|l| l.starts_with("  bad "))
        .expect("bad listed");
    assert!(bad_line.contains("failed"), "{bad_line}");
    assert!(bad_line.contains("error: invalid manifest"), "{bad_line}");
    // The failure was also reported when it happened.
    assert!(
        z.seen
            .iter()
            .any(|l| l.starts_with("error: extension bad failed: invalid manifest")),
        "{:?}",
        z.seen
    );
}

#[test]
fn commands_with_each_action() {
    let t = TempDir::new("sess-actions");
    let rec = t.join("rec");
    let register = ["show", "ins", "ask", "bad", "quiet", "panel", "hollow"].map(command);
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({
            "record": rec,
            "register": register,
            "commands": {
                "show": {"action": "display", "display": "line one\nline two"},
                "ins": {"action": "insert", "insert": "draft text"},
                "ask": {"action": "prompt", "prompt": "what is up"},
                "bad": {"action": "prompt", "prompt": "partial", "error": "it broke"},
                "hollow": {"action": "prompt", "prompt": ""},
                "quiet": {"action": "noop"},
                "panel": {"action": "open_panel",
                          "open_panel": {"id": "p1", "title": "Pick", "lines": ["one", "two"],
                                         "footer": "arrows"}},
            },
        }),
    );
    let mut z = Zot::start(&t, &[a], &[]);

    assert_eq!(
        z.run("/show   with  args "),
        ["[/show] line one", "        line two"]
    );
    let invoked = frames(&rec, "command_invoked");
    assert_eq!(invoked[0]["name"], "show");
    assert_eq!(invoked[0]["args"], "with  args");

    assert_eq!(z.run("/ins"), ["insert: draft text"]);
    // Through a pipe an empty line does not accept the offer.
    assert_eq!(z.run(""), Vec::<String>::new());
    assert_eq!(
        z.run("/ask"),
        ["prompt: what is up", "would submit: what is up"]
    );
    // An error is shown and the action skipped; an empty prompt runs no
    // turn (both as upstream).
    assert_eq!(z.run("/bad"), ["error: it broke"]);
    assert_eq!(z.run("/hollow"), Vec::<String>::new());
    assert_eq!(z.run("/quiet"), Vec::<String>::new());
    #[cfg(feature = "panels")]
    panel_action(&mut z, &rec);
    // Without panels the command is answered, nothing is shown, and
    // `/key` names the feature.
    #[cfg(not(feature = "panels"))]
    {
        assert_eq!(z.run("/panel"), Vec::<String>::new());
        let key = z.run("/key down");
        let want = "error: /key: panels are not in this build: it needs the `panels` feature";
        assert!(key[0].starts_with(want), "{key:?}");
    }
}

/// `commands_with_each_action`'s `open_panel`, then keys to the panel.
#[cfg(feature = "panels")]
fn panel_action(z: &mut Zot, rec: &std::path::Path) {
    assert_eq!(
        z.run("/panel"),
        ["┌─ Pick [a/p1]", "│ one", "│ two", "└─ arrows"]
    );
    assert_eq!(z.run("/key down"), Vec::<String>::new());
    assert_eq!(z.run("/key a p1 rune x"), Vec::<String>::new());
    assert_eq!(z.run("/key q"), Vec::<String>::new());
    assert!(z.run("/key sideways")[0].starts_with("error: unknown key \"sideways\""));
    assert_eq!(z.run("/key close"), ["panel closed: a/p1"]);
    wait_for("3 panel_key frames", || frames(rec, "panel_key").len() == 3);
    let keys: Vec<Value> = frames(rec, "panel_key")
        .into_iter()
        .map(|mut f| {
            f.as_object_mut().unwrap().remove("type");
            f
        })
        .collect();
    assert_eq!(
        keys,
        [
            json!({"panel_id": "p1", "key": "down"}),
            json!({"panel_id": "p1", "key": "rune", "text": "x"}),
            json!({"panel_id": "p1", "key": "rune", "text": "q"}),
        ]
    );
    wait_for("panel_close frame", || {
        !frames(rec, "panel_close").is_empty()
    });
    assert_eq!(frames(rec, "panel_close")[0]["panel_id"], "p1");
    assert!(z.run("/key down")[0].starts_with("error: no open panel"));
}

#[test]
fn unknown_and_empty_commands() {
    let t = TempDir::new("sess-unknown");
    let a = ext_dir(&t.join("a"), "a", json!({"register": [command("known")]}));
    let mut z = Zot::start(&t, &[a], &[]);
    assert_eq!(z.run("/nope"), ["error: unknown command /nope"]);
    assert_eq!(z.run("/nope with args"), ["error: unknown command /nope"]);
    assert_eq!(z.run("/"), ["error: empty command (/help lists them)"]);
    assert_eq!(z.run("/call"), ["error: usage: /call TOOL [JSON]"]);
    // A known command still works afterwards.
    assert_eq!(z.run("/known"), Vec::<String>::new());
}

#[test]
fn notes_clear_notes_and_panels_arrive_while_idle() {
    let t = TempDir::new("sess-notes");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"on_ready": [{"type": "notify", "level": "warn", "message": "from a\nsecond line"}]}),
    );
    let b = ext_dir(
        &t.join("b"),
        "b",
        json!({"on_ready": [
            {"type": "notify", "level": "info", "message": "from b"},
            {"type": "notify", "message": "no level"},
            {"type": "clear_notes"},
            // Never opened (no open_panel): not shown (see tests/panels.rs).
            {"type": "panel_render", "panel_id": "p", "title": "Status", "lines": ["working"]},
            {"type": "panel_close", "panel_id": "p"},
            {"type": "notify", "message": "last"},
        ]}),
    );
    let mut z = Zot::start(&t, &[a, b], &[]);
    // No input sent: all of this arrives on its own (some of it maybe
    // before startup readiness is announced).
    z.saw("[b] info: last");
    z.saw("[a] warn: from a");
    z.saw("second line");
    let at = z.seen.iter().position(|l| l == "[a] warn: from a").unwrap();
    assert_eq!(z.seen[at + 1], "          second line");
    let b_lines: Vec<&String> = z
        .seen
        .iter()
        .filter(|l| {
            !l.starts_with("[a]") && !l.starts_with("ready:") && !l.ends_with("second line")
        })
        .collect();
    assert_eq!(
        b_lines,
        [
            "[b] info: from b",
            "[b] info: no level",
            "notes cleared for b (2 removed)",
            "[b] info: last",
        ]
    );
    // b's first notes are gone; a's note and b's last are still listed.
    z.send("/clear");
    z.expect("notes cleared (2 removed)");
    z.send("/clear");
    z.expect("notes cleared (0 removed)");
}

#[test]
fn call_runs_the_tool_pipeline_allowed_and_blocked() {
    let t = TempDir::new("sess-call");
    let rec = t.join("obs");
    let tools = ext_dir(
        &t.join("tools"),
        "tools",
        json!({
            "register": [tool("echo"), tool("fail"), tool("pic")],
            "tools": {
                "fail": {"content": [{"type": "text", "text": "bad input"}], "is_error": true},
                "pic": {"content": [{"type": "image", "mime_type": "image/png", "data": "aGk="}]},
            },
        }),
    );
    let guard = ext_dir(
        &t.join("g"),
        "g",
        json!({"register": [subscribe(&[], &["tool_call"])],
               "guard": {"block_if": "rm -rf", "reason": "dangerous: rm -rf"}}),
    );
    let obs = observer(&t, &rec);
    let mut z = Zot::start(&t, &[tools, guard, obs], &[]);

    assert_eq!(
        z.run(r#"/call echo {"cmd": "ls"}"#),
        [r#"result: {"cmd": "ls"}"#]
    );
    assert_eq!(z.run("/call echo"), ["result: {}"]);
    assert_eq!(
        z.run(r#"/call echo {"cmd": "rm -rf /"}"#),
        ["blocked: dangerous: rm -rf"]
    );
    assert_eq!(z.run("/call fail"), ["result error: bad input"]);
    assert_eq!(
        z.run("/call pic"),
        ["result: [image image/png, 4 bytes of base64]"]
    );
    assert_eq!(z.run("/call nope {}"), ["error: unknown tool nope"]);
    let bad = z.run("/call echo {not json");
    assert!(
        bad[0].starts_with("error: /call echo: invalid JSON"),
        "{bad:?}"
    );
    // Built-in tools are not run here, but events and guards see them.
    assert_eq!(
        z.run(r#"/call bash {"command":"rm -rf ~"}"#),
        ["blocked: dangerous: rm -rf"]
    );
    assert_eq!(
        z.run(r#"/call bash {"command":"ls"}"#),
        [r#"allowed: bash {"command":"ls"} (built-in tool: this session does not run it)"#]
    );

    // Events are delivered asynchronously; the last one tells us all arrived.
    wait_for("7 tool_call events", || events(&rec).len() == 7);
    let seen: Vec<Value> = events(&rec)
        .into_iter()
        .filter(|(e, _)| e == "tool_call")
        .map(|(_, f)| json!([f["tool_name"], f["tool_args"]]))
        .collect();
    assert_eq!(
        seen,
        [
            json!(["echo", {"cmd": "ls"}]),
            json!(["echo", {}]),
            json!(["echo", {"cmd": "rm -rf /"}]),
            json!(["fail", {}]),
            json!(["pic", {}]),
            json!(["bash", {"command": "rm -rf ~"}]),
            json!(["bash", {"command": "ls"}]),
        ]
    );
}

#[test]
fn reload_picks_up_a_changed_extension() {
    let t = TempDir::new("sess-reload");
    let dir = t.join("a");
    ext_dir(
        &dir,
        "a",
        json!({"register": [command("v1")], "commands": {"v1": {"action": "display", "display": "one"}}}),
    );
    let mut z = Zot::start(&t, std::slice::from_ref(&dir), &[]);
    assert_eq!(z.run("/v1"), ["[/v1] one"]);
    let old_pid = z.pid_of("a");

    ext_dir(
        &dir,
        "a",
        json!({"register": [command("v2")], "commands": {"v2": {"action": "display", "display": "two"}}}),
    );
    assert_eq!(
        z.run("/reload-ext"),
        ["reloaded: 1 stopped, 1 loaded (1 ready)"]
    );
    assert_eq!(z.run("/v2"), ["[/v2] two"]);
    assert_eq!(z.run("/v1"), ["error: unknown command /v1"]);
    assert!(process_gone(old_pid));
    assert_ne!(z.pid_of("a"), old_pid);

    // A broken manifest: the reload reports it.
    write_manifest_text(&dir, r#"{"name": "a"}"#);
    let out = z.run("/reload-ext");
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0], "reloaded: 1 stopped, 0 loaded (0 ready)");
    assert!(out[1].starts_with("error: a: invalid manifest"), "{out:?}");
}

#[test]
fn turn_through_agent_cmd_with_assistant_message_rewrite_and_block() {
    let t = TempDir::new("sess-turn");
    let (obs_rec, guard_rec) = (t.join("obs"), t.join("guard"));
    let guard = ext_dir(
        &t.join("g"),
        "g",
        json!({
            "record": guard_rec,
            "register": [subscribe(&[], &["assistant_message"])],
            "guard": {"block_if": "SECRET", "reason": "no secrets", "replace_text": "rewritten by g"},
        }),
    );
    let obs = observer(&t, &obs_rec);
    let agent = format!("tee -a {} | tr a-z A-Z", t.join("prompts").display());
    let mut z = Zot::start(&t, &[guard, obs], &["--agent-cmd", &agent]);

    assert_eq!(z.run("hello there"), ["assistant: rewritten by g"]);
    assert_eq!(z.run("tell me a secret"), ["blocked: no secrets"]);
    let prompts = std::fs::read_to_string(t.join("prompts")).unwrap();
    assert_eq!(prompts, "hello there\ntell me a secret\n");

    // The guard saw the agent's own text.
    let asked: Vec<Value> = frames(&guard_rec, "event_intercept")
        .into_iter()
        .map(|f| json!([f["event"], f["text"]]))
        .collect();
    assert_eq!(
        asked,
        [
            json!(["assistant_message", "HELLO THERE"]),
            json!(["assistant_message", "TELL ME A SECRET"]),
        ]
    );
    wait_for("two turn_end events", || {
        events(&obs_rec)
            .iter()
            .filter(|(e, _)| e == "turn_end")
            .count()
            == 2
    });
    let seen: Vec<Value> = events(&obs_rec)
        .into_iter()
        .map(|(e, f)| match e.as_str() {
            "turn_start" => json!([e, f["step"]]),
            "assistant_message" => json!([e, f["text"]]),
            "turn_end" => json!([e, f["stop"]]),
            _ => json!([e]),
        })
        .collect();
    assert_eq!(
        seen,
        [
            json!(["session_start"]),
            json!(["turn_start", 1]),
            json!(["assistant_message", "rewritten by g"]),
            json!(["turn_end", "end_turn"]),
            json!(["turn_start", 2]),
            json!(["turn_end", "end_turn"]),
        ]
    );
}

#[test]
fn turn_start_block_ends_the_turn_before_the_agent_runs() {
    let t = TempDir::new("sess-turnblock");
    let rec = t.join("obs");
    let guard = ext_dir(
        &t.join("g"),
        "g",
        json!({"register": [subscribe(&[], &["turn_start"])],
               "guard": {"block_events": ["turn_start"], "reason": "no turns today"}}),
    );
    let obs = observer(&t, &rec);
    let ran = t.join("ran");
    let agent = format!("touch {}; cat", ran.display());
    let mut z = Zot::start(&t, &[guard, obs], &["--agent-cmd", &agent]);
    assert_eq!(z.run("do something"), ["blocked: no turns today"]);
    assert!(!ran.exists(), "the agent command ran");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
    let names: Vec<String> = events(&rec).into_iter().map(|(e, _)| e).collect();
    assert_eq!(names, ["session_start"]);
}

#[test]
fn failing_agent_ends_the_turn_with_an_error() {
    let t = TempDir::new("sess-agentfail");
    let rec = t.join("obs");
    let obs = observer(&t, &rec);
    let mut z = Zot::start(&t, &[obs], &["--agent-cmd", "echo partial; exit 3"]);
    assert_eq!(z.run("hi"), ["error: agent command failed: exit code 3"]);
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
    let end = events(&rec)
        .into_iter()
        .find(|(e, _)| e == "turn_end")
        .map(|(_, f)| f)
        .unwrap();
    assert_eq!(end["stop"], "error");
    assert_eq!(end["error"], "exit code 3");
    assert!(!events(&rec).iter().any(|(e, _)| e == "assistant_message"));
}

#[test]
fn the_system_prompt_reaches_the_agent_in_a_file_and_in_the_environment_when_it_fits() {
    let t = TempDir::new("sess-promptfile");
    let obs = observer(&t, &t.join("obs"));
    let agent = r#"printf '%s|%s|%s' "$(cat "$ZOT_SYSTEM_PROMPT_FILE")" "${ZOT_SYSTEM_PROMPT-unset}" "$ZOT_SYSTEM_PROMPT_FILE""#;
    let args = ["--system-prompt", "You are terse.", "--agent-cmd", agent];
    let mut z = Zot::start(&t, std::slice::from_ref(&obs), &args);
    z.send("hi");
    let line = z.expect("assistant: ");
    let [file_text, env, path] = line["assistant: ".len()..].split('|').collect::<Vec<_>>()[..]
    else {
        panic!("three fields: {line}")
    };
    assert_eq!((file_text, env), ("You are terse.", "You are terse."));
    assert!(!Path::new(path).exists(), "{path} is left after the turn");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));

    // Over Linux's 128 KiB for one environment string (exec would fail
    // with E2BIG), within the 1 MiB a before_agent_start guard may give.
    let prompt = "p".repeat(200 * 1024);
    std::fs::write(t.join("prompt.txt"), &prompt).unwrap();
    let at = format!("@{}", t.join("prompt.txt").display());
    let agent = r#"printf '%s|%s' "$(($(wc -c < "$ZOT_SYSTEM_PROMPT_FILE")))" "${ZOT_SYSTEM_PROMPT-unset}""#;
    let mut z = Zot::start(&t, &[obs], &["--system-prompt", &at, "--agent-cmd", agent]);
    z.send("hi");
    assert_eq!(z.expect("assistant: "), "assistant: 204800|unset");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
}

#[test]
fn an_agent_answer_over_16_mib_stops_the_agent_and_fails_the_turn() {
    let t = TempDir::new("sess-agentflood");
    let rec = t.join("obs");
    let obs = observer(&t, &rec);
    let pid = t.join("agent.pid");
    // 17,000,000 bytes, then it would stay: only a kill ends the turn soon.
    let agent = format!(
        "echo $$ > {}; head -c 17000000 /dev/zero; sleep 60",
        pid.display()
    );
    let mut z = Zot::start(&t, &[obs], &["--agent-cmd", &agent]);
    assert_eq!(
        z.run("hi"),
        ["error: agent command failed: its output is over 16 MiB: stopped it"]
    );
    let pid = read_pid(&pid);
    wait_for("the agent command's group to be killed", || {
        process_gone(pid)
    });
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
    let names: Vec<String> = events(&rec).into_iter().map(|(e, _)| e).collect();
    assert!(
        !names.contains(&"assistant_message".to_string()),
        "{names:?}"
    );
    let end = events(&rec).into_iter().find(|(e, _)| e == "turn_end");
    let end = end.map(|(_, f)| f).expect("turn_end");
    assert_eq!(end["stop"], "error");
}

#[test]
fn eof_runs_queued_lines_then_shuts_extensions_down() {
    let t = TempDir::new("sess-eof");
    let rec = t.join("rec");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({
            "record": rec,
            "register": [command("slow"), command("fast")],
            "commands": {"slow": {"action": "display", "display": "slow done", "sleep_ms": 300},
                         "fast": {"action": "display", "display": "fast done"}},
        }),
    );
    let mut z = Zot::start(&t, &[a], &[]);
    let pid = z.pid_of("a");
    // Everything at once, then EOF: lines run in order, all of them.
    z.send("/slow");
    z.send("/fast");
    z.send("/nope");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0));
    let tail: Vec<&str> = z
        .seen
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "[/slow] slow done",
            "[/fast] fast done",
            "error: unknown command /nope"
        ]
    );
    assert!(process_gone(pid), "extension still running");
    let last = recorded(&rec).pop().unwrap();
    assert_eq!(last["type"], "shutdown");
}

#[test]
fn eof_while_work_is_pending_does_not_spin() {
    // stdin closes right after the line, before the host is even ready:
    // waiting for `ready` and then for the 1.5 s tool must be idle.
    let t = TempDir::new("sess-eof-idle");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [tool("slow")], "tools": {"slow": {"sleep_ms": 1500}}}),
    );
    let mut cmd = zot();
    cmd.arg("--no-ext")
        .arg("--cwd")
        .arg(t.path())
        .arg("-e")
        .arg(&a);
    cmd.env("ZOT_HOME", t.join("home")).stderr(Stdio::inherit());
    let started = Instant::now();
    let (child, stdin, lines) = spawn_piped(&mut cmd);
    let mut stdin = stdin.expect("stdin");
    writeln!(stdin, "/call slow {{}}").expect("write line");
    drop(stdin);
    let (status, usage) = wait_with_usage(child, "zot", DEADLINE);
    let cpu = cpu_time_of(&usage);
    let wall = started.elapsed();
    let mut out = Vec::new();
    // zot has exited: its stdout reaches EOF once the reader is done.
    while let Ok(line) = lines.recv_timeout(DEADLINE) {
        out.push(line);
    }
    assert_eq!(status, Some(0), "{out:?}");
    assert!(out.iter().any(|l| l == "result: {}"), "{out:?}");
    assert!(
        wall >= Duration::from_millis(1500),
        "tool did not sleep: {wall:?}"
    );
    // A busy loop burns about the whole wall time; idle waiting, plus
    // starting zot and the Python fixture, stays far below it.
    assert!(
        cpu < Duration::from_millis(500),
        "zot used {cpu:?} of CPU in {wall:?} after stdin EOF"
    );
}

#[test]
fn quit_and_exit_leave_through_shutdown() {
    for word in ["/quit", "/exit"] {
        let t = TempDir::new("sess-quit");
        let rec = t.join("rec");
        let a = ext_dir(&t.join("a"), "a", json!({"record": rec}));
        let mut z = Zot::start(&t, &[a], &[]);
        z.send(word);
        z.send("/never-run");
        assert_eq!(z.wait(), Some(0));
        assert!(
            !z.seen.iter().any(|l| l.contains("never-run")),
            "{:?}",
            z.seen
        );
        assert_eq!(recorded(&rec).pop().unwrap()["type"], "shutdown");
    }
}

#[test]
fn ctrl_c_cancels_pending_work_and_a_second_one_exits() {
    let t = TempDir::new("sess-ctrlc");
    let (rec, obs_rec) = (t.join("rec"), t.join("obs"));
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({
            "record": rec,
            "register": [command("hang"), command("ok")],
            "commands": {"hang": {"hang": true}, "ok": {"action": "display", "display": "fine"}},
        }),
    );
    let obs = observer(&t, &obs_rec);
    let pidfile = t.join("agent.pid");
    let agent = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut z = Zot::start(&t, &[a, obs], &["--agent-cmd", &agent]);

    // A command that never answers.
    z.send("/hang");
    wait_for("command_invoked", || {
        !frames(&rec, "command_invoked").is_empty()
    });
    z.signal(libc::SIGINT);
    z.expect("cancelled");
    assert_eq!(z.run("/ok"), ["[/ok] fine"]);

    // A turn whose agent never finishes: Ctrl-C kills it.
    z.send("think hard");
    let agent_pid = read_pid(&pidfile);
    z.signal(libc::SIGINT);
    z.expect("cancelled");
    wait_for("agent killed", || process_gone(agent_pid));
    wait_for("turn_end", || {
        events(&obs_rec).iter().any(|(e, _)| e == "turn_end")
    });
    let end = events(&obs_rec)
        .into_iter()
        .find(|(e, _)| e == "turn_end")
        .unwrap()
        .1;
    assert_eq!(end["stop"], "cancelled");

    // Idle: the first Ctrl-C warns, the second exits gracefully. The
    // `/clear` that `run` ends with prepares the system prompt again (a
    // job Ctrl-C would cancel); `/prompt` is shown only once that is done.
    assert_eq!(z.run("/ok"), ["[/ok] fine"]);
    z.send("/prompt");
    z.expect("system prompt");
    z.signal(libc::SIGINT);
    z.expect("(Ctrl-C again to exit)");
    z.signal(libc::SIGINT);
    assert_eq!(z.wait(), Some(0));
    assert_eq!(recorded(&rec).pop().unwrap()["type"], "shutdown");
}

#[test]
fn sigterm_exits_at_once_through_shutdown() {
    let t = TempDir::new("sess-term");
    let rec = t.join("rec");
    let a = ext_dir(&t.join("a"), "a", json!({"record": rec}));
    let mut z = Zot::start(&t, &[a], &[]);
    let pid = z.pid_of("a");
    z.signal(libc::SIGTERM);
    assert_eq!(z.wait(), Some(0));
    assert!(process_gone(pid));
    assert_eq!(recorded(&rec).pop().unwrap()["type"], "shutdown");
}

/// ctrlc does not say which signal came: SIGHUP and SIGTERM cancel the
/// pending work as Ctrl-C does, any of them leaves when idle, and a
/// second one right after the first leaves at once.
#[test]
fn every_signal_is_ctrl_c() {
    let t = TempDir::new("sess-signals");
    let rec = t.join("rec");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({
            "record": rec,
            "register": [command("hang"), command("ok")],
            "commands": {"hang": {"hang": true}, "ok": {"action": "display", "display": "fine"}},
        }),
    );
    let hang = |z: &mut Zot, n: usize| {
        z.send("/hang");
        wait_for("command_invoked for /hang", || {
            let invoked = frames(&rec, "command_invoked");
            invoked.iter().filter(|f| f["name"] == "hang").count() == n
        });
    };
    let mut z = Zot::start(&t, std::slice::from_ref(&a), &[]);
    for (n, sig) in [(1, libc::SIGHUP), (2, libc::SIGTERM)] {
        hang(&mut z, n);
        z.signal(sig);
        z.expect("cancelled");
        assert_eq!(z.run("/ok"), ["[/ok] fine"], "alive after signal {sig}");
    }
    // Twice in a row: the second leaves without waiting for the
    // cancelled commands, which the extension never answers.
    hang(&mut z, 3);
    z.signal(libc::SIGINT);
    z.expect("cancelled");
    z.signal(libc::SIGINT);
    assert_eq!(z.wait(), Some(0));
    z.assert_never_shown("leaving");
    assert_eq!(recorded(&rec).pop().unwrap()["type"], "shutdown");

    // Idle, one signal is enough to leave (gracefully: `shutdown`).
    let mut z = Zot::start(&t, &[a], &[]);
    z.send("/prompt");
    z.expect("system prompt");
    z.signal(libc::SIGINT);
    z.expect("leaving (Ctrl-C again to exit)");
    assert_eq!(z.wait(), Some(0));
    let last = recorded(&rec).pop().unwrap();
    assert_eq!(last["type"], "shutdown", "{last}");
}

#[test]
fn extension_exit_is_reported_as_it_happens() {
    let t = TempDir::new("sess-exit");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [command("die")], "commands": {"die": {"crash": 7}}}),
    );
    let mut z = Zot::start(&t, &[a], &[]);
    z.send("/die");
    // The event, then the command's own failure.
    let out = z.read_until("error: /die: extension a exited (");
    assert!(
        out.iter()
            .any(|l| l.starts_with("error: extension a exited (")),
        "{out:?}"
    );
    assert_eq!(z.run("/die"), ["error: unknown command /die"]);
}

// ----------------------------------------------------------------------
// Memory bounds: the session's memory does not grow with
// the number of notes an extension sends, even when its output is read.

/// Far below what one record per note would take (about 60 bytes each).
const NOTES: u64 = 1_000_000;
const RSS_BOUND_KB: u64 = 48 * 1024;

#[test]
fn the_session_keeps_no_record_per_note() {
    let t = TempDir::new("review-mem-notes");
    let done = t.join("flood.done");
    let ext = sdk_ext(
        &t.join("flood"),
        "flood",
        json!({"flood": {"count": NOTES, "size": 1, "done": done}}),
    );
    let mut child = spawn_raw(&t, &[], &ext);
    let pid = child.id();
    let answered = ext_answers(child.stdout.take().expect("stdout"));
    let mut stdin = child.stdin.take().expect("stdin");
    // The flood is written by the time `done` exists; what the host has
    // not handled yet comes before the answer to `/ext`.
    wait_for_within("the flood written", Duration::from_secs(120), || {
        done.exists()
    });
    writeln!(stdin, "/ext").expect("write /ext");
    answered
        .recv_timeout(Duration::from_secs(120))
        .expect("the session answers /ext after the flood");
    let peak = peak_rss_kb(pid).expect("VmHWM");
    drop(stdin);
    let _ = child.wait();
    assert!(
        peak < RSS_BOUND_KB,
        "zot peaked at {peak} kB after {NOTES} notes: memory grows per note"
    );
}

/// Lines piped in faster than the session runs them.
const LINES: usize = 1_000_000;
const INPUT_RSS_BOUND_KB: u64 = 40 * 1024;

#[test]
fn the_session_does_not_read_its_input_far_ahead() {
    let t = TempDir::new("review-mem-input");
    // `/x` takes 2 s; the lines behind it wait (a reader without a bound
    // would take all 2 MB in well under that).
    let ext = sdk_ext(
        &t.join("slow"),
        "slow",
        json!({"commands": ["x"], "delay_ms": 2000}),
    );
    let mut child = spawn_raw(&t, &[], &ext);
    let pid = child.id();
    let answered = ext_answers(child.stdout.take().expect("stdout"));
    let mut stdin = child.stdin.take().expect("stdin");
    let (wrote_tx, wrote) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        // Blank lines: nothing to run, but each one waits its turn.
        let mut input = b"/x\n".to_vec();
        input.extend(b" \n".repeat(LINES));
        input.extend(b"/ext\n");
        let _ = stdin.write_all(&input);
        let _ = wrote_tx.send(stdin);
    });
    answered
        .recv_timeout(Duration::from_secs(120))
        .expect("the session answers /ext after the blank lines");
    let peak = peak_rss_kb(pid).expect("VmHWM");
    drop(wrote.recv_timeout(Duration::from_secs(20)));
    let _ = child.wait();
    assert!(
        peak < INPUT_RSS_BOUND_KB,
        "zot peaked at {peak} kB with {LINES} lines piped in: input is read without bound"
    );
}

/// Reads the session's stdout to its end, as a terminal would; the
/// receiver gets one message per answer to `/ext`.
fn ext_answers(stdout: std::process::ChildStdout) -> crossbeam_channel::Receiver<()> {
    let (tx, answered) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("extensions:") {
                let _ = tx.send(());
            }
        }
    });
    answered
}

#[test]
fn help_names_the_session_commands_zot_home_and_the_logs() {
    let w = Project::new("help");
    let out = w.zot(&["--help"]);
    assert_ok(&out);
    let help = String::from_utf8_lossy(&out.stdout);
    for want in [
        "/help",
        "/call TOOL [JSON]",
        "/key [EXT PANEL] KEY [TEXT]",
        "/key esc closes",
        "/reload-ext",
        "/quit",
        "$ZOT_HOME/extensions",
        "$ZOT_HOME/logs/ext-NAME.log",
        "ZOT_HOME defaults to",
        "--provider NAME",
        "--model NAME",
    ] {
        assert!(
            help.contains(want),
            "zot --help should mention {want:?}:\n{help}"
        );
    }
    let rpc = w.zot(&["rpc", "--help"]);
    let rpc = String::from_utf8_lossy(&rpc.stdout);
    assert!(rpc.contains("[--provider NAME] [--model NAME]"), "{rpc}");
}

#[cfg(feature = "panels")]
#[test]
fn after_eof_what_extensions_submit_is_not_run() {
    // An extension that asks for a reload twice at every start: with
    // the input at its end, the session runs what was typed and leaves.
    let t = TempDir::new("sess-eof-submit");
    let starts = t.join("starts");
    let cfg = json!({"starts": starts, "submit_at_ready": ["/reload-ext", "/reload-ext"]});
    let dir = t.join("reloader");
    let exec = fixture_path("panels/picker.py");
    let manifest = json!({"name": "reloader", "exec": exec, "args": [cfg.to_string()]});
    write_manifest(&dir, &manifest);
    let mut z = Zot::start(&t, &[dir], &[]);
    // While input is open, its submissions run as typed lines.
    z.expect("submit_slash [reloader]: /reload-ext");
    z.send("/tools");
    z.close_stdin();
    // The exit deadline only guards against a session that never ends.
    assert_eq!(z.wait(), Some(0), "{:#?}", z.seen);
    assert!(
        z.seen.iter().any(|l| l.starts_with("tools:")),
        "what was typed still runs: {:#?}",
        z.seen
    );
    assert!(
        (z.seen.iter())
            .any(|l| l.starts_with("error: input ended: what extensions submit is not run")),
        "{:#?}",
        z.seen
    );
    let n = std::fs::read_to_string(&starts)
        .unwrap_or_default()
        .lines()
        .count();
    assert!(n < 20, "the extension was started {n} times");
}

/// `zot` with `input` on stdin and stdout `out` (None: a pipe whose
/// reader is gone at once); its exit code and stderr.
fn zot_writing_to(t: &TempDir, input: &str, out: Option<Stdio>) -> (Option<i32>, String) {
    let gone = out.is_none();
    let mut child = zot()
        .args(["--no-ext", "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .stdin(Stdio::piped())
        .stdout(out.unwrap_or_else(Stdio::piped))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zot");
    if gone {
        drop(child.stdout.take());
    }
    let mut stdin = child.stdin.take().expect("stdin");
    // zot may be gone before it reads all: a failed write is no failure.
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let mut stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        let _ = tx.send(text);
    });
    let (status, ended) = exit_within(&mut child, DEADLINE);
    assert!(ended, "zot did not exit");
    let stderr = rx.recv_timeout(DEADLINE).unwrap_or_default();
    (status.code(), stderr)
}

#[test]
fn a_full_disk_is_an_error_and_a_departed_reader_a_quiet_end() {
    let t = TempDir::new("sess-full");
    let input = "/help\n/tools\n/ext\n".repeat(200);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let (code, stderr) = zot_writing_to(&t, &input, Some(Stdio::from(full)));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("zot: cannot write to stdout: No space left on device"),
        "{stderr}"
    );

    // A pipe whose reader is gone: EPIPE.
    let (code, stderr) = zot_writing_to(&t, &input, None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("cannot write"), "{stderr}");
}

#[test]
fn of_two_e_directories_with_one_name_the_first_starts_and_stderr_names_the_other() {
    let t = TempDir::new("sess-twins");
    let reply = |text: &str| {
        json!({"register": [command("who")],
               "commands": {"who": {"action": "display", "display": text}}})
    };
    let first = ext_dir(&t.join("first"), "twin", reply("the first"));
    let second = ext_dir(&t.join("second"), "twin", reply("the second"));
    // `zot -e A -e B`, asked for /who: it answers from the first.
    let run = |a: &Path, b: &Path| {
        let mut cmd = zot();
        cmd.arg("-e")
            .arg(a)
            .arg("-e")
            .arg(b)
            .arg("--cwd")
            .arg(t.path());
        let out = run_fed(
            cmd.env("ZOT_HOME", t.join("home")),
            Some("/who\n"),
            DEADLINE,
            "zot -e twice",
        );
        assert_ok(&out);
        assert!(stdout_of(&out).contains("the first"), "{out:?}");
        out
    };
    let out = run(&first, &second);
    let notice = format!(
        "zot: {} not started: {} has its extension name",
        second.display(),
        first.display()
    );
    assert_eq!(stderr_of(&out).matches(&notice).count(), 1, "{out:?}");
    // One directory given twice, once by its manifest: nothing to say.
    let out = run(&first, &first.join("extension.json"));
    assert!(!stderr_of(&out).contains("not started"), "{out:?}");
}
