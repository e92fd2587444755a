//! Panels in the interactive session (SPEC section 6), through the real
//! `zot` binary and the panel fixture `fixtures/panels/todo.py` (shaped
//! like upstream's todo-panel example): Esc closes the panel and tells
//! the extension; a render for a panel that is not open is not shown
//! and is logged; `/key` naming a panel that is not open says which are.

mod common;

use common::{command, ext_dir, frames, log_of, wait_for, TempDir, Zot};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The panel extension, recording what it receives in `rec`.
fn todo_ext(t: &TempDir, rec: &Path) -> PathBuf {
    let dir = t.join("todo");
    std::fs::create_dir_all(&dir).expect("ext dir");
    let exec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/panels/todo.py");
    let manifest = json!({"name": "todo", "exec": exec, "args": [rec]});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("manifest");
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
