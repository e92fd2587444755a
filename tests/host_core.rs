//! Host core against real extension processes: handshake, readiness,
//! precedence, commands, notes, and every misbehaviour of an extension
//! (docs/PROTOCOL.md#wire-format, docs/PROTOCOL.md#handshake, docs/PROTOCOL.md#exits).

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
#[cfg(feature = "panels")]
use zot_host::PanelKey;
use zot_host::{
    Action, BuiltinVerdict, ExtensionState, HostError, HostEvent, Level, Request, ToolOutcome,
    ToolRequest,
};

#[test]
fn handshake_sends_hello_ack_with_host_fields() {
    let t = TempDir::new("ack");
    let rec = t.join("rec");
    let a = ext_dir(&t.join("a"), "a", json!({"record": rec}));
    let host = start_ready(config(&t, std::slice::from_ref(&a)));
    host.shutdown();
    let frames = recorded(&rec);
    let ack = &frames[0];
    assert_eq!(ack["type"], "hello_ack");
    assert_eq!(ack["protocol_version"], 1);
    assert_eq!(ack["zot_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(ack["provider"], "test-provider");
    assert_eq!(ack["model"], "test-model");
    assert_eq!(ack["cwd"], t.path().to_str().unwrap());
    assert_eq!(ack["extension_dir"], a.to_str().unwrap());
    assert_eq!(ack["data_dir"], a.to_str().unwrap());
    assert_eq!(frames.last().unwrap()["type"], "shutdown");
}

#[test]
fn registrations_before_and_after_the_ack_count() {
    let t = TempDir::new("reg");
    let host = start_one(
        &t,
        json!({
            "eager": [command("early")],
            "register": [command("late")],
            "commands": {"early": {"action": "display", "display": "e"},
                         "late": {"action": "display", "display": "l"}},
        }),
    );
    assert_eq!(display_of(&host, "early").as_deref(), Some("e"));
    assert_eq!(display_of(&host, "late").as_deref(), Some("l"));
}

#[test]
fn ready_frame_and_legacy_watchdog() {
    let t = TempDir::new("ready");
    let explicit = ext_dir(&t.join("a"), "a", json!({"register": [command("x")]}));
    let legacy = ext_dir(
        &t.join("b"),
        "b",
        json!({"register": [command("y")], "ready": false}),
    );
    let host = start_host(config(&t, &[explicit, legacy]));
    let ready = host.wait_ready();
    assert_eq!(
        ready,
        ["a", "b"],
        "extensions ready within the startup grace"
    );
    let list = host.list().unwrap();
    assert_eq!(list.extension("b").unwrap().state, ExtensionState::Ready);
    assert_eq!(list.extension("b").unwrap().commands, ["y"]);
    drop(host);
    assert!(
        log_of(&t, "b").contains("treated as ready after 250 ms"),
        "{}",
        log_of(&t, "b")
    );
    assert!(!log_of(&t, "a").contains("treated as ready"));
}

#[test]
fn ready_event_is_sent_once() {
    let t = TempDir::new("readyev");
    let a = ext_dir(&t.join("a"), "a", json!({}));
    // The event lists who was ready within the grace (config's is long).
    let host = start_ready(config(&t, &[a]));
    let first = host.next_event(DEADLINE).unwrap();
    assert_eq!(
        first,
        HostEvent::Ready {
            extensions: vec!["a".into()]
        }
    );
}

#[test]
fn precedence_explicit_then_project_then_global() {
    let t = TempDir::new("prec");
    let copy = |dir: &str, says: &str| {
        ext_dir(
            &t.join(dir),
            "same",
            json!({"register": [command("who")], "commands": {"who": {"action": "display", "display": says}}}),
        )
    };
    let dev = copy("dev/same", "explicit");
    copy(".zot/extensions/same", "project");
    copy("home/extensions/same", "global");
    let mut cfg = config(&t, &[dev]);
    cfg.discover = true;
    // The project's own copy starts only when trusted (docs/PROTOCOL.md#trust).
    cfg.trust_project = true;
    let host = start_ready(cfg.clone());
    assert_eq!(display_of(&host, "who").as_deref(), Some("explicit"));
    assert_eq!(host.list().unwrap().extensions.len(), 1);
    host.shutdown();

    cfg.ext_paths.clear();
    let host = start_ready(cfg.clone());
    assert_eq!(display_of(&host, "who").as_deref(), Some("project"));
    host.shutdown();
    assert!(log_of(&t, "same").contains("is shadowed by"));

    std::fs::remove_dir_all(t.join(".zot")).unwrap();
    let host = start_ready(cfg);
    assert_eq!(display_of(&host, "who").as_deref(), Some("global"));
}

#[test]
fn command_owner_is_decided_by_precedence_not_arrival() {
    let t = TempDir::new("owner");
    // The higher-precedence extension registers last.
    let high = ext_dir(
        &t.join("high"),
        "high",
        json!({"register_delay_ms": 150, "register": [command("dup")],
               "commands": {"dup": {"action": "display", "display": "high"}}}),
    );
    let low = ext_dir(
        &t.join("low"),
        "low",
        json!({"register": [command("dup")], "commands": {"dup": {"action": "display", "display": "low"}}}),
    );
    let mut cfg = config(&t, &[high, low]);
    // Both send `ready`; keep the legacy watchdog out of the way on a
    // loaded machine so startup waits for the late registration.
    cfg.timeouts.ready_idle = Duration::from_secs(10);
    let host = start_ready(cfg);
    let out = host.command("dup", "").unwrap();
    assert_eq!(
        (out.extension.as_str(), out.display.as_deref()),
        ("high", Some("high"))
    );
    drop(host);
    // Python start-up under load can reverse the arrival order; either
    // way low's log must say that high owns the name.
    let log = log_of(&t, "low");
    assert!(
        log.contains("command /dup is now shadowed by extension high")
            || log.contains("command /dup is shadowed by extension high"),
        "low's log does not name the shadowing:\n{log}"
    );
}

#[test]
fn builtin_command_names_win() {
    let t = TempDir::new("builtin");
    let a = ext_dir(&t.join("a"), "a", json!({"register": [command("help")]}));
    // The embedder reserves its own commands (the library reserves none).
    let mut cfg = config(&t, &[a]);
    cfg.builtin_commands = vec!["help".into()];
    let host = start_ready(cfg);
    assert!(host
        .command("help", "")
        .unwrap_err()
        .to_string()
        .contains("host command"));
    assert!(host.list().unwrap().commands.is_empty());
    drop(host);
    assert!(log_of(&t, "a").contains("shadowed by the built-in"));
}

#[test]
fn commands_with_every_action() {
    let t = TempDir::new("actions");
    let rec = t.join("rec");
    let host = start_one(
        &t,
        json!({
            "record": rec,
            "register": [command("p"), command("i"), command("d"), command("n"), command("o"), command("e")],
            "commands": {
                "p": {"action": "prompt", "prompt": "say hi"},
                "i": {"action": "insert", "insert": "/weather berlin"},
                "d": {"action": "display", "display": "shown"},
                "n": {"action": "noop"},
                "o": {"action": "open_panel", "open_panel": {"id": "p1", "title": "T", "lines": ["a", "b"]}},
                "e": {"action": "noop", "error": "it broke"},
            },
        }),
    );
    let p = host.command("p", "  some args  ").unwrap();
    assert_eq!(
        (p.action, p.prompt.as_deref(), p.extension.as_str()),
        (Action::Prompt, Some("say hi"), "a")
    );
    assert_eq!(
        host.command("i", "").unwrap().insert.as_deref(),
        Some("/weather berlin")
    );
    assert_eq!(display_of(&host, "d").as_deref(), Some("shown"));
    assert_eq!(host.command("n", "").unwrap().action, Action::Noop);
    #[cfg(feature = "panels")]
    {
        let panel = host.command("o", "").unwrap().open_panel.unwrap();
        assert_eq!((panel.id.as_str(), panel.lines.unwrap().len()), ("p1", 2));
    }
    // Without panels the command is still answered: nothing to open.
    #[cfg(not(feature = "panels"))]
    assert_eq!(host.command("o", "").unwrap().action, Action::Noop);
    assert_eq!(
        host.command("e", "").unwrap().error.as_deref(),
        Some("it broke")
    );
    assert!(host
        .command("nope", "")
        .unwrap_err()
        .to_string()
        .contains("unknown command /nope"));
    host.shutdown();
    let invoked = recorded(&rec)
        .into_iter()
        .find(|f| f["type"] == "command_invoked")
        .unwrap();
    assert_eq!(invoked["args"], "some args", "args are trimmed");
}

#[test]
fn notes_and_panels_reach_the_embedder() {
    let t = TempDir::new("notes");
    let rec = t.join("rec");
    let host = start_one(
        &t,
        json!({
            "record": rec,
            "on_ready": [
                {"type": "notify", "level": "warn", "message": "careful"},
                {"type": "notify", "level": "shout", "message": "odd level"},
                {"type": "clear_notes"},
                {"type": "panel_render", "panel_id": "p", "title": "T", "lines": ["x"]},
                {"type": "panel_close", "panel_id": "p"},
            ],
        }),
    );
    // Until the panel closes, the last frame sent (without panels,
    // until the notes are cleared); a `ready` event and, when startup
    // outlasted the grace, a `registered` one come too.
    #[cfg(feature = "panels")]
    let last = |e: &HostEvent| matches!(e, HostEvent::PanelClose { .. });
    #[cfg(not(feature = "panels"))]
    let last = |e: &HostEvent| matches!(e, HostEvent::ClearNotes { .. });
    let mut got = Vec::new();
    while !got.iter().any(last) {
        let event = host.next_event(DEADLINE);
        got.push(event.unwrap_or_else(|| panic!("no last event; got {got:?}")));
    }
    let notify = |level: Level, message: &str| HostEvent::Notify {
        extension: "a".into(),
        level,
        message: message.into(),
    };
    assert!(got.contains(&notify(Level::Warn, "careful")));
    assert!(got.contains(&notify(Level::Info, "odd level")));
    assert!(got.contains(&HostEvent::ClearNotes {
        extension: "a".into()
    }));
    #[cfg(feature = "panels")]
    panels_reach_the_embedder(host, &got, &rec);
    #[cfg(not(feature = "panels"))]
    host.shutdown();
}

/// The panel half of `notes_and_panels_reach_the_embedder`.
#[cfg(feature = "panels")]
fn panels_reach_the_embedder(host: zot_host::Host, got: &[HostEvent], rec: &Path) {
    assert!(got
        .iter()
        .any(|e| matches!(e, HostEvent::PanelRender { panel, .. } if panel.panel_id == "p")));
    assert!(got.contains(&HostEvent::PanelClose {
        panel_id: "p".into(),
        extension: "a".into()
    }));
    host.panel_key("a", "p", PanelKey::Rune, Some("q")).unwrap();
    host.panel_close("a", "p").unwrap();
    assert!(host.panel_key("ghost", "p", PanelKey::Up, None).is_err());
    host.shutdown();
    let frames = recorded(rec);
    assert!(
        frames.contains(&json!({"type": "panel_key", "panel_id": "p", "key": "rune", "text": "q"}))
    );
    assert!(frames.contains(&json!({"type": "panel_close", "panel_id": "p"})));
}

#[test]
fn no_hello_fails_alone() {
    let t = TempDir::new("nohello");
    let silent = ext_dir(&t.join("s"), "silent", json!({"hello": false}));
    // The good one is a shell script: it says hello within the 3 s below
    // even when Python would not start that fast on a loaded machine.
    let good = t.join("g");
    std::fs::create_dir_all(&good).unwrap();
    let script = r#"printf '%s\n' '{"type":"hello","name":"good"}' '{"type":"register_command","name":"ok"}' '{"type":"ready"}'
while read -r line; do
  case $line in
    *command_invoked*) id=${line#*\"id\":\"}; id=${id%%\"*}
      printf '{"type":"command_response","id":"%s","action":"display","display":"fine"}\n' "$id" ;;
    *'"shutdown"'*) printf '{"type":"shutdown_ack"}\n'; exit 0 ;;
  esac
done"#;
    let manifest = json!({"name": "good", "exec": "/bin/sh", "args": ["-c", script]});
    write_manifest(&good, &manifest);
    let mut cfg = config(&t, &[silent, good]);
    // The good extension has the same hello deadline as the silent one.
    cfg.timeouts.hello = Duration::from_secs(3);
    let host = start(cfg);
    // If good too misses the deadline on a loaded machine, say so here
    // rather than later as "unknown command /ok".
    wait_ext_ready(&host, "good");
    assert_eq!(
        host.command("ok", "")
            .unwrap_or_else(|e| panic!("extension good not ready: {e}"))
            .display
            .as_deref(),
        Some("fine")
    );
    let failed = wait_event(&host, "extension_failed", |e| {
        matches!(e, HostEvent::ExtensionFailed { .. })
    });
    assert_eq!(
        failed,
        HostEvent::ExtensionFailed {
            extension: "silent".into(),
            error: "no hello within 3 s".into()
        }
    );
    // Killed at once, reaped as soon as it is gone.
    wait_for("the silent extension to be reaped", || {
        host.list()
            .unwrap()
            .extension("silent")
            .unwrap()
            .pid
            .is_none()
    });
    let list = host.list().unwrap();
    assert!(
        matches!(
            list.extension("silent").unwrap().state,
            ExtensionState::Failed { .. }
        ),
        "{:?}",
        list.extension("silent").unwrap().state
    );
    assert_eq!(list.extension("good").unwrap().state, ExtensionState::Ready);
}

#[test]
fn exit_before_hello_and_non_hello_first_frame_fail() {
    let t = TempDir::new("badstart");
    let quits = ext_dir(&t.join("q"), "quits", json!({"exit_before_hello": 3}));
    let rude = ext_dir(
        &t.join("r"),
        "rude",
        json!({"before_hello": [command("x").to_string()]}),
    );
    let empty = ext_dir(&t.join("e"), "empty", json!({"name": " "}));
    // Keys sorted, as Go's encoder writes a map: `type` after an array.
    let typo = r#" {"capabilities":["tools"],"name":"typo","type":"hello","version":5}"#;
    let typo = ext_dir(&t.join("t"), "typo", json!({"before_hello": [typo]}));
    // About the failures themselves, not the restarts that follow (docs/PROTOCOL.md#supervision).
    for dir in [&quits, &rude, &empty, &typo] {
        set_manifest_field(dir, "restart", json!("never"));
    }
    let host = start(config(&t, &[quits, rude, empty, typo]));
    let list = host.list().unwrap();
    let err = |n: &str| {
        list.extension(n)
            .unwrap()
            .state
            .error()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        matches!(
            list.extension("quits").unwrap().state,
            ExtensionState::Failed { .. }
        ),
        "{:?}",
        list.extension("quits").unwrap().state
    );
    assert_eq!(err("quits"), "exited before hello (exit code 3)");
    assert_eq!(
        err("rude"),
        "first frame was `register_command`, expected `hello`"
    );
    assert_eq!(err("empty"), "hello has an empty name");
    assert_eq!(
        err("typo"),
        "first frame could not be read (hello: field `version`: invalid type: integer `5`, expected a string)"
    );
}

#[test]
fn garbage_unknown_and_wrong_typed_frames_are_logged_and_skipped() {
    let t = TempDir::new("garbage");
    let host = start_one(
        &t,
        json!({
            // A JSON logger's line before hello is no frame either.
            "before_hello": ["this is not json", "{\"no_type\": 1}", "{\"type\": \"debug\"}"],
            "register": [
                "[1, 2, 3]",
                {"type": "tool_result", "content": 5},
                {"type": "teleport"},
                {"type": "register_command", "name": 42},
                {"type": "command_response", "id": "999", "action": "noop"},
                {"type": "register_command", "name": "two words"},
                {"type": "register_tool", "name": "t", "schema": "not an object"},
                {"type": "subscribe", "intercept": ["session_start"]},
                command("fine"),
            ],
            "commands": {"fine": {"action": "display", "display": "still works"}},
        }),
    );
    assert_eq!(display_of(&host, "fine").as_deref(), Some("still works"));
    assert!(host.list().unwrap().tools.is_empty());
    drop(host);
    let log = log_of(&t, "a");
    for expect in [
        "dropped frame (expected ident",
        "missing field `type`",
        "unknown frame type `teleport`",
        "invalid type: integer `42`",
        "id \"999\" is unknown",
        "rejected command \"two words\"",
        "`schema` must be a JSON object",
        "cannot intercept \"session_start\"",
    ] {
        assert!(log.contains(expect), "log lacks {expect:?}:\n{log}");
    }
    assert!(
        !log.contains("id \"\""),
        "an answer without id looked up:\n{log}"
    );
}

#[test]
fn a_frame_type_is_read_as_json_readers_read_it() {
    let t = TempDir::new("frame-type");
    let host = start_one(
        &t,
        json!({
            "register": [
                // Raw lines: a key written with escapes, two types.
                r#"{"typ\u0065": "register_command", "name": "escaped"}"#,
                r#"{"type": "register_command", "name": "twice", "type": "register_tool"}"#,
                r#"{"type": null, "name": "untyped"}"#,
                command("fine"),
            ],
            "commands": {"fine": {"action": "display", "display": "still works"}},
        }),
    );
    assert_eq!(display_of(&host, "fine").as_deref(), Some("still works"));
    let names: Vec<String> = (host.list().unwrap().commands.into_iter())
        .map(|c| c.name)
        .collect();
    assert!(names.contains(&"escaped".to_string()), "{names:?}");
    assert!(!names.contains(&"twice".to_string()), "{names:?}");
    assert!(
        host.list().unwrap().tools.is_empty(),
        "no tool from two types"
    );
    drop(host);
    let log = log_of(&t, "a");
    for expect in [
        "dropped frame (register_command: duplicate field `type`)",
        "dropped frame (field `type` is not a string)",
    ] {
        assert!(log.contains(expect), "log lacks {expect:?}:\n{log}");
    }
}

#[test]
fn a_line_over_16_mib_is_dropped_and_reading_goes_on() {
    let t = TempDir::new("huge");
    let host = start_one(
        &t,
        json!({"huge_line": 17 * 1024 * 1024, "register": [command("after")],
               "commands": {"after": {"action": "display", "display": "ok"}}}),
    );
    assert_eq!(display_of(&host, "after").as_deref(), Some("ok"));
    drop(host);
    assert!(log_of(&t, "a").contains("longer than 16777216 bytes"));
}

#[test]
fn crash_mid_command_fails_at_once() {
    let t = TempDir::new("crash");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [command("boom")], "commands": {"boom": {"crash": 3}}}),
    );
    // About the exit itself, not the restart that follows it (docs/PROTOCOL.md#supervision).
    set_manifest_field(&a, "restart", json!("never"));
    let mut cfg = config(&t, &[a]);
    cfg.timeouts.command = Duration::from_secs(120);
    let host = start_ready(cfg);
    let started = std::time::Instant::now();
    let err = host.command("boom", "").unwrap_err().to_string();
    assert_eq!(err, "extension a exited (exit code 3)");
    // Far below the 120 s command timeout: it did not wait for it.
    assert!(started.elapsed() < Duration::from_secs(60));
    let exited = wait_event(&host, "extension_exited", |e| {
        matches!(e, HostEvent::ExtensionExited { .. })
    });
    assert_eq!(
        exited,
        HostEvent::ExtensionExited {
            extension: "a".into(),
            status: "exit code 3".into()
        }
    );
    let list = host.list().unwrap();
    assert!(list.commands.is_empty(), "its commands left the registry");
    assert!(
        matches!(
            list.extension("a").unwrap().state,
            ExtensionState::Exited { .. }
        ),
        "{:?}",
        list.extension("a").unwrap().state
    );
}

