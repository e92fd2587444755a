//! Panels (docs/PROTOCOL.md#panels): opened by a command's `open_panel`, updated
//! by the extension's `panel_render` while open, shown as boxed blocks,
//! driven with `/key`. Esc closes the panel, as in upstream's UI.
//!
//! [`Panels`] owns what the session keeps about them: the open panels,
//! the terminal size they were last told, and how often each extension
//! went over a bound (for its log). Its methods are handed what they
//! write to: the session's output, and the host for the requests
//! nothing waits for (`panel_close` when the session closes a panel,
//! `panel_resize`). A `/key` line becomes a [`ToPanel`], which the
//! session sends as a request whose answer it shows.
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
//!
//! Only in a build with the `panels` feature; without it the session has
//! `no_panel.rs` in its place.

use super::ext_log::{log_line, power_of_ten};
use super::render::{Out, Tone};
use std::collections::HashMap;
use std::io;
use std::time::Duration;
use zot_host::internal::log::inert;
use zot_host::internal::sys;
use zot_host::{HostEvent, HostHandle, OpenPanel, Panel, PanelKey, Request};

/// Panels one extension may have open; opening another closes its oldest.
pub const MAX_PANELS: usize = 16;

/// Bytes of ids and titles one extension's open panels may hold; past
/// them its oldest panels close too (the newest always stays).
pub const MAX_PANEL_BYTES: usize = 1 << 20;

/// How often the terminal's size is looked at while a panel is open.
pub const SIZE_POLL: Duration = Duration::from_millis(200);

/// An open panel: what a `panel_render` needs that it may leave out.
struct Open {
    extension: String,
    id: String,
    title: Option<String>,
}

impl Open {
    fn bytes(&self) -> usize {
        self.id.len() + self.title.as_ref().map_or(0, String::len)
    }
}

/// The session's panels.
#[derive(Default)]
pub struct Panels {
    /// The open panels, oldest first; at most [`MAX_PANELS`] per
    /// extension, so every walk over them is bounded by the extensions
    /// loaded.
    open: Vec<Open>,
    /// The terminal size the open panels were last told (docs/PROTOCOL.md#panels).
    size: Option<(u32, u32)>,
    /// Panels closed per extension to make room for newer ones: logged
    /// at the 1st, 10th, 100th...
    evicted: HashMap<String, u64>,
    /// Renders of panels that were not open, per extension: logged at
    /// 1, 10, 100... (this log is not rotated by the host).
    unshown: HashMap<String, u64>,
}

/// What a `/key` line sends to an open panel.
pub enum ToPanel {
    /// `/key close` or `/key esc`: the session has closed the panel
    /// already; the extension is told.
    Close { extension: String, panel_id: String },
    /// A key, with the text it carries (a rune's character, or what was
    /// typed after the key's name).
    Key {
        extension: String,
        panel_id: String,
        key: PanelKey,
        text: Option<String>,
    },
}

impl ToPanel {
    /// The request that sends it, answered through `reply`.
    pub fn request(self, reply: zot_host::Reply<()>) -> Request {
        match self {
            ToPanel::Close {
                extension,
                panel_id,
            } => Request::PanelClose {
                extension,
                panel_id,
                reply,
            },
            ToPanel::Key {
                extension,
                panel_id,
                key,
                text,
            } => Request::PanelKey {
                extension,
                panel_id,
                key,
                text,
                reply,
            },
        }
    }
}

impl Panels {
    /// A panel event: a panel an extension opened, rendered or closed.
    pub fn on_event(&mut self, out: &mut Out, host: &HostHandle, event: HostEvent) {
        match event {
            HostEvent::PanelRender { panel, extension } => self.render(out, host, extension, panel),
            HostEvent::OpenPanel { extension, panel } => self.opened(out, host, extension, panel),
            HostEvent::PanelClose {
                panel_id,
                extension,
            } => self.close(out, &extension, &panel_id),
            // Only the panel events come here.
            _ => {}
        }
    }

