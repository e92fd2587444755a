//! What the session prints, and how.
//!
//! Every line has a fixed shape so that a pipe reader can match on it:
//!
//! | line | meaning |
//! |---|---|
//! | `ready: a, b` / `ready: no extensions` | startup readiness (once) |
//! | `[/name] text` | a command's `display` |
//! | `insert: text` | a command's `insert`, offered as the next input |
//! | `prompt: text` | a command's `prompt`; a turn follows (an empty prompt: nothing, no turn) |
//! | `error: text` | any error: a command's `error` (its action is then skipped, as upstream), unknown commands, failed calls, `error: extension a exited (...)`, `error: extension a failed: ...` |
//! | `[ext] level: message` | a note (`info`, `success`, `warn`, `error`) |
//! | `notes cleared for ext (N removed)` | the extension retracted its notes (`clear_notes`) |
//! | `notes cleared (N removed)` | `/clear` |
//! | `┌─ title [ext/panel]`, `│ line`..., `└─ footer` | a panel, opened or re-rendered |
//! | `panel closed: ext/panel` | a panel closed (by the extension, `/key esc` or `/key close`) |
//! | `result: text` / `result error: text` | `/call` result blocks (images: `result: [image image/png, N bytes of base64]`) |
//! | `allowed: tool {args} (built-in tool: ...)` | `/call` of a built-in tool that no guard refused |
//! | `blocked: reason` | a guard refused a `/call`, a `turn_start` or an `assistant_message` |
//! | `would submit: text` | a turn without `--agent-cmd` |
//! | `assistant: text` | the agent's answer, as rewritten by guards |
//! | `reloaded: N stopped, M loaded (K ready)` | `/reload-ext`, followed by one `error:` line per problem |
//! | `registered: ext` | an extension finished registering after startup (not during `/reload-ext`: its report counts it) |
//! | `restarted: ext (attempt N: status)` | a crashed extension is started again |
//! | `cancelled`, `leaving (Ctrl-C again to exit)` | a signal (Ctrl-C, SIGTERM, SIGHUP): work cancelled, or the session ends |
//!
//! Text spanning several lines keeps its prefix on the first line and
//! is indented by the prefix's width on the others. Colour is used only
//! on a terminal without `NO_COLOR`; the prompt and the hints are only
//! shown when both ends are a terminal.

use crate::cli::common::HOST_COMMANDS;
use crate::cli::stdout::Stdout;
use serde_json::Value;
use zot_host::internal::log::inert;
use zot_host::{Content, ExtensionInfo, Snapshot, ToolInfo, ToolResult};

/// Colour of a prefix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tone {
    Plain,
    Bold,
    Dim,
    Red,
    Green,
    Yellow,
    Cyan,
    #[cfg(feature = "panels")]
    Magenta,
}

impl Tone {
    fn code(self) -> &'static str {
        match self {
            Tone::Plain => "",
            Tone::Bold => "1",
            Tone::Dim => "2",
            Tone::Red => "31",
            Tone::Green => "32",
            Tone::Yellow => "33",
            Tone::Cyan => "36",
            #[cfg(feature = "panels")]
            Tone::Magenta => "35",
        }
    }

    /// The tone of a note of `level`.
    pub fn of_level(level: &str) -> Tone {
        match level {
            "error" => Tone::Red,
            "warn" | "warning" => Tone::Yellow,
            "success" => Tone::Green,
            _ => Tone::Cyan,
        }
    }
}

/// The session's stdout, written by a thread of its own
/// ([`crate::cli::stdout`]): the main thread runs the host loop.
pub struct Out {
    color: bool,
    interactive: bool,
    prompt_shown: bool,
    out: Stdout,
}

impl Out {
    /// `color`: use ANSI colours; `interactive`: show the prompt and hints.
    pub fn new(color: bool, interactive: bool, out: Stdout) -> Out {
        Out {
            color,
            interactive,
            prompt_shown: false,
            out,
        }
    }

    /// Whether host events may be taken: few bytes wait for stdout.
    pub fn has_room(&self) -> bool {
        self.out.has_room()
    }

    /// Waits until everything shown so far is written.
    pub fn finish(&mut self) {
        self.out.finish();
    }

    /// Whether prompt and hints are shown.
    pub fn interactive(&self) -> bool {
        self.interactive
    }

    pub(super) fn paint(&self, tone: Tone, s: &str) -> String {
        if !self.color || tone == Tone::Plain || s.is_empty() {
            return s.to_string();
        }
        format!("\x1b[{}m{s}\x1b[0m", tone.code())
    }