#[test]
fn command_timeout_fails_the_request() {
    let t = TempDir::new("cmdtimeout");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [command("slow")], "commands": {"slow": {"hang": true}}}),
    );
    let mut cfg = config(&t, &[a]);
    cfg.timeouts.command = Duration::from_millis(300);
    let host = start_ready(cfg);
    assert_eq!(
        host.command("slow", "").unwrap_err().to_string(),
        "extension a did not answer /slow within 300 ms"
    );
}

#[test]
fn shutdown_kills_an_extension_that_ignores_it_and_sigterm() {
    let t = TempDir::new("stubborn");
    let host = start_one(&t, json!({"ignore_shutdown": true}));
    let pid = host.list().unwrap().extension("a").unwrap().pid.unwrap();
    host.shutdown();
    assert!(process_gone(pid), "stubborn extension still alive");
    let log = log_of(&t, "a");
    assert!(log.contains("SIGTERM") && log.contains("SIGKILL"), "{log}");
}

#[test]
fn no_grandchild_outlives_shutdown() {
    let t = TempDir::new("grandchild");
    let pidfile = t.join("gc.pid");
    let host = start_one(&t, json!({"grandchild": pidfile}));
    let grandchild = read_pid(&pidfile);
    assert!(!process_gone(grandchild));
    host.shutdown();
    wait_for("grandchild to die", || process_gone(grandchild));
}

