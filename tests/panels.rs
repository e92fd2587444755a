//! Panels (docs/PROTOCOL.md#panels, docs/PROTOCOL.md#submits). In the interactive session,
//! through the real `zot` binary and the panel fixture
//! `fixtures/panels/todo.py` (shaped like upstream's todo-panel example):
//! Esc closes the panel and tells the extension; a render for a panel
//! that is not open is not shown and is logged; `/key` naming a panel
//! that is not open says which are. Then spontaneous panels,
//! `panel_resize` and `submit` through every surface. Only in a build with
//! the `panels` feature (the minimal build's handling of panel frames:
//! `tests/minimal_build.rs`).

#![cfg(feature = "panels")]

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use zot_host::{ExtensionState, HostError};

/// The panel extension, recording what it receives in `rec`.
fn todo_ext(t: &TempDir, rec: &Path) -> PathBuf {
    let dir = t.join("todo");
    let exec = fixture_path("panels/todo.py");
    let manifest = json!({"name": "todo", "exec": exec, "args": [rec]});
    write_manifest(&dir, &manifest);
    dir
}

/// The session with the panel extension, once it says `ready: todo`.
fn session(t: &TempDir, rec: &Path) -> Zot {
    let mut s = Zot::start(t, &[todo_ext(t, rec)], &[]);
    s.saw("ready: todo");
    s
}

#[test]
fn esc_closes_the_panel_and_tells_the_extension() {
    let t = TempDir::new("panel-esc");
    let rec = t.join("rec");
    let mut s = session(&t, &rec);
    assert_eq!(
        s.run("/todo")[..5],
        [
            "┌─ Todo [todo/todo-panel]",
            "│ > write tests",
            "│   fix panels",
            "│   ship",
            "└─ up/down move · esc close",
        ]
    );
    s.send("/key down");
    s.saw("│ > fix panels");
    s.read_until("└─ up/down move");
    let esc = s.run("/key esc");
    assert_eq!(esc[0], "panel closed: todo/todo-panel", "{esc:?}");
    // The extension was told, and answered with a late render and then a
    // note: once the note is here, the render was seen and not shown.
    s.saw("[todo] info: closed todo-panel");
    s.assert_never_shown("late render");
    let close = frames(&rec, "panel_close");
    assert_eq!(close.len(), 1, "one panel_close: {close:?}");
    assert_eq!(close[0]["panel_id"], "todo-panel");
    let keys: Vec<Value> = frames(&rec, "panel_key")
        .iter()
        .map(|f| f["key"].clone())
        .collect();
    assert_eq!(keys, [json!("down")], "esc must not be forwarded as a key");
    wait_for("the ignored render in the log", || {
        log_of(&t, "todo")
            .contains("panel_render for panel \"todo-panel\", which is not open: not shown")
    });
    // The closed panel is no /key target any more.
    let after = s.run("/key down");
    assert!(after[0].starts_with("error: no open panel"), "{after:?}");
    // `/key close` still closes, the same way.
    s.run("/todo");
    let close = s.run("/key close");
    assert_eq!(close[0], "panel closed: todo/todo-panel", "{close:?}");
    wait_for("second panel_close", || {
        frames(&rec, "panel_close").len() == 2
    });
}

#[test]
fn a_render_for_a_panel_never_opened_is_not_shown() {
    let t = TempDir::new("panel-ghost");
    let rec = t.join("rec");
    let mut s = session(&t, &rec);
    s.send("/ghost");
    s.saw("[todo] info: ghost sent");
    s.assert_never_shown("never opened");
    s.assert_never_shown("Ghost");
    wait_for("the ignored render in the log", || {
        log_of(&t, "todo").contains("panel_render for panel \"ghost-panel\", which is not open")
    });
    // It did not become the default /key target either.
    let out = s.run("/key down");
    assert_eq!(
        out,
        ["error: no open panel (usage: /key [EXT PANEL] KEY [TEXT])"]
    );
    assert!(frames(&rec, "panel_key").is_empty());
}

