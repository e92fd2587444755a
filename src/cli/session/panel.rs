//! Panels (docs/PROTOCOL.md#panels): opened by a command's `open_panel`, updated
//! by the extension's `panel_render` while open, shown as boxed blocks,
//! driven with `/key`. Esc closes the panel, as in upstream's UI.
//!
//! One extension has at most [`MAX_PANELS`] panels open, whose ids and
//! titles hold at most [`MAX_PANEL_BYTES`]: opening another closes its
//! oldest (the extension is sent `panel_close`). Only what a render may
//! leave out is kept (the title); lines and footer are shown and
//! dropped. So an extension that opens panels without end costs the
//! session a bounded memory and a bounded work per frame.
//!
//! Each open panel is told the terminal's size (`panel_resize`,
//! docs/PROTOCOL.md#panels) when it opens and when the size changes, which is looked for
//! every [`SIZE_POLL`] while a panel is open: SIGWINCH would need a
//! signal handler of our own.

use super::{Job, Session};
use std::io::{self, Write};
use std::time::Duration;
use zot_host::internal::sys;
use zot_host::{Panel, PanelKey, Request};

/// Panels one extension may have open; opening another closes its oldest.
pub const MAX_PANELS: usize = 16;

/// Bytes of ids and titles one extension's open panels may hold; past
/// them its oldest panels close too (the newest always stays).
pub const MAX_PANEL_BYTES: usize = 1 << 20;

/// An open panel: what a `panel_render` needs that it may leave out.
pub struct Open {
    pub extension: String,
    pub id: String,
    pub title: Option<String>,
}

impl Open {
    fn bytes(&self) -> usize {
        self.id.len() + self.title.as_ref().map_or(0, String::len)
    }
}

/// The open panels, oldest first; at most [`MAX_PANELS`] per extension,
/// so every walk over them is bounded by the extensions loaded.
#[derive(Default)]
pub struct Panels {
    open: Vec<Open>,
}

impl Panels {
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Open> {
        self.open.iter()
    }

    /// The most recent: the default `/key` target.
    pub fn last(&self) -> Option<&Open> {
        self.open.last()
    }

    fn find_mut(&mut self, extension: &str, id: &str) -> Option<&mut Open> {
        (self.open.iter_mut()).find(|p| p.extension == extension && p.id == id)
    }

    /// Takes the panel out; whether it was open.
    pub fn remove(&mut self, extension: &str, id: &str) -> bool {
        let at = (self.open.iter()).position(|p| p.extension == extension && p.id == id);
        at.map(|at| self.open.remove(at)).is_some()
    }

    /// Opens (or re-opens, as the most recent) a panel; returns the ids
    /// of the extension's panels closed to make room for it.
    pub fn open(&mut self, extension: &str, id: &str, title: Option<String>) -> Vec<String> {
        self.remove(extension, id);
        self.open.push(Open {
            extension: extension.to_string(),
            id: id.to_string(),
            title,
        });
        self.bound(extension)
    }

    /// Closes the extension's oldest panels while it has too many (by
    /// count or bytes), keeping its newest; returns their ids.
    fn bound(&mut self, extension: &str) -> Vec<String> {
        let mine = |p: &&Open| p.extension == extension;
        let mut count = self.open.iter().filter(mine).count();
        let mut bytes: usize = self.open.iter().filter(mine).map(Open::bytes).sum();
        let mut closed = Vec::new();
        while count > 1 && (count > MAX_PANELS || bytes > MAX_PANEL_BYTES) {
            let Some(at) = self.open.iter().position(|p| p.extension == extension) else {
                break;
            };
            let oldest = self.open.remove(at);
            count -= 1;
            bytes -= oldest.bytes();
            closed.push(oldest.id);
        }
        closed
    }

    /// Forgets the panels of an extension that is gone.
    pub fn forget(&mut self, extension: &str) {
        self.open.retain(|p| p.extension != extension);
    }

    pub fn clear(&mut self) {
        self.open.clear();
    }

    /// Takes every panel out: (extension, id), oldest first.
    pub fn take_all(&mut self) -> Vec<(String, String)> {
        let all = self.open.drain(..);
        all.map(|p| (p.extension, p.id)).collect()
    }
}