#[test]
fn shutdown_stops_many_extensions_in_parallel() {
    let t = TempDir::new("parallel");
    let exts: Vec<_> = (0..4)
        .map(|i| {
            ext_dir(
                &t.join(&format!("e{i}")),
                &format!("e{i}"),
                json!({"ignore_shutdown": true}),
            )
        })
        .collect();
    let host = start_ready(config(&t, &exts));
    let pids: Vec<u32> = host
        .list()
        .unwrap()
        .extensions
        .iter()
        .filter_map(|e| e.pid)
        .collect();
    assert_eq!(pids.len(), 4);
    let started = std::time::Instant::now();
    host.shutdown();
    // 4 stubborn extensions in series would take 4 x (0.5 + 0.5) s.
    assert!(
        started.elapsed() < Duration::from_millis(3500),
        "{:?}",
        started.elapsed()
    );
    assert!(pids.iter().all(|&p| process_gone(p)));
}

#[test]
fn crash_is_noticed_even_when_a_grandchild_keeps_stdout_open() {
    let t = TempDir::new("crash-gc");
    let gc = t.join("gc.pid");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"grandchild": gc, "grandchild_keeps_stdout": true,
               "register": [command("boom")], "commands": {"boom": {"crash": 3}}}),
    );
    let mut cfg = config(&t, &[a]);
    cfg.timeouts.command = Duration::from_secs(120);
    let host = start_ready(cfg);
    let grandchild = read_pid(&gc);
    let started = std::time::Instant::now();
    assert_eq!(
        host.command("boom", "").unwrap_err().to_string(),
        "extension a exited (exit code 3)"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "noticed without stdout EOF"
    );
    // What the extension left in its process group is killed with it.
    wait_for("grandchild to die", || process_gone(grandchild));
}

#[test]
fn a_late_extension_keeps_loading_and_announces_itself() {
    let t = TempDir::new("late");
    let quick = ext_dir(&t.join("q"), "quick", json!({}));
    let late = ext_dir(
        &t.join("l"),
        "late",
        json!({"hello_delay_ms": 1500, "register": [command("late")],
               "commands": {"late": {"action": "display", "display": "here"}}}),
    );
    let mut cfg = config(&t, &[quick, late]);
    cfg.timeouts.startup = Duration::from_millis(200);
    let host = start_host(cfg);
    // Startup gives up waiting for `late` after its grace...
    assert!(!host.wait_ready().contains(&"late".to_string()));
    // ...but it keeps loading, and its registrations count when they come.
    let announced = HostEvent::Registered {
        extension: "late".into(),
    };
    wait_event(&host, "registered", |e| *e == announced);
    assert_eq!(display_of(&host, "late").as_deref(), Some("here"));
    drop(host);
    assert!(log_of(&t, "late").contains("still loading after the startup grace"));
}

#[test]
fn exec_is_resolved_without_a_shell_and_runs_in_its_directory() {
    let t = TempDir::new("exec");
    let manifest = |dir: &std::path::Path, name: &str, exec: &str, args: Vec<String>| {
        write_manifest(dir, &json!({"name": name, "exec": exec, "args": args}))
    };
    let cfg_arg = |name: &str| {
        json!({"name": name, "report_cwd": t.join(&format!("{name}.cwd"))}).to_string()
    };
    // A bare name is looked up in $PATH.
    let bare = manifest(
        &t.join("bare"),
        "bare",
        "python3",
        vec![fixture().display().to_string(), cfg_arg("bare")],
    );
    // A path with a slash is relative to the manifest's directory.
    let rel = t.join("rel");
    std::fs::create_dir_all(rel.join("bin")).unwrap();
    std::os::unix::fs::symlink(fixture(), rel.join("bin/ext.py")).unwrap();
    let rel = manifest(&rel, "rel", "./bin/ext.py", vec![cfg_arg("rel")]);
    // A symlinked extension directory in the project is followed.
    let linked_target = manifest(
        &t.join("elsewhere/linked"),
        "linked",
        "python3",
        vec![fixture().display().to_string(), cfg_arg("linked")],
    );
    std::fs::create_dir_all(t.join(".zot/extensions")).unwrap();
    std::os::unix::fs::symlink(&linked_target, t.join(".zot/extensions/linked")).unwrap();
    // `sh -c` would run this; without a shell it is just a missing file.
    let shelly = manifest(&t.join("shelly"), "shelly", "./x; touch pwned", vec![]);
    // A bare name that is nowhere in $PATH fails with the name it looked for.
    let missing = manifest(&t.join("missing"), "missing", "zot-no-such-program", vec![]);
    let mut cfg = config(&t, &[bare.clone(), rel.clone(), shelly, missing]);
    cfg.discover = true;
    cfg.trust_project = true;
    let host = start(cfg);
    let list = host.list().unwrap();
    for name in ["bare", "rel", "linked"] {
        assert_eq!(
            list.extension(name).unwrap().state,
            ExtensionState::Ready,
            "{name}"
        );
    }
    let shelly = list.extension("shelly").unwrap();
    assert!(
        matches!(shelly.state, ExtensionState::Failed { .. }),
        "{:?}",
        shelly.state
    );
    assert!(
        shelly.state.error().unwrap().contains("cannot start"),
        "{shelly:?}"
    );
    assert!(!t.join("shelly/pwned").exists() && !t.join("pwned").exists());
    let missing = list.extension("missing").unwrap();
    assert!(
        matches!(missing.state, ExtensionState::Failed { .. }),
        "{:?}",
        missing.state
    );
    assert!(
        missing
            .state
            .error()
            .unwrap()
            .contains("`zot-no-such-program` not found in $PATH"),
        "{missing:?}"
    );
    let cwd = |name: &str| std::fs::read_to_string(t.join(&format!("{name}.cwd"))).unwrap();
    assert_eq!(cwd("bare"), bare.to_str().unwrap());
    assert_eq!(cwd("rel"), rel.to_str().unwrap());
    assert_eq!(
        cwd("linked"),
        t.join(".zot/extensions/linked")
            .canonicalize()
            .unwrap()
            .to_str()
            .unwrap()
    );
}

#[test]
fn an_exit_is_noticed_while_idle_even_without_stdout_eof() {
    let t = TempDir::new("idle-exit");
    let gc = t.join("gc.pid");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"grandchild": gc, "grandchild_keeps_stdout": true, "exit_after_ready": 3,
               "register": [command("gone")]}),
    );
    set_manifest_field(&a, "restart", json!("never"));
    let host = start_ready(config(&t, &[a]));
    let grandchild = read_pid(&gc);
    // Nothing is pending and its stdout stays open: the exit itself is
    // the event the host learns of.
    let exited = wait_event(&host, "extension_exited", |e| {
        matches!(e, HostEvent::ExtensionExited { .. })
    });
    assert_eq!(
        exited,
        HostEvent::ExtensionExited {
            extension: "a".into(),
            status: "exit code 3".into()
        }
    );
    assert!(host.list().unwrap().commands.is_empty());
    wait_for("grandchild to die", || process_gone(grandchild));
}

#[test]
fn stdout_closed_before_hello_fails_without_waiting_for_the_hello_timeout() {
    let t = TempDir::new("eof-alive");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"close_stdout_before_hello": true}),
    );
    let mut cfg = config(&t, &[a]);
    cfg.timeouts.hello = Duration::from_secs(120);
    let host = start_host(cfg);
    let failed = wait_event(&host, "extension_failed", |e| {
        matches!(e, HostEvent::ExtensionFailed { .. })
    });
    assert_eq!(
        failed,
        HostEvent::ExtensionFailed {
            extension: "a".into(),
            error: "closed its stdout before hello".into()
        }
    );
    wait_for("the extension to be reaped", || {
        host.list().unwrap().extension("a").unwrap().pid.is_none()
    });
}