#[test]
fn key_for_a_panel_that_is_not_open_names_the_open_ones() {
    let t = TempDir::new("panel-wrong");
    let rec = t.join("rec");
    let mut s = session(&t, &rec);
    let none = s.run("/key todo-panel down");
    assert_eq!(
        none,
        ["error: no open panel \"todo-panel\"; no panel is open"]
    );
    s.run("/todo");
    let wrong = s.run("/key nothere down");
    assert_eq!(
        wrong,
        [
            "error: no open panel \"nothere\"; open panels: todo todo-panel \
          (usage: /key [EXT PANEL] KEY [TEXT])"
        ]
    );
    let wrong = s.run("/key todo nothere down");
    assert!(
        wrong[0].starts_with("error: no open panel \"todo nothere\"; open panels: todo todo-panel"),
        "{wrong:?}"
    );
    // The right one still works.
    s.send("/key todo todo-panel down");
    s.saw("│ > fix panels");
    assert!(frames(&rec, "panel_key").len() == 1);
}

#[test]
fn a_render_right_after_open_panel_updates_the_new_panel() {
    let t = TempDir::new("panel-twice");
    let rec = t.join("rec");
    let mut s = session(&t, &rec);
    s.send("/twice");
    // The reply and the render travel apart; either way the render that
    // followed the open_panel shows in the panel.
    s.saw("│ rendered at once");
    s.assert_never_shown("which is not open");
    assert!(
        !log_of(&t, "todo").contains("not open"),
        "render dropped: {}",
        log_of(&t, "todo")
    );
}

/// As upstream, a `panel_render` that leaves out `lines` or `footer`
/// clears them; a title left out is kept.
#[test]
fn a_render_without_lines_or_footer_clears_them() {
    let t = TempDir::new("panel-clear");
    let render = |panel: serde_json::Value| json!({"action": "noop", "before": [panel]});
    let ext = ext_dir(
        &t.join("a"),
        "a",
        json!({
            "register": [command("open"), command("bare"), command("renamed")],
            "commands": {
                "open": {"action": "open_panel", "open_panel":
                         {"id": "p1", "title": "Pick", "lines": ["one"], "footer": "keys"}},
                "bare": render(json!({"type": "panel_render", "panel_id": "p1"})),
                "renamed": render(json!({"type": "panel_render", "panel_id": "p1",
                                         "title": "New", "lines": ["two"]})),
            },
        }),
    );
    let mut s = Zot::start(&t, &[ext], &[]);
    assert_eq!(s.run("/open")[..3], ["┌─ Pick [a/p1]", "│ one", "└─ keys"]);
    assert_eq!(s.run("/bare"), ["┌─ Pick [a/p1]", "└─"]);
    assert_eq!(s.run("/renamed"), ["┌─ New [a/p1]", "│ two", "└─"]);
}

// ----------------------------------------------------------------------
// Spontaneous panels, panel_resize and submit (docs/PROTOCOL.md#panels,
// docs/PROTOCOL.md#submits), through the library, zot rpc and the session; the
// extension is fixtures/frames/ext.py.

// ----- spontaneous panels, panel_resize, submit ---------

/// A spontaneous `open_panel` frame.
fn open_panel(id: &str, title: &str) -> Value {
    json!({"type": "open_panel", "panel": {"id": id, "title": title, "lines": ["one", "two"]}})
}

fn submit(kind: &str, text: &str) -> Value {
    json!({"type": kind, "text": text})
}