    /// A panel opened by a command's `open_panel` or by the extension.
    pub fn opened(&mut self, out: &mut Out, host: &HostHandle, extension: String, p: OpenPanel) {
        let panel = Panel {
            panel_id: p.id,
            title: p.title,
            lines: p.lines,
            footer: p.footer,
        };
        self.open(out, host, extension, panel);
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Whether `id` of `extension` is open.
    fn is_open(&self, extension: &str, id: &str) -> bool {
        (self.open.iter()).any(|p| p.extension == extension && p.id == id)
    }

    /// Takes the panel out; whether it was open.
    fn remove(&mut self, extension: &str, id: &str) -> bool {
        let at = (self.open.iter()).position(|p| p.extension == extension && p.id == id);
        at.map(|at| self.open.remove(at)).is_some()
    }

    /// Puts a panel in (again, as the most recent); returns the ids of
    /// the extension's panels taken out to make room for it.
    fn insert(&mut self, extension: &str, id: &str, title: Option<String>) -> Vec<String> {
        self.remove(extension, id);
        self.open.push(Open {
            extension: extension.to_string(),
            id: id.to_string(),
            title,
        });
        self.bound(extension)
    }

    /// Takes the extension's oldest panels out while it has too many (by
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

    /// Forgets every open panel (the extensions were reloaded).
    pub fn clear(&mut self) {
        self.open.clear();
    }

    /// Shows the panel and makes it the default `/key` target
    /// (re-opening one that is open replaces it).
    fn open(&mut self, out: &mut Out, host: &HostHandle, extension: String, panel: Panel) {
        let closed = self.insert(&extension, &panel.panel_id, panel.title.clone());
        self.closed_for_room(out, host, &extension, closed);
        out.panel(&extension, &panel);
        out.hint(
            "keys: /key up|down|left|right|enter|tab|... [TEXT], one character types it, \
             /key esc closes",
        );
        let size = terminal_size();
        self.size = Some(size);
        resize(host, &extension, &panel.panel_id, size);
    }

    /// An extension's `panel_render`: updates an open panel in place. A
    /// render for a panel that is not open (closed already, or never
    /// opened) is not shown, and is logged (the 1st, 10th, 100th...): it
    /// must not bring a closed panel back.
    fn render(&mut self, out: &mut Out, host: &HostHandle, extension: String, panel: Panel) {
        let shown =
            (self.open.iter_mut()).find(|p| p.extension == extension && p.id == panel.panel_id);
        let Some(old) = shown else {
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
        let closed = self.bound(&extension);
        out.panel(&extension, &shown);
        self.closed_for_room(out, host, &extension, closed);
    }

    /// A panel the user or the extension closed: said, if it was open.
    pub fn close(&mut self, out: &mut Out, extension: &str, panel_id: &str) {
        if self.remove(extension, panel_id) {
            out.line(&format!("panel closed: {extension}/{panel_id}"));
        }
    }

    /// Closes every open panel, oldest first, telling each extension.
    pub fn close_all(&mut self, out: &mut Out, host: &HostHandle) {
        for p in self.open.drain(..) {
            session_closed(out, host, &p.extension, &p.id);
        }
    }

    /// Panels of `extension` closed to make room for a newer one: said,
    /// and sent `panel_close`; logged at the 1st, 10th, 100th...
    fn closed_for_room(
        &mut self,
        out: &mut Out,
        host: &HostHandle,
        extension: &str,
        closed: Vec<String>,
    ) {
        for id in closed {
            session_closed(out, host, extension, &id);
            let n = self.evicted.entry(extension.to_string()).or_default();
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

    /// Every [`SIZE_POLL`] while a panel is open: a new terminal size is
    /// sent to every open panel.
    pub fn poll_size(&mut self, host: &HostHandle) {
        let size = terminal_size();
        if self.open.is_empty() || self.size == Some(size) {
            return;
        }
        self.size = Some(size);
        for p in &self.open {
            resize(host, &p.extension, &p.id, size);
        }
    }

    /// `/key [EXT PANEL] KEY [TEXT]`; `KEY` may be one character (a rune),
    /// `close`, or `esc` (which closes the panel too). What to send, or
    /// `None` after saying what is wrong with the line.
    pub fn key(&mut self, out: &mut Out, args: &str) -> Option<ToPanel> {
        let words: Vec<&str> = args.split_whitespace().collect();
        let explicit = words.len() >= 3 && self.is_open(words[0], words[1]);
        let names_ext = words.len() >= 3 && self.open.iter().any(|p| p.extension == words[0]);
        if !explicit && words.len() >= 2 && (names_ext || !is_key(words[0])) {
            // `/key EXT PANEL KEY` (or `/key PANEL KEY`) naming no open panel.
            let named = if is_key(words[1]) && !names_ext {
                words[0].to_string()
            } else {
                words[..2].join(" ")
            };
            out.error(&format!("no open panel {named:?}; {}", self.open_panels()));
            return None;
        }
        // With no panel named, the most recent one.
        let (extension, panel_id, rest) = match (explicit, self.open.last()) {
            (true, _) => {
                let rest = args.trim_start()[words[0].len()..].trim_start();
                let rest = rest[words[1].len()..].trim_start();
                (words[0].to_string(), words[1].to_string(), rest)
            }
            (false, Some(p)) => (p.extension.clone(), p.id.clone(), args),
            (false, None) => {
                out.error("no open panel (usage: /key [EXT PANEL] KEY [TEXT])");
                return None;
            }
        };
        let (key, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let text = text.trim();
        let (key, text) = match key {
            "" => {
                out.error(&format!(
                    "usage: /key [EXT PANEL] KEY [TEXT]; keys: {} close",
                    PanelKey::NAMES.join(" ")
                ));
                return None;
            }
            // Esc is not forwarded: the host closes the panel and tells
            // the extension, as upstream's UI does.
            "close" | "esc" => {
                self.close(out, &extension, &panel_id);
                return Some(ToPanel::Close {
                    extension,
                    panel_id,
                });
            }
            k => match PanelKey::parse(k) {
                Some(key) => (key, (!text.is_empty()).then(|| text.to_string())),
                None if k.chars().count() == 1 => (PanelKey::Rune, Some(k.to_string())),
                None => {
                    out.error(&format!(
                        "unknown key {k:?} (one of {} close, or one character)",
                        PanelKey::NAMES.join(" ")
                    ));
                    return None;
                }
            },
        };
        Some(ToPanel::Key {
            extension,
            panel_id,
            key,
            text,
        })
    }

    /// `open panels: EXT PANEL, ...`, or that there are none.
    fn open_panels(&self) -> String {
        if self.open.is_empty() {
            return "no panel is open".into();
        }
        let open: Vec<String> = (self.open.iter())
            .map(|p| format!("{} {}", p.extension, p.id))
            .collect();
        format!(
            "open panels: {} (usage: /key [EXT PANEL] KEY [TEXT])",
            open.join(", ")
        )
    }
}

impl Out {
    /// A panel as a boxed block of lines.
    fn panel(&mut self, ext: &str, panel: &Panel) {
        let title = panel.title.as_deref().unwrap_or("");
        let head = inert(&format!("┌─ {title} [{ext}/{}]", panel.panel_id)).into_owned();
        let mut lines = vec![self.paint(Tone::Magenta, &head)];
        for line in panel.lines.iter().flatten() {
            for part in line.split('\n') {
                let bar = self.paint(Tone::Magenta, "│ ");
                lines.push(format!("{bar}{}", inert(part)));
            }
        }
        let foot = match panel.footer.as_deref() {
            Some(f) if !f.is_empty() => inert(&format!("└─ {f}")).into_owned(),
            _ => "└─".to_string(),
        };
        lines.push(self.paint(Tone::Magenta, &foot));
        self.clear_prompt();
        let s: String = lines.into_iter().map(|l| l + "\n").collect();
        self.write(&s);
    }
}

/// A panel the session closed (not the user, not the extension): said,
/// and the extension is sent `panel_close`. Nothing waits for the
/// answer, and an extension that is gone is no news.
fn session_closed(out: &mut Out, host: &HostHandle, extension: &str, panel_id: &str) {
    out.line(&format!("panel closed: {extension}/{panel_id}"));
    host.submit(Request::PanelClose {
        extension: extension.to_string(),
        panel_id: panel_id.to_string(),
        reply: Box::new(|_| {}),
    });
}

/// Sends `panel_resize` (docs/PROTOCOL.md#panels): nothing waits for
/// it; a panel whose extension is gone is no news worth a line.
fn resize(host: &HostHandle, extension: &str, panel_id: &str, (width, height): (u32, u32)) {
    host.submit(Request::PanelResize {
        extension: extension.to_string(),
        panel_id: panel_id.to_string(),
        width,
        height,
        reply: Box::new(|_| {}),
    });
}

/// Whether `word` is something `/key` accepts as a key.
fn is_key(word: &str) -> bool {
    PanelKey::parse(word).is_some() || word == "close" || word.chars().count() == 1
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_over_its_count_loses_its_oldest_panel_only() {
        let mut panels = Panels::default();
        assert!(panels.insert("other", "keep", None).is_empty());
        for n in 0..MAX_PANELS {
            assert!(panels.insert("a", &format!("p{n}"), None).is_empty());
        }
        assert_eq!(panels.insert("a", "newest", None), ["p0"]);
        assert!(panels.is_open("other", "keep"));
        assert!(panels.is_open("a", "newest") && !panels.is_open("a", "p0"));
    }

    #[test]
    fn titles_over_the_bytes_close_the_oldest_but_never_the_newest() {
        let mut panels = Panels::default();
        let big = "x".repeat(MAX_PANEL_BYTES);
        assert!(panels.insert("a", "first", None).is_empty());
        assert_eq!(panels.insert("a", "huge", Some(big.clone())), ["first"]);
        assert!(
            panels.insert("a", "huge", Some(big)).is_empty(),
            "re-opened"
        );
        assert!(panels.is_open("a", "huge"));
    }
}