#[test]
fn stopping_an_extension_before_its_hello_is_not_a_failure() {
    let t = TempDir::new("stop-early");
    let a = ext_dir(&t.join("a"), "a", json!({"hello_delay_ms": 10_000}));
    let mut cfg = config(&t, &[a]);
    cfg.timeouts.startup = Duration::from_millis(100);
    let host = start(cfg);
    let events = host.events().clone();
    host.shutdown();
    let failures: Vec<HostEvent> = events
        .try_iter()
        .filter(|e| matches!(e, HostEvent::ExtensionFailed { .. }))
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn timeouts_may_be_duration_max() {
    let t = TempDir::new("no-timeouts");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [command("x"), tool("y"), subscribe(&[], &["tool_call"])],
               "commands": {"x": {"action": "display", "display": "ok"}}}),
    );
    let mut cfg = config(&t, &[a]);
    let t_ = &mut cfg.timeouts;
    (t_.hello, t_.command, t_.tool, t_.intercept) =
        (Duration::MAX, Duration::MAX, Duration::MAX, Duration::MAX);
    let host = start_ready(cfg);
    assert_eq!(display_of(&host, "x").as_deref(), Some("ok"));
    let call = zot_host::ToolRequest::new("y", json!({}));
    assert!(!host.call_tool(call).unwrap().result().is_error);
}

#[test]
fn a_second_reload_while_one_runs_is_refused() {
    let t = TempDir::new("reload-twice");
    let a = ext_dir(&t.join("a"), "a", json!({}));
    // The report counts who was ready within the grace (config's is long).
    let host = start_ready(config(&t, &[a]));
    let (tx, rx) = crossbeam_channel::unbounded();
    for _ in 0..2 {
        let tx = tx.clone();
        host.handle().submit(zot_host::Request::Reload {
            reply: Box::new(move |r| {
                let _ = tx.send(r);
            }),
        });
    }
    let answers: Vec<_> = (0..2)
        .map(|_| recv_on(&host, "reload answer", &rx))
        .collect();
    assert!(
        answers.iter().any(|r| r
            .as_ref()
            .is_ok_and(|rep| rep.stopped == 1 && rep.ready == 1)),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|r| r.as_ref().err().map(ToString::to_string).as_deref()
                == Some("a reload is already running")),
        "{answers:?}"
    );
}

/// As upstream: a `command_response` with an error is that error alone
/// (its action skipped); a tool result with an image that is not base64
/// is an error, and empty text blocks are dropped.
#[test]
fn a_command_error_skips_the_action_and_a_bad_image_is_an_error() {
    let t = TempDir::new("upstream-answers");
    let host = start_one(
        &t,
        json!({
            "register": [command("half"), tool("pics"), tool("blank")],
            "commands": {"half": {"action": "display", "display": "partial", "error": "it broke"}},
            "tools": {
                "pics": {"content": [{"type": "text", "text": ""}, {"type": "text", "text": "see"},
                                     {"type": "image", "mime_type": "image/png", "data": "not base64!"}]},
                "blank": {"content": [{"type": "text", "text": ""}]},
            },
        }),
    );
    let half = host.command("half", "").expect("command answers");
    assert_eq!(
        (half.action, half.display.as_deref(), half.error.as_deref()),
        (Action::Noop, None, Some("it broke"))
    );
    let tool = |name: &str| {
        let call = zot_host::ToolRequest::new(name, json!({}));
        host.call_tool(call).expect("tool answers").result()
    };
    let pics = tool("pics");
    assert!(pics.is_error, "an invalid image makes the result an error");
    assert_eq!(
        pics.content,
        [
            json!({"type": "text", "text": "see"}),
            json!({"type": "text", "text": "error: image block `data` is not valid base64"})
        ]
    );
    let blank = tool("blank");
    assert!(!blank.is_error);
    assert_eq!(
        blank.content,
        [json!({"type": "text", "text": "(extension returned no content)"})]
    );
}

// ----------------------------------------------------------------------
// A shutdown asked for during startup (docs/PROTOCOL.md#supervision: "Shutdown
// and reload cancel pending restarts at once"): the shutdown itself
// waits for the startup to end (docs/PROTOCOL.md#shutdown), but pending
// restarts end when it arrives, and a crash after it is not restarted.

#[test]
fn a_shutdown_during_startup_cancels_restarts_at_once() {
    let t = TempDir::new("life-shutdown");
    // `held` holds the startup open until `release` exists: the fixture
    // waits for it at any start but the first, and a line already in its
    // starts file makes its first start count as the second.
    let release = t.join("release");
    std::fs::write(starts_file(&t, "held"), "0\n").expect("seed starts");
    let held = supervised_ext(&t, "held", json!({"hold_restarts": release}), json!({}));
    let crasher = supervised_ext(&t, "a", json!({"crash_starts": 1}), json!({}));
    let victim = supervised_ext(&t, "b", json!({}), json!({}));
    let mut cfg = config(&t, &[held, crasher, victim]);
    // Far longer than the test: a restart only happens if nothing cancels
    // it, and the startup ends only when `held` is released.
    cfg.timeouts.restart_backoff = Duration::from_secs(600);
    cfg.timeouts.startup = Duration::from_secs(600);
    let host = start_host(cfg);
    wait_event(
        &host,
        "a exited",
        |e| matches!(e, HostEvent::ExtensionExited { extension, .. } if extension == "a"),
    );
    wait_on(&host, "b started", || !starts(&t, "b").is_empty());

    let (tx, rx) = crossbeam_channel::bounded(1);
    host.handle().submit(Request::Shutdown {
        reply: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    });
    wait_on(
        &host,
        "a's restart cancelled while the startup still runs",
        || log_of(&t, "a").contains("pending restart cancelled"),
    );
    send_signal(starts(&t, "b")[0], libc::SIGKILL);
    wait_on(&host, "b's crash logged", || {
        log_of(&t, "b").contains("crashed (")
    });
    let log = log_of(&t, "b");
    assert!(
        log.contains("not restarted: the host is stopping or reloading"),
        "{log}"
    );

    std::fs::write(&release, "").expect("release held");
    let reply = recv_on(&host, "shutdown reply", &rx);
    assert!(reply.is_ok(), "{reply:?}");
    let restarted = host
        .events()
        .try_iter()
        .any(|e| matches!(e, HostEvent::ExtensionRestarted { .. }));
    host.shutdown();
    assert!(!restarted, "an extension restarted after the shutdown");
    assert_eq!((starts(&t, "a").len(), starts(&t, "b").len()), (1, 1));
}

// ----------------------------------------------------------------------
// docs/PROTOCOL.md#exits with docs/PROTOCOL.md#ordering: frames an extension writes right before it
// exits (notes, then its `tool_result`) reach the rpc client, in
// order, before the exit is handled; the exit found by the liveness
// poll while the pipe still holds them must not drop them
// (fixtures/exit-ordering/burst.py).

/// `zot rpc` with the extension `burst` (configured by `cfg`), ready;
/// with `grace`, every exit grace is that many seconds
/// (`$ZOT_EXIT_GRACE`).
fn start_burst(t: &TempDir, cfg: Value, grace: Option<&str>) -> Rpc {
    let exec = fixture_path("exit-ordering/burst.py");
    let dir = t.join("burst");
    let manifest = json!({"name": "burst", "exec": exec, "args": [cfg.to_string()],
                          "restart": "never"});
    write_manifest(&dir, &manifest);
    let mut cmd = Rpc::command(t, &[dir]);
    if let Some(grace) = grace {
        cmd.env("ZOT_EXIT_GRACE", grace);
    }
    let mut rpc = Rpc::spawn(&mut cmd);
    rpc.until("ready event", |v| v["type"] == "ready");
    rpc
}

/// Calls `burst`, which answers after `notes` notes and exits at once;
/// with `pipe_bytes`, its stdout pipe holds the whole burst at the exit.
fn answer_written_before_exit_arrives(tag: &str, notes: usize, pipe_bytes: usize) {
    let t = TempDir::new(tag);
    let cfg = json!({"notes": notes, "wait_ms": 300, "pipe_bytes": pipe_bytes});
    let mut rpc = start_burst(&t, cfg, None);
    let answer = rpc.call("b", json!({"type": "tool_call", "name": "burst"}));
    assert_delivered(&rpc, &answer, notes);
}

/// Starts burst with `cfg` (which holds `go`) and calls it (id `b`);
/// returns once burst got the call: zot rpc, burst's pid, and a way to
/// send zot rpc a signal.
fn call_burst_and_hold(t: &TempDir, cfg: Value, grace: &str) -> (Rpc, u32, impl Fn(libc::c_int)) {
    let mut rpc = start_burst(t, cfg, Some(grace));
    let list = rpc.call("l", json!({"type": "list"}));
    let ext = list["data"]["extensions"][0]["pid"].as_u64().expect("pid") as u32;
    let host = rpc.child.id();
    let signal = move |sig| assert!(send_signal(host, sig), "kill zot rpc");
    rpc.send(json!({"type": "tool_call", "name": "burst", "id": "b"}));
    wait_for("burst to get the call", || t.join("go.called").exists());
    (rpc, ext, signal)
}

/// How many notes burst writes once it may go: as many as its stdout
/// holds while nobody reads it, at most the number asked for.
fn notes_to_come(t: &TempDir) -> usize {
    let called = std::fs::read_to_string(t.join("go.called")).expect("burst's go.called");
    let notes = called
        .trim()
        .parse()
        .expect("a count of notes in go.called");
    assert!(notes >= 1_000, "burst's stdout takes only {notes} notes");
    notes
}