#[test]
fn spontaneous_panels_and_submits_reach_the_library() {
    let t = TempDir::new("frames-lib-panel");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "p",
        json!({"record": record, "commands": ["go"], "on_command": {"go": [
            {"type": "open_panel", "panel": {"title": "no id"}},
            {"type": "open_panel", "panel": {"id": " "}},
            open_panel("board", "Board"),
            submit("submit", "  "),
            submit("submit_slash", "no slash"),
            submit("submit", "summarize"),
            submit("submit_slash", "/HELLO world"),
        ]}}),
    );
    let host = start_ready(config(&t, &[ext]));
    assert_eq!(display_of(&host, "go").as_deref(), Some("ran go "));
    let opened = wait_event(&host, "open_panel", |e| {
        matches!(e, zot_host::HostEvent::OpenPanel { .. })
    });
    let zot_host::HostEvent::OpenPanel { extension, panel } = opened else {
        unreachable!()
    };
    assert_eq!((extension.as_str(), panel.id.as_str()), ("p", "board"));
    assert_eq!(panel.title.as_deref(), Some("Board"));
    let sub = wait_event(&host, "submit", |e| {
        matches!(e, zot_host::HostEvent::Submit { .. })
    });
    assert_eq!(
        sub,
        zot_host::HostEvent::Submit {
            extension: "p".into(),
            text: "summarize".into()
        }
    );
    let slash = wait_event(&host, "submit_slash", |e| {
        matches!(e, zot_host::HostEvent::SubmitSlash { .. })
    });
    assert_eq!(
        slash,
        zot_host::HostEvent::SubmitSlash {
            extension: "p".into(),
            text: "/HELLO world".into()
        }
    );
    host.panel_resize("p", "board", 120, 40).unwrap();
    wait_for("panel_resize recorded", || {
        !frames(&record, "panel_resize").is_empty()
    });
    assert_eq!(
        frames(&record, "panel_resize")[0],
        json!({"type": "panel_resize", "panel_id": "board", "width": 120, "height": 40})
    );
    let err = host.panel_resize("nobody", "board", 1, 1).unwrap_err();
    assert_eq!(err, HostError::NoSuchExtension("nobody".into()));
    let log = log_of(&t, "p");
    for want in [
        "dropped frame (open_panel: missing field `id`)",
        "open_panel with an empty `panel.id`: not opened",
        "submit with empty text: ignored",
        "submit_slash text must start with `/`: \"no slash\" ignored",
    ] {
        assert!(log.contains(want), "log lacks {want:?}:\n{log}");
    }
    assert_eq!(
        display_of(&host, "go").as_deref(),
        Some("ran go "),
        "still works"
    );
}

#[test]
fn open_panel_before_hello_fails_the_handshake_and_submit_before_ready_is_ignored() {
    let t = TempDir::new("frames-early");
    let early = frames_ext(&t, "early", json!({"before_hello": [open_panel("x", "X")]}));
    let eager = frames_ext(
        &t,
        "eager",
        json!({"early": [submit("submit", "too soon")]}),
    );
    let host = start(config(&t, &[early, eager]));
    let list = host.list().unwrap();
    let early = list.extension("early").unwrap();
    assert!(
        matches!(early.state, ExtensionState::Failed { .. }),
        "{:?}",
        early.state
    );
    let why = early.state.error().unwrap_or("");
    assert!(
        why.contains("first frame was `open_panel`, expected `hello`"),
        "{why}"
    );
    wait_ext_ready(&host, "eager");
    let log = log_of(&t, "eager");
    assert!(log.contains("submit before `ready`: ignored"), "{log}");
    assert!(
        !host
            .events()
            .try_iter()
            .any(|e| matches!(e, zot_host::HostEvent::Submit { .. })),
        "a submit before ready reached the embedder"
    );
}