impl Session {
    /// `/key [EXT PANEL] KEY [TEXT]`; `KEY` may be one character (a rune),
    /// `close`, or `esc` (which closes the panel too).
    pub(super) fn key(&mut self, args: &str) {
        let words: Vec<&str> = args.split_whitespace().collect();
        let explicit = words.len() >= 3
            && (self.panels.iter()).any(|p| p.extension == words[0] && p.id == words[1]);
        let names_ext = words.len() >= 3 && self.panels.iter().any(|p| p.extension == words[0]);
        if !explicit && words.len() >= 2 && (names_ext || !is_key(words[0])) {
            // `/key EXT PANEL KEY` (or `/key PANEL KEY`) naming no open panel.
            let named = if is_key(words[1]) && !names_ext {
                words[0].to_string()
            } else {
                words[..2].join(" ")
            };
            return self
                .out
                .error(&format!("no open panel {named:?}; {}", self.open_panels()));
        }
        let (ext, panel, rest) = match (explicit, self.panels.last()) {
            (true, _) => {
                let rest = args.trim_start()[words[0].len()..].trim_start();
                let rest = rest[words[1].len()..].trim_start();
                (words[0].to_string(), words[1].to_string(), rest)
            }
            (false, Some(p)) => (p.extension.clone(), p.id.clone(), args),
            (false, None) => {
                return self
                    .out
                    .error("no open panel (usage: /key [EXT PANEL] KEY [TEXT])")
            }
        };
        let (key, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let text = text.trim();
        let (key, text) = match key {
            "" => {
                return self.out.error(&format!(
                    "usage: /key [EXT PANEL] KEY [TEXT]; keys: {} close",
                    PanelKey::NAMES.join(" ")
                ))
            }
            // Esc is not forwarded: the host closes the panel and tells
            // the extension, as upstream's UI does.
            "close" | "esc" => {
                self.close_panel(&ext, &panel);
                let request = |reply| Request::PanelClose {
                    extension: ext,
                    panel_id: panel,
                    reply,
                };
                return self.key_request(request);
            }
            k => match PanelKey::parse(k) {
                Some(key) => (key, (!text.is_empty()).then(|| text.to_string())),
                None if k.chars().count() == 1 => (PanelKey::Rune, Some(k.to_string())),
                None => {
                    return self.out.error(&format!(
                        "unknown key {k:?} (one of {} close, or one character)",
                        PanelKey::NAMES.join(" ")
                    ))
                }
            },
        };
        let request = |reply| Request::PanelKey {
            extension: ext,
            panel_id: panel,
            key,
            text,
            reply,
        };
        self.key_request(request);
    }

    /// Sends a `/key` request: a job when nothing waits, else a side
    /// request, so a key reaches a panel while a job waits (for it,
    /// maybe: an interactive tool that waits for its user).
    fn key_request(&mut self, request: impl FnOnce(zot_host::Reply<()>) -> Request) {
        if self.jobs.busy() {
            self.submit_side(request, Session::done);
        } else {
            self.submit(Job::Request, request, Session::done);
        }
    }

    /// `open panels: EXT PANEL, ...`, or that there are none.
    fn open_panels(&self) -> String {
        if self.panels.is_empty() {
            return "no panel is open".into();
        }
        let open: Vec<String> = (self.panels.iter())
            .map(|p| format!("{} {}", p.extension, p.id))
            .collect();
        format!(
            "open panels: {} (usage: /key [EXT PANEL] KEY [TEXT])",
            open.join(", ")
        )
    }

    /// A command's `open_panel`: shows the panel and makes it the
    /// default `/key` target (re-opening one that is open replaces it).
    pub(super) fn open_panel(&mut self, extension: String, panel: Panel) {
        let closed = self
            .panels
            .open(&extension, &panel.panel_id, panel.title.clone());
        self.closed_for_room(&extension, closed);
        self.out.panel(&extension, &panel);
        self.out.hint(
            "keys: /key up|down|left|right|enter|tab|... [TEXT], one character types it, \
             /key esc closes",
        );
        let size = terminal_size();
        self.size = Some(size);
        self.resize(&extension, &panel.panel_id, size);
    }

    /// Panels of `extension` closed to make room for a newer one: said,
    /// and sent `panel_close`; logged at the 1st, 10th, 100th...
    fn closed_for_room(&mut self, extension: &str, closed: Vec<String>) {
        for id in closed {
            self.panel_closed(extension, &id);
            let n = self
                .panels_evicted
                .entry(extension.to_string())
                .or_default();
            *n += 1;
            if power_of_ten(*n) {
                let why = format!(
                    "over {MAX_PANELS} panels (or {MAX_PANEL_BYTES} bytes of ids and titles) open: \
                     the oldest closed ({n} so far)"
                );
                log_line(extension, &why);
            }
        }
    }

    /// A panel the session closed (not the user, not the extension):
    /// said, and the extension is sent `panel_close`. Not a job: nothing
    /// waits for it, and an extension that is gone is no news.
    pub(super) fn panel_closed(&mut self, extension: &str, panel_id: &str) {
        self.out
            .line(&format!("panel closed: {extension}/{panel_id}"));
        self.host.submit(Request::PanelClose {
            extension: extension.to_string(),
            panel_id: panel_id.to_string(),
            reply: Box::new(|_| {}),
        });
    }

    /// Every [`SIZE_POLL`] while a panel is open: a new terminal size is
    /// sent to every open panel.
    pub(super) fn poll_size(&mut self) {
        let size = terminal_size();
        if self.panels.is_empty() || self.size == Some(size) {
            return;
        }
        self.size = Some(size);
        for p in self.panels.iter() {
            self.resize(&p.extension, &p.id, size);
        }
    }

    /// Sends `panel_resize` (docs/PROTOCOL.md#panels): not a job, nothing waits for
    /// it; a panel whose extension is gone is no news worth a line.
    fn resize(&self, extension: &str, panel_id: &str, (width, height): (u32, u32)) {
        self.host.submit(Request::PanelResize {
            extension: extension.to_string(),
            panel_id: panel_id.to_string(),
            width,
            height,
            reply: Box::new(|_| {}),
        });
    }

    /// An extension's `panel_render`: updates an open panel in place. A
    /// render for a panel that is not open (closed already, or never
    /// opened) is not shown, and is logged (the 1st, 10th, 100th...): it
    /// must not bring a closed panel back.
    pub(super) fn render_panel(&mut self, extension: String, panel: Panel) {
        let Some(old) = self.panels.find_mut(&extension, &panel.panel_id) else {
            let n = self.unshown.entry(extension.clone()).or_default();
            *n += 1;
            if power_of_ten(*n) {
                let id: String = panel.panel_id.chars().take(100).collect();
                let why = format!("panel_render for panel {id:?}, which is not open: not shown");
                log_line(&extension, &format!("{why} ({n} so far)"));
            }
            return;
        };
        // As upstream: lines and footer are what the render says (left
        // out: cleared); a title left out is kept.
        let mut shown = panel;
        if let Some(title) = shown.title.take() {
            old.title = Some(title);
        }
        shown.title = old.title.clone();
        // A longer title may put the extension over its bytes.
        let closed = self.panels.bound(&extension);
        self.out.panel(&extension, &shown);
        self.closed_for_room(&extension, closed);
    }

    pub(super) fn close_panel(&mut self, extension: &str, panel_id: &str) {
        if self.panels.remove(extension, panel_id) {
            self.out
                .line(&format!("panel closed: {extension}/{panel_id}"));
        }
    }
}

/// 1, 10, 100...: when a line repeated that often is logged again.
pub(super) fn power_of_ten(n: u64) -> bool {
    std::iter::successors(Some(1u64), |p| p.checked_mul(10)).any(|p| p == n)
}

/// Whether `word` is something `/key` accepts as a key.
fn is_key(word: &str) -> bool {
    PanelKey::parse(word).is_some() || word == "close" || word.chars().count() == 1
}

/// Appends a `[zot]` line to the extension's log (the session has no
/// handle on it; appending keeps lines whole beside the host's own).
pub(super) fn log_line(extension: &str, msg: &str) {
    let Ok(home) = crate::cli::common::zot_home() else {
        return;
    };
    let logs = zot_host::internal::discovery::logs_dir(&home);
    let path = zot_host::internal::log::log_path(&logs, extension);
    let line = format!("[zot] {} {msg}\n", zot_host::internal::log::timestamp());
    let written = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if written.is_err() {
        // stderr may be gone or full too: nothing more to do then.
        let _ = writeln!(io::stderr(), "[zot] ext-{extension}: {msg}");
    }
}

/// How often the terminal's size is looked at while a panel is open.
pub const SIZE_POLL: Duration = Duration::from_millis(200);

/// The terminal's size in columns and rows: stdout's, else stdin's, else
/// `$COLUMNS` / `$LINES`, else 80 x 24 (a pipe has no size).
fn terminal_size() -> (u32, u32) {
    use std::os::fd::AsFd;
    let size = sys::terminal_size(io::stdout().as_fd())
        .or_else(|| sys::terminal_size(io::stdin().as_fd()));
    if let Some((cols, rows)) = size {
        return (u32::from(cols), u32::from(rows));
    }
    let env = |var: &str, default: u32| {
        let value = std::env::var(var).ok().and_then(|v| v.trim().parse().ok());
        value.filter(|n| *n > 0).unwrap_or(default)
    };
    (env("COLUMNS", 80), env("LINES", 24))
}