/// `answer` is burst's, and every note came before it, in order.
fn assert_delivered(rpc: &Rpc, answer: &Value, notes: usize) {
    assert_eq!(
        answer["data"]["content"],
        json!([{"type": "text", "text": "done"}]),
        "the answer written before the exit was lost: {answer}"
    );
    let seen: Vec<String> = (rpc.seen.iter())
        .filter(|v| v["type"] == "notify")
        .map(|v| v["message"].as_str().unwrap_or_default().to_string())
        .collect();
    let want: Vec<String> = (0..notes).map(|i| format!("n{i}")).collect();
    assert!(
        seen == want,
        "notes before the answer: {} of {notes}, first differing at {:?}",
        seen.len(),
        seen.iter().zip(&want).position(|(a, b)| a != b)
    );
}

/// The same when reading what an exited extension wrote takes longer
/// than the host's wait for its last frames (a busy machine; here the
/// host is stopped while the extension writes its burst and exits, so
/// the liveness poll finds the exit first, and the waits are 1 ms, far
/// less than reading thousands of frames takes). Nothing can write to the dead
/// extension's stdout any more, so whatever its socket still holds is
/// delivered, however late.
#[test]
fn a_starved_host_delivers_all_an_exited_extension_wrote() {
    let t = TempDir::new("exit-order-starved");
    let go = t.join("go");
    let cfg = json!({"notes": 15_000, "go": go, "pipe_bytes": 1 << 20});
    let (mut rpc, ext, signal) = call_burst_and_hold(&t, cfg, "0.001");
    let notes = notes_to_come(&t);
    signal(libc::SIGSTOP);
    std::fs::write(&go, "").expect("write go");
    wait_for("burst to exit", || process_gone(ext));
    signal(libc::SIGCONT);
    let answer = rpc.response("b");
    assert_delivered(&rpc, &answer, notes);
}

/// The same when the extension closed its stdin before it answered and
/// exited (as an exit does: fd 0 closes before fd 1), and the host, which
/// failed to write to it, gets no CPU for longer than the grace it gives
/// a live extension with a closed stdin: the exit decides, once the
/// frames left in its stdout are read.
#[test]
fn an_answer_after_a_failed_write_is_delivered_when_the_extension_exits() {
    let t = TempDir::new("exit-order-deaf");
    let go = t.join("go");
    let cfg = json!({"notes": 15_000, "go": go, "pipe_bytes": 1 << 20, "deaf": true});
    // The grace must outlast the moment from the failed write to the
    // host's stop below, on a busy machine too.
    let (mut rpc, ext, signal) = call_burst_and_hold(&t, cfg, "1");
    let notes = notes_to_come(&t);
    // A second call: writing it fails, burst's stdin is closed.
    rpc.send(json!({"type": "tool_call", "name": "burst", "id": "b2"}));
    wait_for("the write to burst to fail", || {
        log_of(&t, "burst").contains("cannot write to stdin")
    });
    let failed = std::time::Instant::now();
    signal(libc::SIGSTOP);
    std::fs::write(&go, "").expect("write go");
    wait_for("burst to exit", || process_gone(ext));
    // Not a synchronisation: the host is kept off the CPU past the 1 s
    // it gives an extension whose stdin is closed.
    let past_grace = std::time::Duration::from_millis(1500);
    std::thread::sleep(past_grace.saturating_sub(failed.elapsed()));
    signal(libc::SIGCONT);
    let answer = rpc.response("b");
    assert_delivered(&rpc, &answer, notes);
}

#[test]
fn an_answer_written_just_before_exit_is_delivered() {
    answer_written_before_exit_arrives("exit-order", 3000, 0);
}

#[test]
fn an_answer_behind_a_full_pipe_at_exit_is_delivered() {
    answer_written_before_exit_arrives("exit-order-pipe", 15_000, 1 << 20);
}

/// The wait for frames after an exit is bounded: when the extension
/// exits while a child it started keeps writing frames to its stdout,
/// the exit is still handled (docs/PROTOCOL.md#exits), and the child dies with the
/// group.
#[test]
fn an_exit_is_handled_while_a_child_keeps_writing() {
    let t = TempDir::new("exit-chatty");
    let dir = t.join("chatty");
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let pid_file = t.join("child.pid");
    let script = format!(
        r#"printf '{{"type":"hello","name":"chatty"}}\n'
read ack
printf '{{"type":"ready"}}\n'
(while :; do printf '{{"type":"notify","level":"info","message":"tick"}}\n'; sleep 0.1; done) &
echo $! > {pid}
sleep 0.5
exit 0
"#,
        pid = pid_file.display()
    );
    let manifest = json!({"name": "chatty", "exec": "/bin/sh", "args": ["-c", script],
                          "restart": "never"});
    write_manifest(&dir, &manifest);
    // Short exit graces: the bound, not its 2 s default, is the subject.
    let mut rpc = Rpc::spawn(Rpc::command(&t, &[dir]).env("ZOT_EXIT_GRACE", "0.05"));
    // The child's ticks keep the output going: the limit is on the whole wait.
    poll_until(DEADLINE, || {
        let exited = |v: &Value| v["type"] == "extension_exited" && v["extension"] == "chatty";
        if rpc.seen.iter().any(exited) {
            return Ok(());
        }
        rpc.next_within(Duration::from_millis(100));
        let ticks = rpc.seen.iter().filter(|v| v["message"] == "tick").count();
        Err(format!(
            "the exit was never handled while its child wrote ({ticks} ticks seen)"
        ))
    });
    let child = read_pid(&pid_file);
    wait_for("the writing child to die with the group", || {
        process_gone(child)
    });
}

// ----------------------------------------------------------------------
// The table of pending requests: an answer is taken only
// by the extension that owes it and only in the frame its request
// expects; anything else is dropped, logged, and changes nothing.

#[test]
fn answers_to_other_requests_are_dropped_and_leave_them_pending() {
    let t = TempDir::new("pending-thief");
    let rec = t.join("rec");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"record": rec, "register": [command("slow")], "commands": {"slow": {"hang": true}}}),
    );
    let thief = t.join("thief");
    let exe = fixture_path("pending/thief.py");
    let manifest = json!({"name": "thief", "exec": exe});
    write_manifest(&thief, &manifest);
    let mut cfg = config(&t, &[a, thief]);
    cfg.timeouts.command = Duration::from_secs(3);
    let host = start_ready(cfg);

    let (tx, slow) = crossbeam_channel::bounded(1);
    host.handle().submit(Request::Command {
        name: "slow".into(),
        args: String::new(),
        reply: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    });
    let mut victim = None;
    wait_on(&host, "a to get /slow", || {
        victim = recorded(&rec)
            .into_iter()
            .find(|f| f["type"] == "command_invoked")
            .and_then(|f| f["id"].as_str().map(String::from));
        victim.is_some()
    });
    let victim = victim.unwrap_or_default();

    // The thief's own command is answered by its right frame only: the
    // wrong frames before it left the request in the table.
    let mine = host.command("steal", &victim).expect("steal answered");
    assert_eq!(mine.display.as_deref(), Some("mine"));
    // a's request was not answered by the thief: it times out as a's.
    let slow = recv_on(&host, "slow answered", &slow);
    assert_eq!(
        slow,
        Err(HostError::TimedOut {
            extension: "a".into(),
            request: "/slow".into(),
            limit: Duration::from_secs(3),
        })
    );
    host.shutdown();
    let log = log_of(&t, "thief");
    for dropped in [
        format!("dropped command_response: id {victim:?} is unknown, expired or already answered"),
        "dropped tool_result: id ".into(),
        "dropped event_intercept_response: id ".into(),
    ] {
        assert!(
            log.contains(&dropped),
            "no {dropped:?} in the thief's log:\n{log}"
        );
    }
    assert!(log.contains("expects a command_response"), "{log}");
}

// ----------------------------------------------------------------------
// Library behaviour the other tests do not pin down and a
// restructuring of the engine could change.

/// A timed-out command or tool is logged naming the frame the extension
/// owes (`command_response` / `tool_result`): what its author must send.
#[test]
fn a_timeout_is_logged_naming_the_frame_the_extension_owes() {
    let t = TempDir::new("review-timeout-log");
    let slow = ext_dir(
        &t.join("slow"),
        "slow",
        json!({"register": [command("wait"), tool("stall")],
               "commands": {"wait": {"hang": true}},
               "tools": {"stall": {"hang": true}}}),
    );
    let mut cfg = config(&t, &[slow]);
    cfg.timeouts.command = Duration::from_secs(1);
    cfg.timeouts.tool = Duration::from_secs(1);
    let host = start_ready(cfg);

    let command = host.command("wait", "");
    assert!(
        matches!(&command, Err(HostError::TimedOut { request, .. }) if request == "/wait"),
        "{command:?}"
    );
    let call = ToolRequest::new("stall", json!({}));
    let tool = host.call_tool_direct(call);
    assert!(
        matches!(&tool, Err(HostError::TimedOut { request, .. }) if request == "tool stall"),
        "{tool:?}"
    );
    // Logged before the reply was sent: the log is complete here.
    let log = log_of(&t, "slow");
    for line in [
        "no command_response for /wait within 1 s",
        "no tool_result for stall within 1 s",
    ] {
        assert!(log.contains(line), "no {line:?} in the log:\n{log}");
    }
    host.shutdown();
}

// ----------------------------------------------------------------------
// The host loop's fidelity and memory bounds (docs/PROTOCOL.md#events,
// docs/PROTOCOL.md#shutdown, docs/PROTOCOL.md#ordering), with the real `zot`
// binary and extensions that behave like upstream's SDK-built ones
// (`fixtures/sdk-like/ext.py`): nothing lost at shutdown, nothing reordered,
// slow starters waited for, built-in tools through the pipeline, and memory
// bounded whoever stops reading.