#[test]
fn rpc_surfaces_open_panel_submit_and_takes_panel_resize() {
    let t = TempDir::new("frames-rpc-panel");
    let record = t.join("rec");
    let ext = frames_ext(
        &t,
        "p",
        json!({"record": record, "commands": ["go"], "on_command": {"go": [
            open_panel("board", "Board"), submit("submit", "hi"), submit("submit_slash", "/go")]}}),
    );
    let mut rpc = Rpc::start(&t, &[ext]);
    rpc.call("1", json!({"type": "command", "name": "go"}));
    let opened = rpc.until("open_panel event", |v| v["type"] == "open_panel");
    assert_eq!(opened["extension"], "p");
    assert_eq!(
        opened["panel"],
        json!({"id": "board", "title": "Board", "lines": ["one", "two"]})
    );
    let sub = rpc.until("submit event", |v| v["type"] == "submit");
    assert_eq!(
        sub,
        json!({"type": "submit", "extension": "p", "text": "hi"})
    );
    let slash = rpc.until("submit_slash event", |v| v["type"] == "submit_slash");
    assert_eq!(slash["text"], "/go");
    let ok = rpc.call(
        "2",
        json!({"type": "panel_resize", "extension": "p", "panel_id": "board", "width": 90, "height": 30}),
    );
    assert_eq!(
        (ok["success"].clone(), ok["data"].clone()),
        (json!(true), json!({})),
        "{ok}"
    );
    let bad = rpc.call(
        "3",
        json!({"type": "panel_resize", "extension": "p", "panel_id": "board", "width": -1, "height": 30}),
    );
    assert_eq!(bad["success"], false);
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("`width` must be a whole number"),
        "{bad}"
    );
    wait_for("panel_resize", || {
        !frames(&record, "panel_resize").is_empty()
    });
    assert_eq!(frames(&record, "panel_resize")[0]["width"], 90);
}

/// The session's extension: `/board` opens a panel by itself, `/sub`
/// submits a prompt and slash lines, `/flood` submits 20 prompts; after
/// its panel is closed it renders it again.
fn session_ext(t: &TempDir, record: &Path) -> PathBuf {
    let flood: Vec<Value> = (0..20)
        .map(|i| submit("submit", &format!("flood {i}")))
        .collect();
    frames_ext(
        t,
        "s",
        json!({"record": record, "commands": ["board", "sub", "flood", "hello"],
               "on_command": {
                   "board": [open_panel("board", "Board")],
                   "sub": [submit("submit", "from the extension"),
                           submit("submit_slash", "/quit"),
                           submit("submit_slash", "/HELLO there")],
                   "flood": flood},
               "react": {"panel_close": [
                   {"type": "panel_render", "panel_id": "board", "lines": ["ghost"]}]}}),
    )
}

#[test]
fn the_session_shows_spontaneous_panels_and_runs_submits_through_a_pipe() {
    let t = TempDir::new("frames-session-pipe");
    let record = t.join("rec");
    let mut z = Zot::start(&t, &[session_ext(&t, &record)], &[]);
    z.send("/board");
    z.expect("Board");
    wait_for("panel_resize on open", || {
        !frames(&record, "panel_resize").is_empty()
    });
    let resize = &frames(&record, "panel_resize")[0];
    assert_eq!(resize["panel_id"], "board");
    assert!(resize["width"].as_u64().unwrap() > 0, "{resize}");
    z.send("/key esc");
    z.expect("panel closed: s/board");
    // Its render after the close is not shown (logged).
    wait_for("the render after close is logged", || {
        log_of(&t, "s").contains("panel_render for panel \"board\", which is not open")
    });
    z.send("/sub");
    z.expect("would submit: from the extension");
    z.expect("extension s sent /quit: an extension cannot end the session");
    z.expect("ran hello there");
    z.send("/flood");
    z.expect("16 submissions of s wait already: dropped (1 so far)");
    z.expect("would submit: flood 15");
    z.send("/hello after");
    z.expect("ran hello after");
    z.send("/quit");
    assert_eq!(z.wait(), Some(0));
    z.assert_never_shown("ghost");
    z.assert_never_shown("flood 16");
    let submitted = events_in(&record).len();
    assert_eq!(submitted, 0, "nothing subscribed");
    let log = log_of(&t, "s");
    assert!(log.contains("sent /quit"), "{log}");
}