    /// Writes raw text. An error ends the session (`closed`): nobody
    /// reads stdout any more (EPIPE), or it cannot take what is shown
    /// (a full disk), which `run` reports on stderr.
    pub(super) fn write(&mut self, s: &str) {
        self.out.write(s.as_bytes().to_vec());
    }

    /// Whether stdout could not be written.
    pub fn closed(&self) -> bool {
        self.out.broken()
    }

    /// Why stdout could not be written, once everything was handed over
    /// ([`Out::finish`]).
    pub fn write_error(&self) -> Option<std::io::Error> {
        self.out.take_error()
    }

    /// Takes the prompt off the screen before other output.
    pub(super) fn clear_prompt(&mut self) {
        if self.prompt_shown {
            self.prompt_shown = false;
            self.write("\r\x1b[K");
        }
    }

    /// `prefix` then `text`; further lines of `text` are indented to
    /// line up with the first.
    pub fn text(&mut self, prefix: &str, tone: Tone, text: &str) {
        self.clear_prompt();
        let indent = " ".repeat(prefix.chars().count());
        let mut s = String::new();
        for (i, line) in text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if i == 0 {
                s.push_str(&self.paint(tone, prefix));
            } else {
                s.push_str(&indent);
            }
            s.push_str(&inert(line));
            s.push('\n');
        }
        self.write(&s);
    }

    /// One line as is.
    pub fn line(&mut self, line: &str) {
        self.text("", Tone::Plain, line);
    }

    /// A whole line in one tone.
    pub fn toned(&mut self, tone: Tone, line: &str) {
        self.clear_prompt();
        let s = format!("{}\n", self.paint(tone, line));
        self.write(&s);
    }

    /// `error: <text>`.
    pub fn error(&mut self, text: &str) {
        self.text("error: ", Tone::Red, text);
    }

    /// A hint for a person at a terminal; nothing through a pipe.
    pub fn hint(&mut self, text: &str) {
        if self.interactive {
            self.toned(Tone::Dim, &format!("({text})"));
        }
    }

    /// Shows the input prompt, once, on a terminal.
    pub fn prompt(&mut self) {
        if self.interactive && !self.prompt_shown {
            let p = self.paint(Tone::Bold, "> ");
            self.write(&p);
            self.prompt_shown = true;
        }
    }

    /// The user finished a line (or pressed Ctrl-D): the prompt is gone.
    pub fn input_taken(&mut self, eof: bool) {
        if eof && self.prompt_shown {
            self.write("\n");
        }
        self.prompt_shown = false;
    }

    /// The terminal echoed `^C`: end that line.
    pub fn interrupted(&mut self) {
        if self.interactive {
            self.prompt_shown = false;
            self.write("\n");
        }
    }

    /// `[ext] level: message`.
    pub fn note(&mut self, ext: &str, level: &str, message: &str) {
        self.text(
            &format!("[{ext}] {level}: "),
            Tone::of_level(level),
            message,
        );
    }

    /// The result of `/call`.
    pub fn tool_outcome(&mut self, outcome: &ToolResult) {
        if outcome.blocked {
            return self.blocked(outcome.reason.as_deref().unwrap_or(""));
        }
        let (prefix, tone) = if outcome.is_error {
            ("result error: ", Tone::Red)
        } else {
            ("result: ", Tone::Green)
        };
        for block in &outcome.content {
            match block {
                Content::Image { mime_type, data } => {
                    let len = data.len();
                    let text = format!("[image {mime_type}, {len} bytes of base64]");
                    self.text(prefix, tone, &text);
                }
                Content::Text(text) | Content::Formatted { text, .. } => {
                    self.text(prefix, tone, text)
                }
            }
        }
        #[cfg(feature = "tool-extras")]
        if let Some(structured) = &outcome.structured_content {
            self.text("structured: ", tone, &structured.to_string());
        }
    }

    /// `blocked: <reason>`.
    pub fn blocked(&mut self, reason: &str) {
        self.text("blocked: ", Tone::Yellow, reason);
    }

    /// Lines lined up in two columns, `left` padded to the widest.
    fn columns(&mut self, rows: &[(String, String)]) {
        let width = rows.iter().map(|(l, _)| l.chars().count()).max();
        for (left, right) in rows {
            let pad = width.unwrap_or(0) - left.chars().count();
            let line = format!("  {left}{}  {right}", " ".repeat(pad));
            self.line(line.trim_end());
        }
    }

    /// `/help`.
    pub fn help(&mut self, snap: &Snapshot) {
        self.toned(Tone::Bold, "host commands:");
        let rows: Vec<(String, String)> = HOST_COMMANDS
            .iter()
            .map(|(names, args, what)| {
                let names: Vec<String> = names.iter().map(|n| format!("/{n}")).collect();
                (names.join(", ") + args, what.to_string())
            })
            .collect();
        self.columns(&rows);
        self.commands(snap);
        self.line("Anything else that does not start with / is a prompt.");
    }

    /// `title:` and `rows` in columns, or `title: none`.
    fn table(&mut self, title: &str, rows: &[(String, String)]) {
        if rows.is_empty() {
            return self.line(&format!("{title}: none"));
        }
        self.toned(Tone::Bold, &format!("{title}:"));
        self.columns(rows);
    }

    /// `/commands`.
    pub fn commands(&mut self, snap: &Snapshot) {
        let rows: Vec<(String, String)> = snap
            .commands
            .iter()
            .map(|c| (format!("/{}", c.name), owned(&c.description, &c.extension)))
            .collect();
        self.table("extension commands", &rows);
    }

    /// `/tools`.
    pub fn tools(&mut self, snap: &Snapshot) {
        let rows: Vec<(String, String)> = snap
            .tools
            .iter()
            .map(|t| {
                let right = owned(&t.description, &t.extension);
                // Upstream's model does not see an inactive deferred tool.
                #[cfg(feature = "tool-extras")]
                let right = match t.active {
                    true => right,
                    false => right + " [deferred: not active yet]",
                };
                (signature(t), right)
            })
            .collect();
        self.table("tools", &rows);
    }

    /// `/ext`.
    pub fn extensions(&mut self, snap: &Snapshot) {
        let rows: Vec<(String, String)> = snap.extensions.iter().map(ext_row).collect();
        self.table("extensions", &rows);
    }
}