/// stdout lines of a finished `zot rpc`, parsed.
fn rpc_lines(t: &TempDir, exts: &[&std::path::Path], extra: &[&str], input: &str) -> Vec<Value> {
    // A Python fixture can take over the 10 s default to say hello on a
    // starved machine; `extra` may set its own limit (the last one wins).
    let mut args = vec!["rpc", "--no-ext", "--hello-timeout", "60"];
    args.extend_from_slice(extra);
    let paths: Vec<String> = exts.iter().map(|p| p.display().to_string()).collect();
    for p in &paths {
        args.extend(["-e", p.as_str()]);
    }
    let (code, lines) = run_zot(t, &args, input);
    assert_eq!(code, Some(0), "zot rpc exit status; output: {lines:?}");
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn response<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines
        .iter()
        .find(|v| v["type"] == "response" && v["id"] == id)
        .unwrap_or_else(|| panic!("no response {id} in {lines:?}"))
}

// ----- shutdown finishes accepted requests first ----------

#[test]
fn piped_requests_are_answered_before_extensions_are_stopped() {
    let t = TempDir::new("fid-piped");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "tools": ["t"], "delay_ms": 300}),
    );
    // Several runs: the bug lost the answer most of the time, not always.
    for run in 0..3 {
        // EOF right after the request.
        let lines = rpc_lines(
            &t,
            &[&ext],
            &[],
            "{\"type\":\"command\",\"id\":\"1\",\"name\":\"x\",\"args\":\"a\"}\n",
        );
        let r = response(&lines, "1");
        assert_eq!(
            r["data"],
            json!({"extension": "sdk", "action": "display", "display": "x: a"}),
            "run {run}: command answered before the extension was stopped: {r}"
        );
        // A tool call followed by `shutdown`.
        let lines = rpc_lines(
            &t,
            &[&ext],
            &[],
            "{\"type\":\"tool_call\",\"id\":\"1\",\"name\":\"t\",\"args\":{\"k\":1}}\n\
             {\"type\":\"shutdown\",\"id\":\"2\"}\n",
        );
        let r = response(&lines, "1");
        assert_eq!(
            r["data"]["content"],
            json!([{"type": "text", "text": "t: {\"k\": 1}"}]),
            "run {run}: tool answered before the stop: {r}"
        );
        let last = lines.last().expect("some output");
        assert_eq!(
            (last["id"].as_str(), last["command"].as_str()),
            (Some("2"), Some("shutdown")),
            "run {run}: the shutdown response must be the last line: {lines:?}"
        );
    }
}

#[test]
fn shutdown_is_the_last_line_and_later_requests_get_errors() {
    let t = TempDir::new("fid-last");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 500}),
    );
    let lines = rpc_lines(
        &t,
        &[&ext],
        &[],
        "{\"type\":\"command\",\"id\":\"1\",\"name\":\"x\"}\n\
         {\"type\":\"shutdown\",\"id\":\"2\"}\n\
         {\"type\":\"ping\",\"id\":\"3\"}\n\
         {\"type\":\"list\",\"id\":\"4\"}\n",
    );
    assert_eq!(response(&lines, "1")["success"], true, "{lines:?}");
    for id in ["3", "4"] {
        let r = response(&lines, id);
        assert_eq!(r["success"], false, "request {id} after shutdown: {r}");
        assert!(
            r["error"].as_str().unwrap_or("").contains("shutting down"),
            "request {id} after shutdown: {r}"
        );
    }
    let last = lines.last().expect("some output");
    assert_eq!(
        (last["id"].as_str(), last["success"].as_bool()),
        (Some("2"), Some(true)),
        "the shutdown response must be the last line: {lines:?}"
    );
}

#[test]
fn list_waits_for_startup_readiness() {
    let t = TempDir::new("fid-list");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "hello_delay_ms": 800}),
    );
    // A generous grace: on a starved machine the 800 ms hello can exceed
    // the 3 s default, and the subject is the order, not the grace.
    let lines = rpc_lines(
        &t,
        &[&ext],
        &["--startup-timeout", "60"],
        "{\"type\":\"list\",\"id\":\"1\"}\n",
    );
    let list = response(&lines, "1");
    assert_eq!(
        list["data"]["extensions"][0]["state"], "ready",
        "list answered before readiness: {list}"
    );
    assert_eq!(list["data"]["commands"][0]["name"], "x", "{list}");
    let ready = lines.iter().position(|v| v["type"] == "ready");
    let answer = lines.iter().position(|v| v["id"] == "1");
    assert!(ready < answer, "ready event before the list: {lines:?}");
}

#[test]
fn library_shutdown_finishes_submitted_requests() {
    let t = TempDir::new("fid-lib-stop");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 400}),
    );
    let host = start(config(&t, &[ext]));
    let (tx, rx) = crossbeam_channel::unbounded();
    for i in 0..5 {
        let tx = tx.clone();
        host.handle().submit(zot_host::Request::Command {
            name: "x".into(),
            args: i.to_string(),
            reply: Box::new(move |r| {
                let _ = tx.send(r);
            }),
        });
    }
    host.shutdown();
    let answers: Vec<_> = rx.try_iter().collect();
    assert_eq!(answers.len(), 5, "{answers:?}");
    for a in answers {
        let a = a.unwrap_or_else(|e| panic!("a submitted command failed at shutdown: {e}"));
        assert_eq!(a.action, Action::Display);
    }
}

// ----- what one extension writes keeps its order -----------------

#[test]
fn notes_never_overtake_responses_in_rpc() {
    let t = TempDir::new("fid-order-rpc");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 0, "notify_first": true}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready event", |v| v["type"] == "ready");
    // One at a time, then 50 at once.
    for i in 0..50 {
        rpc.call(&format!("s{i}"), json!({"type": "command", "name": "x"}));
    }
    for i in 0..50 {
        rpc.send(json!({"type": "command", "name": "x", "id": format!("c{i}")}));
    }
    for i in 0..50 {
        rpc.response(&format!("c{i}"));
    }
    let (mut notes, mut answers) = (0, 0);
    for v in &rpc.seen {
        if v["type"] == "notify" {
            notes += 1;
        } else if v["type"] == "response" && v["command"] == "command" {
            answers += 1;
            assert!(
                notes >= answers,
                "response {} came before its note: {:?}",
                v["id"],
                rpc.seen
            );
        }
    }
    assert_eq!((notes, answers), (100, 100));
}

#[test]
fn notes_never_overtake_responses_in_the_session() {
    let t = TempDir::new("fid-order-session");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 0, "notify_first": true}),
    );
    let e = ext.display().to_string();
    let input = "/x\n".repeat(30);
    let args = ["--no-ext", "--hello-timeout", "60", "-e", &e];
    let (code, lines) = run_zot(&t, &args, &input);
    assert_eq!(code, Some(0), "{lines:?}");
    let (mut notes, mut answers) = (0, 0);
    for line in &lines {
        if line.starts_with("[sdk] info: before") {
            notes += 1;
        } else if line.starts_with("[/x] x:") {
            answers += 1;
            assert!(notes >= answers, "answer before its note: {lines:?}");
        }
    }
    assert_eq!((notes, answers), (30, 30), "{lines:?}");
}

#[test]
fn library_events_are_queued_before_the_reply() {
    let t = TempDir::new("fid-order-lib");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 0, "notify_first": true}),
    );
    let host = start(config(&t, &[ext]));
    for _ in host.events().try_iter() {}
    for i in 0..50 {
        host.command("x", "").expect("command");
        let notes = host
            .events()
            .try_iter()
            .filter(|e| matches!(e, HostEvent::Notify { .. }))
            .count();
        assert_eq!(
            notes, 1,
            "call {i}: the note is in the channel before the reply"
        );
    }
}

// ----- built-in tools over rpc run the pipeline ------------------

#[test]
fn builtin_tool_over_rpc_runs_the_event_and_the_guards() {
    let t = TempDir::new("fid-builtin");
    let rec = t.join("rec");
    let guard = ext_dir(
        &t.join("guard"),
        "guard",
        json!({"record": rec,
               "register": [subscribe(&["tool_call"], &["tool_call"])],
               "guard": {"block_if": "rm -rf", "reason": "dangerous",
                         "modify_args": {"command": "ls -l"}}}),
    );
    // The guard must be subscribed when the calls run: a generous startup
    // grace, so a starved machine cannot end it before the guard is ready.
    let lines = rpc_lines(
        &t,
        &[&guard],
        &["--startup-timeout", "60"],
        "{\"type\":\"tool_call\",\"id\":\"1\",\"name\":\"bash\",\"args\":{\"command\":\"ls\"}}\n\
         {\"type\":\"tool_call\",\"id\":\"2\",\"name\":\"bash\",\"args\":{\"command\":\"rm -rf /\"}}\n",
    );
    assert_eq!(
        response(&lines, "1")["data"],
        json!({"builtin": true, "blocked": false, "args": {"command": "ls -l"}})
    );
    assert_eq!(
        response(&lines, "2")["data"],
        json!({"builtin": true, "blocked": true, "reason": "dangerous",
               "args": {"command": "rm -rf /"}})
    );
    let frames = recorded(&rec);
    let events = frames
        .iter()
        .filter(|f| f["type"] == "event" && f["event"] == "tool_call")
        .count();
    let asked = frames
        .iter()
        .filter(|f| f["type"] == "event_intercept")
        .count();
    assert_eq!(
        (events, asked),
        (2, 2),
        "the tool_call event and the guard saw both calls: {frames:?}"
    );
}