#[test]
fn the_session_on_a_terminal_resizes_panels_and_runs_submits() {
    let t = TempDir::new("frames-session-pty");
    let record = t.join("rec");
    let ext = session_ext(&t, &record);
    let rec = record.to_string_lossy().into_owned();
    let steps = json!([
        ["expect", "ready: s"],
        ["send", "/board"],
        ["expect", "Board"],
        ["wait_file", rec, "\"width\":80,\"height\":24"],
        ["size", 40, 132],
        ["wait_file", rec, "\"width\":132,\"height\":40"],
        ["send", "/sub"],
        ["expect", "would submit: from the extension"],
        ["expect", "ran hello there"],
        ["send", "/quit"],
    ]);
    let out = std::process::Command::new(fixture_path("frames/pty_drive.py"))
        .arg(steps.to_string())
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_zot"))
        .args(["--no-ext", "--cwd"])
        .arg(t.path())
        .arg("-e")
        .arg(&ext)
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_STARTUP_TIMEOUT", "20")
        .env("NO_COLOR", "1")
        .output()
        .expect("run the pty driver");
    let stdout = stdout_of(&out);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "{stdout}\n{}",
        stderr_of(&out)
    );
    let sizes: Vec<(Value, Value)> = frames(&record, "panel_resize")
        .iter()
        .map(|f| (f["width"].clone(), f["height"].clone()))
        .collect();
    assert_eq!(sizes, [(json!(80), json!(24)), (json!(132), json!(40))]);
}

// ----- a waiting line still gets keys; the panels of one extension ----

/// The picker fixture (`fixtures/panels/picker.py`: an interactive tool
/// `pick` with a panel, an interactive tool `wait` without one), with
/// `cfg` and a record of what it receives at `rec`.
fn picker(t: &TempDir, rec: &Path, cfg: Value) -> PathBuf {
    let dir = t.join("picker");
    let mut cfg = cfg;
    cfg["record"] = json!(rec);
    let exec = fixture_path("panels/picker.py");
    let manifest = json!({"name": "picker", "exec": exec, "args": [cfg.to_string()]});
    write_manifest(&dir, &manifest);
    dir
}

#[test]
fn keys_reach_an_interactive_tool_that_waits_in_a_piped_session() {
    let t = TempDir::new("panel-pick");
    let rec = t.join("rec");
    let mut z = Zot::start(&t, &[picker(&t, &rec, json!({}))], &[]);
    // One script: the keys come in behind the call that waits for them.
    z.send("/call pick");
    z.send("/key down");
    z.send("/key enter");
    z.send("/ext");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0), "{:#?}", z.seen);
    let at = |needle: &str| z.seen.iter().position(|l| l.contains(needle));
    let (Some(shown), Some(result), Some(ext)) = (
        at("┌─ Pick one [picker/pick]"),
        at("result: picked green"),
        at("extensions:"),
    ) else {
        panic!("no panel, result or /ext: {:#?}", z.seen);
    };
    // The line queued behind the call runs after its answer.
    assert!(shown < result && result < ext, "{:#?}", z.seen);
    assert!(z.seen.contains(&"panel closed: picker/pick".to_string()));
    let keys: Vec<Value> = frames(&rec, "panel_key")
        .iter()
        .map(|f| f["key"].clone())
        .collect();
    assert_eq!(keys, [json!("down"), json!("enter")]);
    assert!(frames(&rec, "tool_cancel").is_empty());
}

