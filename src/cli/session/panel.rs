//! Panels: opened by a command's `open_panel` or an extension's
//! `panel_render`, shown as boxed blocks, driven with `/key`.

use super::{Done, Pending, Session};
use zot_host::protocol::{Panel, PANEL_KEYS};
use zot_host::Request;

impl Session {
    /// `/key [EXT PANEL] KEY [TEXT]`; `KEY` may be one character (a rune)
    /// or `close`.
    pub(super) fn key(&mut self, args: &str) {
        let words: Vec<&str> = args.split_whitespace().collect();
        let explicit = words.len() >= 3
            && self
                .panels
                .iter()
                .any(|(e, p)| e == words[0] && p.panel_id == words[1]);
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
                    PANEL_KEYS.join(" ")
                ))
            }
            "close" => {
                self.close_panel(&ext, &panel);
                let reply = self.reply(Done::Unit);
                let request = Request::PanelClose {
                    extension: ext,
                    panel_id: panel,
                    reply,
                };
                return self.submit(Pending::PanelKey, request);
            }
            k if PANEL_KEYS.contains(&k) => (k, (!text.is_empty()).then(|| text.to_string())),
            k if k.chars().count() == 1 => ("rune", Some(k.to_string())),
            k => {
                return self.out.error(&format!(
                    "unknown key {k:?} (one of {} close, or one character)",
                    PANEL_KEYS.join(" ")
                ))
            }
        };
        let reply = self.reply(Done::Unit);
        let request = Request::PanelKey {
            extension: ext,
            panel_id: panel,
            key: key.to_string(),
            text,
            reply,
        };
        self.submit(Pending::PanelKey, request);
    }

    /// Opens or updates a panel; fields a render leaves out are kept.
    pub(super) fn render_panel(&mut self, extension: String, panel: Panel) {
        let pos = self
            .panels
            .iter()
            .position(|(e, p)| *e == extension && p.panel_id == panel.panel_id);
        let merged = match pos.map(|i| self.panels.remove(i)) {
            Some((_, old)) => Panel {
                panel_id: panel.panel_id,
                title: panel.title.or(old.title),
                lines: panel.lines.or(old.lines),
                footer: panel.footer.or(old.footer),
            },
            None => panel,
        };
        self.out.panel(&extension, &merged);
        if pos.is_none() {
            self.out
                .hint("keys: /key up|down|left|right|enter|esc|tab|... [TEXT], one character types it, /key close closes");
        }
        self.panels.push((extension, merged));
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