fn owned(description: &str, extension: &str) -> String {
    if description.is_empty() {
        format!("({extension})")
    } else {
        format!("{description} ({extension})")
    }
}

/// `name(arg: type, optional?: type)` from a tool's JSON Schema.
pub fn signature(tool: &ToolInfo) -> String {
    let Some(schema) = &tool.schema else {
        return format!("{}(any)", tool.name);
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let args: Vec<String> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(name, prop)| {
                    let opt = if required.contains(&name.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    format!("{name}{opt}: {}", type_of(prop))
                })
                .collect()
        })
        .unwrap_or_default();
    format!("{}({})", tool.name, args.join(", "))
}

/// A short name for the type a schema describes.
fn type_of(prop: &Value) -> String {
    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(Value::to_string).collect();
        return values.join("|");
    }
    match prop.get("type") {
        Some(Value::String(t)) if t == "array" => match prop.get("items") {
            Some(items) => format!("{}[]", type_of(items)),
            None => "array".into(),
        },
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => {
            let ts: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            ts.join("|")
        }
        _ => "any".into(),
    }
}

fn ext_row(e: &ExtensionInfo) -> (String, String) {
    let mut right = format!("{}  {}", e.scope, e.state);
    if let Some(pid) = e.pid {
        right.push_str(&format!("  pid {pid}"));
    }
    if e.restarts > 0 {
        right.push_str(&format!("  restarts {}", e.restarts));
    }
    if let Some(v) = &e.version {
        right.push_str(&format!("  v{v}"));
    }
    #[cfg(feature = "bundles")]
    if !e.skills.is_empty() || e.theme.is_some() {
        let provides = zot_host::internal::bundle::Provides {
            skills: e.skills.clone(),
            theme: e.theme.clone(),
            ..Default::default()
        };
        right.push_str(&format!("  {}", provides.summary()));
    }
    right.push_str(&format!("  {}", e.dir.display()));
    if let Some(err) = e.state.error() {
        right.push_str(&format!("  error: {err}"));
    }
    (e.name.clone(), right)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Which other fields a ToolInfo has depends on the build's features.
    #[allow(clippy::needless_update)]
    fn tool(schema: Option<Value>) -> ToolInfo {
        ToolInfo {
            name: "t".into(),
            description: String::new(),
            schema,
            extension: "x".into(),
            ..Default::default()
        }
    }

    #[test]
    fn signatures_summarise_schemas() {
        assert_eq!(signature(&tool(None)), "t(any)");
        assert_eq!(signature(&tool(Some(json!({"type": "object"})))), "t()");
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "unit": {"enum": ["c", "f"]},
                "any": {}
            },
            "required": ["city"]
        });
        assert_eq!(
            signature(&tool(Some(schema))),
            r#"t(city: string, days?: integer, tags?: string[], unit?: "c"|"f", any?: any)"#
        );
    }
}