#[test]
fn builtin_tool_through_the_library_pipeline() {
    let t = TempDir::new("fid-builtin-lib");
    let host = start(config(&t, &[]));
    let outcome = host
        .call_tool(ToolRequest::new("read", json!({"path": "x"})))
        .expect("built-in verdict");
    let args = json!({"path": "x"});
    assert_eq!(outcome, ToolOutcome::Builtin(BuiltinVerdict::Run { args }));
}

// ----- slow starters ---------------------------------------------

#[test]
fn a_command_waits_for_an_extension_still_starting() {
    let t = TempDir::new("fid-slow");
    let ext = sdk_ext(
        &t.join("slow"),
        "slow",
        json!({"commands": ["x"], "tools": ["t"], "hello_delay_ms": 2000, "delay_ms": 0}),
    );
    // The startup grace ends long before the hello.
    let lines = rpc_lines(
        &t,
        &[&ext],
        &["--startup-timeout", "0.2"],
        "{\"type\":\"command\",\"id\":\"1\",\"name\":\"x\"}\n\
         {\"type\":\"command\",\"id\":\"2\",\"name\":\"nope\"}\n\
         {\"type\":\"tool_call\",\"id\":\"3\",\"name\":\"t\"}\n",
    );
    assert_eq!(
        response(&lines, "3")["data"]["content"][0]["text"],
        "t: {}",
        "{lines:?}"
    );
    assert_eq!(response(&lines, "1")["data"]["display"], "x: ", "{lines:?}");
    assert_eq!(
        response(&lines, "2")["error"],
        "unknown command /nope",
        "{lines:?}"
    );
    // The session, with the grace from the environment.
    let e = ext.display().to_string();
    let mut cmd = zot();
    cmd.args(["--no-ext", "-e", &e, "--cwd"])
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_STARTUP_TIMEOUT", "0.2")
        .stderr(Stdio::null());
    let (mut child, stdin, lines) = spawn_piped(&mut cmd);
    stdin.expect("stdin").write_all(b"/x hi\n").expect("write");
    let mut out = Vec::new();
    while let Ok(line) = lines.recv_timeout(DEADLINE) {
        out.push(line);
    }
    let _ = child.wait();
    assert!(
        out.iter().any(|l| l == "[/x] x: hi"),
        "the slow starter's command ran: {out:?}"
    );
}

#[test]
fn startup_timeout_must_be_a_number() {
    let t = TempDir::new("fid-bad-grace");
    let (code, _) = run_zot(&t, &["rpc", "--no-ext", "--startup-timeout", "soon"], "");
    assert_eq!(code, Some(2), "usage error");
}

/// An extension still starting (say, npx still downloading) has said no
/// hello and has nothing to finish: a reload stops it at once instead of
/// waiting for its hello deadline, and starts it again.
#[test]
fn reload_stops_an_extension_mid_start_and_starts_it_again() {
    let t = TempDir::new("fid-reload-start");
    let ext = sdk_ext(
        &t.join("npx"),
        "npx",
        json!({"commands": ["x"], "hello_delay_ms": 1500}),
    );
    let mut cfg = config(&t, &[ext]);
    cfg.timeouts.startup = Duration::from_millis(100);
    cfg.timeouts.hello = Duration::from_secs(60);
    let host = start_host(cfg);
    host.wait_ready();
    // Still sleeping before its hello: the reload stops it.
    host.reload().expect("reload");
    let log = log_of(&t, "npx");
    let first_exit = log
        .lines()
        .find(|l| l.contains("exited ("))
        .unwrap_or_else(|| panic!("no exit in the log: {log}"));
    assert!(
        first_exit.contains("exited (signal 15)"),
        "stopped with SIGTERM, not waited for: {log}"
    );
    wait_ext_ready(&host, "npx");
    let x = host.command("x", "hi").expect("the new run answers");
    assert_eq!(x.display.as_deref(), Some("x: hi"));
}

// ----- memory stays bounded whoever stops reading -----------------

/// Flood: 6000 notes of 64 KiB (about 390 MB) that nobody reads.
fn flooder(t: &TempDir, done: &std::path::Path) -> std::path::PathBuf {
    sdk_ext(
        &t.join("flood"),
        "flood",
        json!({"commands": ["x"], "delay_ms": 0,
               "flood": {"count": 6000, "size": 65536, "done": done}}),
    )
}

const RSS_BOUND_KB: u64 = 200 * 1024;

/// The flood is 393 MB of JSON through a debug build: about 15 s with
/// two such tests side by side at load 10, so `DEADLINE` is too short.
const FLOOD_LIMIT: Duration = Duration::from_secs(180);

#[test]
fn rpc_memory_stays_bounded_when_stdout_is_not_read() {
    let t = TempDir::new("fid-mem-rpc");
    let done = t.join("flood.done");
    let ext = flooder(&t, &done);
    // A raw child: nothing reads its stdout until the flood is over.
    let mut child = spawn_raw(&t, &["rpc"], &ext);
    let pid = child.id();
    wait_for_within("the flood to be written", FLOOD_LIMIT, || done.exists());
    let peak = peak_rss_kb(pid).expect("VmHWM");
    // Now read: the host still answers, and says what it dropped.
    let stdout = child.stdout.take().expect("stdout");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(
        stdin,
        "{}",
        json!({"type": "command", "id": "1", "name": "x"})
    )
    .expect("write");
    drop(stdin);
    let lines: Vec<Value> = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).expect("JSON line"))
        .collect();
    let _ = child.wait();
    assert!(
        peak < RSS_BOUND_KB,
        "zot rpc peaked at {peak} kB while nobody read its stdout"
    );
    assert_eq!(response(&lines, "1")["success"], true);
    let dropped: u64 = lines
        .iter()
        .filter(|v| v["type"] == "events_dropped")
        .filter_map(|v| v["count"].as_u64())
        .sum();
    assert!(dropped > 0, "an events_dropped event counts the loss");
    let notes = lines.iter().filter(|v| v["type"] == "notify").count() as u64;
    assert_eq!(
        notes + dropped,
        6000,
        "every note is either written or counted"
    );
    assert!(log_of(&t, "flood").contains("dropping notes"));
}

#[test]
fn session_memory_stays_bounded_when_stdout_is_not_read() {
    let t = TempDir::new("fid-mem-session");
    let done = t.join("flood.done");
    let ext = flooder(&t, &done);
    let mut child = spawn_raw(&t, &[], &ext);
    let pid = child.id();
    wait_for_within("the flood to be written", FLOOD_LIMIT, || done.exists());
    let peak = peak_rss_kb(pid).expect("VmHWM");
    let stdout = child.stdout.take().expect("stdout");
    drop(child.stdin.take());
    let lines: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .collect();
    let _ = child.wait();
    assert!(
        peak < RSS_BOUND_KB,
        "zot peaked at {peak} kB while nobody read its stdout"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("dropped: output was not read")),
        "the session says what it dropped"
    );
}

// ----- huge registrations stay linear and capped ------------------