#[cfg(feature = "tool-extras")]
#[test]
fn keys_reach_the_tool_of_a_tool_prompt_and_ctrl_c_cancels_it() {
    let t = TempDir::new("panel-choose");
    let rec = t.join("rec");
    let mut z = Zot::start(&t, &[picker(&t, &rec, json!({}))], &[]);
    z.send("/choose");
    z.send("/key enter");
    z.expect("result: picked red");
    z.expect("would submit: Tool pick {} returned:");
    z.expect("go on");
    // Ctrl-C while the tool waits cancels the call itself: the
    // extension is told, and the session goes on.
    z.send("/choose");
    z.expect("┌─ Pick one [picker/pick]");
    z.signal(libc::SIGINT);
    z.expect("cancelled");
    wait_for("tool_cancel", || frames(&rec, "tool_cancel").len() == 1);
    let call = frames(&rec, "tool_call").pop().expect("tool_call");
    assert_eq!(frames(&rec, "tool_cancel")[0]["id"], call["id"]);
    z.send("/ext");
    z.expect("extensions:");
    assert_eq!(
        (z.seen.iter())
            .filter(|l| l.contains("result: picked"))
            .count(),
        1,
        "{:#?}",
        z.seen
    );
}

#[test]
fn eof_ends_an_interactive_tool_call_nobody_can_answer() {
    // No panel, no key: cancelled at once.
    let t = TempDir::new("panel-eof-wait");
    let rec = t.join("rec");
    let mut z = Zot::start(&t, &[picker(&t, &rec, json!({}))], &[]);
    z.send("/call wait");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0), "{:#?}", z.seen);
    assert!(
        z.seen.contains(
            &"error: input ended while /call wait waited for an answer: cancelled".into()
        ),
        "{:#?}",
        z.seen
    );
    assert_eq!(frames(&rec, "tool_cancel").len(), 1);

    // A panel open: it is closed, and the tool answers that.
    let t = TempDir::new("panel-eof-pick");
    let rec = t.join("rec");
    let mut z = Zot::start(&t, &[picker(&t, &rec, json!({}))], &[]);
    z.send("/call pick");
    z.expect("┌─ Pick one [picker/pick]");
    z.close_stdin();
    assert_eq!(z.wait(), Some(0), "{:#?}", z.seen);
    let tail: Vec<&str> = z
        .seen
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(tail, ["panel closed: picker/pick", "result: pick closed"]);
    let closed = frames(&rec, "panel_close");
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(frames(&rec, "tool_cancel").is_empty());
}

#[test]
fn an_extension_has_at_most_16_panels_open() {
    let t = TempDir::new("panel-many");
    let rec = t.join("rec");
    let mut z = Zot::start(&t, &[picker(&t, &rec, json!({}))], &[]);
    z.send("/many 40");
    z.expect("[picker] info: opened 40");
    let closed: Vec<String> = (z.seen.iter())
        .filter_map(|l| l.strip_prefix("panel closed: picker/"))
        .map(String::from)
        .collect();
    let first: Vec<String> = (0..24).map(|i| format!("p{i}")).collect();
    assert_eq!(closed, first);
    // The extension was sent panel_close for each, oldest first.
    z.send("/closes");
    let closes = z.expect("[picker] info: closes:");
    assert_eq!(
        closes,
        format!("[picker] info: closes: {}", first.join(" "))
    );
    // The 16 newest are open, and only those.
    let open = z.run("/key picker nothere down");
    let names: Vec<String> = (24..40).map(|i| format!("picker p{i}")).collect();
    assert_eq!(
        open,
        [format!(
            "error: no open panel \"picker nothere\"; open panels: {} \
             (usage: /key [EXT PANEL] KEY [TEXT])",
            names.join(", ")
        )]
    );
    let old = z.run("/key picker p0 down");
    assert!(
        old[0].starts_with("error: no open panel \"picker p0\""),
        "{old:?}"
    );
    z.send("/quit");
    assert_eq!(z.wait(), Some(0));
    let resizes = frames(&rec, "panel_resize").len();
    assert_eq!(resizes, 40, "one panel_resize per open");
    wait_for("the eviction in the log", || {
        log_of(&t, "picker").contains("panels (or 1048576 bytes of ids and titles) open")
    });
}
