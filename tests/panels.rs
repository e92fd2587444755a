//! Panels in the interactive session (SPEC section 6), through the real
//! `zot` binary and the panel fixture `fixtures/panels/todo.py` (shaped
//! like upstream's todo-panel example): Esc closes the panel and tells
//! the extension; a render for a panel that is not open is not shown
//! and is logged; `/key` naming a panel that is not open says which are.

mod common;

use common::{recorded, spawn_piped, wait_for, zot, TempDir, DEADLINE};
use crossbeam_channel::Receiver;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::time::Instant;

/// The panel extension, recording what it receives in `rec`.
fn todo_ext(t: &TempDir, rec: &Path) -> PathBuf {
    let dir = t.join("todo");
    std::fs::create_dir_all(&dir).expect("ext dir");
    let exec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/panels/todo.py");
    let manifest = json!({"name": "todo", "exec": exec, "args": [rec]});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("manifest");
    dir
}

/// The session over pipes.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Session {
    fn start(t: &TempDir, ext: &Path) -> Session {
        let mut cmd = zot();
        cmd.args(["--no-ext", "--cwd"])
            .arg(t.path())
            .arg("-e")
            .arg(ext)
            .env("ZOT_HOME", t.join("home"))
            // A loaded machine may take longer than the 3 s default.
            .env("ZOT_STARTUP_TIMEOUT", "20")
            .stderr(Stdio::inherit());
        let (child, stdin, lines) = spawn_piped(&mut cmd);
        let mut s = Session {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        };
        s.expect("ready: todo");
        s
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write line");
        stdin.flush().expect("flush");
    }

    /// Reads until a line containing `needle`; returns the lines read.
    fn read_until(&mut self, needle: &str) -> Vec<String> {
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

    fn expect(&mut self, needle: &str) {
        if !self.seen.iter().any(|l| l.contains(needle)) {
            self.read_until(needle);
        }
    }

    /// Sends `line`; returns what it printed (up to a `/clear` after it).
    fn run(&mut self, line: &str) -> Vec<String> {
        self.send(line);
        self.send("/clear");
        let mut got = self.read_until("notes cleared (");
        got.pop();
        got
    }

    fn assert_never_shown(&self, text: &str) {
        assert!(
            !self.seen.iter().any(|l| l.contains(text)),
            "{text:?} was shown:\n{}",
            self.seen.join("\n")
        );
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn frames(rec: &Path, kind: &str) -> Vec<Value> {
    recorded(rec)
        .into_iter()
        .filter(|f| f["type"] == kind)
        .collect()
}

fn log(t: &TempDir) -> String {
    std::fs::read_to_string(t.join("home/logs/ext-todo.log")).unwrap_or_default()
}

#[test]
fn esc_closes_the_panel_and_tells_the_extension() {
    let t = TempDir::new("panel-esc");
    let rec = t.join("rec");
    let mut s = Session::start(&t, &todo_ext(&t, &rec));
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
    s.expect("│ > fix panels");
    s.read_until("└─ up/down move");
    let esc = s.run("/key esc");
    assert_eq!(esc[0], "panel closed: todo/todo-panel", "{esc:?}");
    // The extension was told, and answered with a late render and then a
    // note: once the note is here, the render was seen and not shown.
    s.expect("[todo] info: closed todo-panel");
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
        log(&t).contains("panel_render for panel \"todo-panel\", which is not open: not shown")
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
    let mut s = Session::start(&t, &todo_ext(&t, &rec));
    s.send("/ghost");
    s.expect("[todo] info: ghost sent");
    s.assert_never_shown("never opened");
    s.assert_never_shown("Ghost");
    wait_for("the ignored render in the log", || {
        log(&t).contains("panel_render for panel \"ghost-panel\", which is not open")
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
    let mut s = Session::start(&t, &todo_ext(&t, &rec));
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
    s.expect("│ > fix panels");
    assert!(frames(&rec, "panel_key").len() == 1);
}

#[test]
fn a_render_right_after_open_panel_updates_the_new_panel() {
    let t = TempDir::new("panel-twice");
    let rec = t.join("rec");
    let mut s = Session::start(&t, &todo_ext(&t, &rec));
    s.send("/twice");
    // The reply and the render travel apart; either way the render that
    // followed the open_panel shows in the panel.
    s.expect("│ rendered at once");
    s.assert_never_shown("which is not open");
    assert!(!log(&t).contains("not open"), "render dropped: {}", log(&t));
}