#[test]
fn a_huge_subscribe_frame_does_not_stall_the_host() {
    let t = TempDir::new("fid-subscribe");
    let ext = sdk_ext(
        &t.join("subs"),
        "subs",
        json!({"commands": ["x"], "delay_ms": 0, "subscribe_many": 100_000}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    let answer = rpc.call("1", json!({"type": "command", "name": "x"}));
    assert_eq!(answer["success"], true, "{answer}");
    // Answered after the subscribe frame (it came first on the pipe).
    let list = rpc.call("2", json!({"type": "list"}));
    let events = &list["data"]["extensions"][0]["events"];
    assert_eq!(
        events.as_array().map(Vec::len),
        Some(10_000),
        "subscriptions are capped"
    );
    assert!(log_of(&t, "subs").contains("90000 event names beyond the cap"));
}

#[test]
fn registrations_beyond_the_cap_are_ignored_and_logged() {
    let t = TempDir::new("fid-cap");
    let names: Vec<String> = (0..10_005).map(|i| format!("c{i}")).collect();
    let ext = sdk_ext(&t.join("many"), "many", json!({"commands": names}));
    let mut cfg = config(&t, &[ext]);
    // It sends `ready`: keep the legacy watchdog out of a loaded run
    // (config's startup grace is long enough for 10,005 registrations).
    cfg.timeouts.ready_idle = Duration::from_secs(10);
    let host = start(cfg);
    let list = host.list().expect("list");
    assert_eq!(list.commands.len(), 10_000);
    assert!(log_of(&t, "many").contains("more than 10000 commands registered"));
}

// ----- nothing is applied after an extension's exit ---------------

#[test]
fn a_dead_extension_owns_no_name() {
    let t = TempDir::new("fid-ghost");
    let keeper = t.join("keeper.pid");
    // A burst of registrations, then exit 0, while a grandchild keeps
    // stdout open: no EOF, so the exit is found by the liveness check,
    // with frames of the burst possibly still queued.
    let ext = sdk_ext(
        &t.join("ghost9"),
        "ghost9",
        json!({"burst": {"frames": 20_000, "name": "haunt", "keeper": keeper,
                          "subscribe_first": 20_000}}),
    );
    let mut cfg = config(&t, &[ext]);
    cfg.timeouts.ready_idle = Duration::from_secs(30);
    let host = start_host(cfg);
    wait_event(&host, "extension_exited", |e| {
        matches!(e, HostEvent::ExtensionExited { .. })
    });
    let keeper = read_pid(&keeper);
    // Frames of the burst still queued are taken in the loop's next
    // turns, between these requests: none may claim a name.
    for _ in 0..50 {
        let list = host.list().expect("list");
        assert!(
            list.commands.is_empty(),
            "a dead extension owns {:?}",
            list.commands
        );
    }
    send_signal(keeper, libc::SIGKILL);
}

// ----- signals: the first waits for accepted requests, the second does not

/// `zot rpc` with one command `x` answered after `delay_ms`, sent and
/// seen by the extension.
fn command_in_flight(t: &TempDir, delay_ms: u64) -> Rpc {
    let rec = t.join("rec");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": delay_ms, "record": rec}),
    );
    let mut rpc = Rpc::start(t, &[ext]);
    rpc.send(json!({"type": "command", "id": "1", "name": "x"}));
    wait_for("the command to reach the extension", || {
        recorded(&rec)
            .iter()
            .any(|f| f["type"] == "command_invoked")
    });
    rpc
}

#[test]
fn sigterm_lets_an_accepted_request_finish() {
    let t = TempDir::new("fid-sigterm");
    let mut rpc = command_in_flight(&t, 1000);
    rpc.signal(libc::SIGTERM);
    let r = rpc.response("1");
    assert_eq!(r["data"]["display"], "x: ", "answered, not cut off: {r}");
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn a_second_ctrl_c_skips_the_wait() {
    let t = TempDir::new("fid-sigint2");
    // Far longer than the test's deadline: only skipping the wait ends it.
    let mut rpc = command_in_flight(&t, 120_000);
    rpc.signal(libc::SIGINT);
    // Two signals sent at once may arrive as one: wait until the first
    // took effect (new requests are refused) before the second.
    // The signal is handled on its own thread: ask until it has been.
    let mut n = 0;
    wait_for("the first signal to start the shutdown", || {
        n += 1;
        rpc.call(&format!("l{n}"), json!({"type": "list"}))["success"] == false
    });
    rpc.signal(libc::SIGINT);
    let r = rpc.response("1");
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap_or("").contains("shutting down"),
        "{r}"
    );
    assert_eq!(rpc.wait(), Some(0));
}

#[test]
fn the_session_cancels_a_request_pending_at_sigterm() {
    let t = TempDir::new("fid-session-term");
    let rec = t.join("rec");
    let ext = sdk_ext(
        &t.join("sdk"),
        "sdk",
        json!({"commands": ["x"], "delay_ms": 1000, "record": rec}),
    );
    let mut cmd = zot();
    cmd.args(["--no-ext", "-e"])
        .arg(&ext)
        .arg("--cwd")
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .stderr(Stdio::null());
    let (mut child, stdin, lines) = spawn_piped(&mut cmd);
    let mut stdin = stdin.expect("stdin");
    stdin.write_all(b"/x late\n").expect("write");
    wait_for("the command to reach the extension", || {
        recorded(&rec)
            .iter()
            .any(|f| f["type"] == "command_invoked")
    });
    let pid = child.id();
    let signal = || send_signal(pid, libc::SIGTERM);
    // SIGTERM is Ctrl-C to the session: it cancels the pending request;
    // the next one leaves without waiting for it.
    signal();
    let mut out = Vec::new();
    while let Ok(line) = lines.recv_timeout(DEADLINE) {
        out.push(line);
        if out.last().is_some_and(|l| l == "cancelled") {
            break;
        }
    }
    assert_eq!(out.last().map(String::as_str), Some("cancelled"), "{out:?}");
    signal();
    while let Ok(line) = lines.recv_timeout(DEADLINE) {
        out.push(line);
    }
    let status = child.wait().expect("wait");
    assert!(
        !out.iter().any(|l| l == "[/x] x: late"),
        "the cancelled command's answer is not shown: {out:?}"
    );
    assert_eq!(status.code(), Some(0));
}

// ----------------------------------------------------------------------
// docs/PROTOCOL.md#ordering: a note an extension writes AFTER its
// answer is shown after that answer, in the session and in `zot rpc`,
// even when both arrive in one read (fixtures/order/after.py).

fn order_ext(t: &TempDir) -> PathBuf {
    let dir = t.join("order");
    let exec = fixture_path("order/after.py");
    let manifest = json!({"name": "order", "version": "1.0.0", "exec": exec});
    write_manifest(&dir, &manifest);
    dir
}

#[test]
fn a_note_written_after_the_answer_prints_after_it_in_the_session() {
    let t = TempDir::new("order-after-session");
    let e = order_ext(&t).display().to_string();
    let input = "/x\n".repeat(30);
    let (code, lines) = run_zot(&t, &["--no-ext", "-e", &e], &input);
    assert_eq!(code, Some(0), "{lines:?}");
    let (mut notes, mut answers) = (0, 0);
    for line in &lines {
        if line.starts_with("[order] info: after") {
            notes += 1;
            assert!(
                answers >= notes,
                "note before the answer it followed: {lines:?}"
            );
        } else if line.starts_with("[/x] answer") {
            answers += 1;
        }
    }
    assert_eq!((notes, answers), (30, 30), "{lines:?}");
}

#[test]
fn a_note_written_after_the_answer_comes_after_it_in_rpc() {
    let t = TempDir::new("order-after-rpc");
    let ext = order_ext(&t);
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.until("ready event", |v| v["type"] == "ready");
    for i in 0..30 {
        rpc.call(&format!("s{i}"), json!({"type": "command", "name": "x"}));
    }
    for i in 0..30 {
        rpc.send(json!({"type": "command", "name": "x", "id": format!("c{i}")}));
    }
    for i in 0..30 {
        rpc.response(&format!("c{i}"));
    }
    rpc.send(json!({"type": "shutdown", "id": "end"}));
    rpc.response("end");
    let (mut notes, mut answers) = (0, 0);
    for v in &rpc.seen {
        if v["type"] == "notify" {
            notes += 1;
            assert!(
                answers >= notes,
                "note {} came before the answer it followed",
                v["message"]
            );
        } else if v["type"] == "response" && v["command"] == "command" {
            answers += 1;
        }
    }
    assert_eq!((notes, answers), (60, 60));
}

// ----------------------------------------------------------------------
// Case-insensitive command names (docs/PROTOCOL.md#names-and-precedence), fixtures/frames/ext.py.

// ----- case-insensitive command names --------------------------

/// An extension registering `Greet`, then `greet` (a conflict), and `hello`.
fn greeter(t: &TempDir, record: &Path) -> PathBuf {
    frames_ext(
        t,
        "greeter",
        json!({"record": record, "commands": ["Greet", "greet", "hello"]}),
    )
}

fn invoked_names(record: &Path) -> Vec<Value> {
    frames(record, "command_invoked")
        .iter()
        .map(|f| f["name"].clone())
        .collect()
}

#[test]
fn command_names_are_case_insensitive_in_the_library() {
    let t = TempDir::new("frames-case");
    let record = t.join("rec");
    let other = frames_ext(&t, "late", json!({"commands": ["HELLO"]}));
    let host = start_ready(config(&t, &[greeter(&t, &record), other]));
    assert_eq!(display_of(&host, "HELLO").as_deref(), Some("ran hello "));
    assert_eq!(display_of(&host, "greet").as_deref(), Some("ran Greet "));
    assert_eq!(invoked_names(&record), [json!("hello"), json!("Greet")]);
    let list = host.list().unwrap();
    let names: Vec<(&str, &str)> = (list.commands.iter())
        .map(|c| (c.name.as_str(), c.extension.as_str()))
        .collect();
    assert_eq!(names, [("Greet", "greeter"), ("hello", "greeter")]);
    let log = log_of(&t, "greeter");
    assert!(
        log.contains("command /greet ignored: /Greet is registered already"),
        "{log}"
    );
    let log = log_of(&t, "late");
    // "is shadowed" or "is now shadowed", as the registrations arrived.
    assert!(log.contains("command /HELLO is "), "{log}");
    assert!(
        log.contains("shadowed by extension greeter's /hello"),
        "{log}"
    );
}

#[cfg(feature = "mcp")]
#[test]
fn command_names_are_case_insensitive_in_rpc_mcp_and_the_session() {
    let t = TempDir::new("frames-case-surfaces");
    let record = t.join("rec");
    let ext = greeter(&t, &record);
    let mut rpc = Rpc::start(&t, std::slice::from_ref(&ext));
    let r = rpc.call(
        "1",
        json!({"type": "command", "name": "/HeLLo", "args": "x"}),
    );
    assert_eq!(r["data"]["display"], "ran hello x", "{r}");
    drop(rpc);

    let mut mcp = Rpc::spawn(&mut Rpc::mcp_command(&t, std::slice::from_ref(&ext), 20));
    mcp.send(json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                    "params": {"name": "GREET", "arguments": {"args": "y"},
                               "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}));
    let got = mcp.until("prompts/get result", |v| v["id"] == 1);
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"], "ran Greet y",
        "{got}"
    );
    drop(mcp);

    let mut z = Zot::start(&t, &[ext], &[]);
    z.send("/HELLO world");
    z.expect("ran hello world");
    z.send("/HELP");
    z.expect("/reload-ext");
    z.send("/QUIT");
    assert_eq!(z.wait(), Some(0));
    assert_eq!(
        invoked_names(&record),
        [json!("hello"), json!("Greet"), json!("hello")]
    );
}

#[cfg(feature = "author")]
#[test]
fn zot_ext_check_folds_command_names() {
    let t = TempDir::new("frames-case-check");
    let ext = greeter(&t, &t.join("rec"));
    let out = zot()
        .args(["ext", "check", "--json", "--command", "HELLO", "z"])
        .arg(&ext)
        .env("ZOT_STARTUP_TIMEOUT", "60")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let text = report.to_string();
    assert!(
        text.contains("command /greet differs from /Greet only in case"),
        "{text}"
    );
    assert!(text.contains("ran hello z"), "the probe ran /hello: {text}");
}
