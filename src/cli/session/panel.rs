//! Panels (SPEC section 6): opened by a command's `open_panel`, updated
//! by the extension's `panel_render` while open, shown as boxed blocks,
//! driven with `/key`. Esc closes the panel, as in upstream's UI.
//!
//! Each open panel is told the terminal's size (`panel_resize`, SPEC
//! 14.1) when it opens and when the size changes, which is looked for
//! every [`SIZE_POLL`] while a panel is open: SIGWINCH would need a
//! signal handler of our own.

use super::{Job, Session};
use std::io::{self, Write};
use std::time::Duration;
use zot_host::{Panel, PanelKey, Request};

impl Session {
    /// `/key [EXT PANEL] KEY [TEXT]`; `KEY` may be one character (a rune),
    /// `close`, or `esc` (which closes the panel too).
    pub(super) fn key(&mut self, args: &str) {
        let words: Vec<&str> = args.split_whitespace().collect();
        let explicit = words.len() >= 3
            && self
                .panels
                .iter()
                .any(|(e, p)| e == words[0] && p.panel_id == words[1]);
        let names_ext = words.len() >= 3 && self.panels.iter().any(|(e, _)| e == words[0]);
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
            (false, Some((e, p))) => (e.clone(), p.panel_id.clone(), args),
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
                return self.submit(Job::Request, request, Session::done);
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
        self.submit(Job::Request, request, Session::done);
    }

    /// `open panels: EXT PANEL, ...`, or that there are none.
    fn open_panels(&self) -> String {
        if self.panels.is_empty() {
            return "no panel is open".into();
        }
        let open: Vec<String> = self
            .panels
            .iter()
            .map(|(e, p)| format!("{e} {}", p.panel_id))
            .collect();
        format!(
            "open panels: {} (usage: /key [EXT PANEL] KEY [TEXT])",
            open.join(", ")
        )
    }

    /// A command's `open_panel`: shows the panel and makes it the
    /// default `/key` target (re-opening one that is open replaces it).
    pub(super) fn open_panel(&mut self, extension: String, panel: Panel) {
        self.panels
            .retain(|(e, p)| !(*e == extension && p.panel_id == panel.panel_id));
        self.out.panel(&extension, &panel);
        self.out.hint(
            "keys: /key up|down|left|right|enter|tab|... [TEXT], one character types it, \
             /key esc closes",
        );
        let size = terminal_size();
        self.size = Some(size);
        self.resize(&extension, &panel.panel_id, size);
        self.panels.push((extension, panel));
    }

    /// Every [`SIZE_POLL`] while a panel is open: a new terminal size is
    /// sent to every open panel.
    pub(super) fn poll_size(&mut self) {
        let size = terminal_size();
        if self.panels.is_empty() || self.size == Some(size) {
            return;
        }
        self.size = Some(size);
        for (extension, panel) in &self.panels {
            self.resize(extension, &panel.panel_id, size);
        }
    }

    /// Sends `panel_resize` (SPEC 14.1): not a job, nothing waits for
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
        let open = self
            .panels
            .iter_mut()
            .find(|(e, p)| *e == extension && p.panel_id == panel.panel_id);
        let Some((_, old)) = open else {
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
        if panel.title.is_some() {
            old.title = panel.title;
        }
        old.lines = panel.lines;
        old.footer = panel.footer;
        let shown = old.clone();
        self.out.panel(&extension, &shown);
    }

    pub(super) fn close_panel(&mut self, extension: &str, panel_id: &str) {
        let before = self.panels.len();
        self.panels
            .retain(|(e, p)| !(e == extension && p.panel_id == panel_id));
        if self.panels.len() < before {
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
    let Ok(home) = crate::cli::zot_home() else {
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
        eprintln!("[zot] ext-{extension}: {msg}");
    }
}

/// How often the terminal's size is looked at while a panel is open.
pub const SIZE_POLL: Duration = Duration::from_millis(200);

/// The terminal's size in columns and rows: stdout's, else stdin's, else
/// `$COLUMNS` / `$LINES`, else 80 x 24 (a pipe has no size).
fn terminal_size() -> (u32, u32) {
    use std::os::fd::AsRawFd;
    for fd in [io::stdout().as_raw_fd(), io::stdin().as_raw_fd()] {
        let mut ws = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ only fills `ws`, which lives across the call,
        // or fails (on a pipe); std has no call for a terminal's size.
        if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
            return (u32::from(ws.ws_col), u32::from(ws.ws_row));
        }
    }
    let env = |var: &str, default: u32| {
        let value = std::env::var(var).ok().and_then(|v| v.trim().parse().ok());
        value.filter(|n| *n > 0).unwrap_or(default)
    };
    (env("COLUMNS", 80), env("LINES", 24))
}
