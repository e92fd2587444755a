//! Wire frames (SPEC section 2) and the line reader that turns an
//! extension's stdout into frames.
//!
//! Every frame is one JSON object on one `\n`-terminated line. Frames
//! from the extension are parsed into [`ExtFrame`]; frames to the
//! extension are built as [`HostFrame`] and serialised once.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::{self, BufRead};

/// Longest line accepted from an extension; longer lines are discarded.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Deepest nesting of arrays and objects accepted in one JSON text
/// (frame, rpc request, manifest). serde_json parses, converts, drops
/// and serialises values recursively, so unbounded depth would reach
/// the stack; [`check_depth`] refuses deeper input before any of that.
/// Real frames nest a few levels; tool schemas and args a dozen or so.
pub const MAX_DEPTH: usize = 64;

/// Keys a `panel_key` frame may carry.
pub const PANEL_KEYS: [&str; 14] = [
    "up",
    "down",
    "left",
    "right",
    "enter",
    "esc",
    "tab",
    "backspace",
    "delete",
    "home",
    "end",
    "pageup",
    "pagedown",
    "rune",
];

/// Protocol version announced in `hello_ack`.
pub const PROTOCOL_VERSION: u32 = 1;

/// A frame sent by an extension to the host.
#[derive(Debug, Clone)]
pub enum ExtFrame {
    /// Mandatory first frame.
    Hello {
        /// Extension name; must be non-empty (the manifest's name wins).
        name: String,
        /// Extension version, used when the manifest has none.
        version: Option<String>,
        /// Declared capabilities; parsed but not acted on.
        capabilities: Option<Vec<String>>,
    },
    /// Adds a slash command.
    RegisterCommand {
        /// Command name, without the slash.
        name: String,
        /// One-line help text.
        description: Option<String>,
    },
    /// Adds an LLM-callable tool.
    RegisterTool {
        /// Tool name.
        name: String,
        /// What the tool does, for the model.
        description: Option<String>,
        /// JSON Schema of the arguments; must be an object when present.
        schema: Option<Value>,
    },
    /// Declares observed and intercepted lifecycle events.
    Subscribe {
        /// Events to receive as one-way `event` frames.
        events: Option<Vec<String>>,
        /// Events to receive as `event_intercept` (interceptable ones only).
        intercept: Option<Vec<String>>,
    },
    /// All initial registrations are sent.
    Ready,
    /// Reply to `command_invoked`.
    CommandResponse(CommandResponse),
    /// Reply to `tool_call`.
    ToolResult {
        /// Id of the `tool_call` answered.
        id: String,
        /// Text and image content blocks.
        content: Option<Vec<Value>>,
        /// Whether the result is an error (default false).
        is_error: Option<bool>,
    },
    /// Reply to `event_intercept`.
    EventInterceptResponse {
        /// Id of the `event_intercept` answered.
        id: String,
        /// Block the event (default false).
        block: Option<bool>,
        /// Why it was blocked.
        reason: Option<String>,
        /// `tool_call` only: replacement tool arguments.
        modified_args: Option<Value>,
        /// `assistant_message` only: replacement text, when non-empty.
        replace_text: Option<String>,
    },
    /// A note for the user.
    Notify {
        /// `info`, `success`, `warn` or `error` (default and fallback `info`).
        level: Option<String>,
        /// The note's text.
        message: String,
    },
    /// Retract every note this extension pushed.
    ClearNotes,
    /// Show or update a panel.
    PanelRender(Panel),
    /// Close a panel.
    PanelClose {
        /// The panel to close.
        panel_id: String,
    },
    /// Answer to `shutdown`.
    ShutdownAck,
    /// Internal, never read from the wire: an MCP server's command left
    /// its prompt list (SPEC 11).
    UnregisterCommand {
        /// Command name.
        name: String,
    },
    /// Internal, never read from the wire: an MCP server's tool left its
    /// tool list (SPEC 11).
    UnregisterTool {
        /// Tool name.
        name: String,
    },
}

impl ExtFrame {
    /// The frame's `type` string, for diagnostics.
    pub fn kind(&self) -> &'static str {
        match self {
            ExtFrame::Hello { .. } => "hello",
            ExtFrame::RegisterCommand { .. } => "register_command",
            ExtFrame::RegisterTool { .. } => "register_tool",
            ExtFrame::Subscribe { .. } => "subscribe",
            ExtFrame::Ready => "ready",
            ExtFrame::CommandResponse(_) => "command_response",
            ExtFrame::ToolResult { .. } => "tool_result",
            ExtFrame::EventInterceptResponse { .. } => "event_intercept_response",
            ExtFrame::Notify { .. } => "notify",
            ExtFrame::ClearNotes => "clear_notes",
            ExtFrame::PanelRender(_) => "panel_render",
            ExtFrame::PanelClose { .. } => "panel_close",
            ExtFrame::ShutdownAck => "shutdown_ack",
            ExtFrame::UnregisterCommand { .. } => "unregister_command",
            ExtFrame::UnregisterTool { .. } => "unregister_tool",
        }
    }
}

/// Body of `command_response`.
#[derive(Debug, Clone)]
pub struct CommandResponse {
    /// Id of the `command_invoked` answered.
    pub id: String,
    /// `prompt`, `insert`, `display`, `noop` or `open_panel`.
    pub action: Option<String>,
    /// Text to submit as a user message.
    pub prompt: Option<String>,
    /// Text for the input line.
    pub insert: Option<String>,
    /// A one-shot note.
    pub display: Option<String>,
    /// The panel to open, for `open_panel`.
    pub open_panel: Option<OpenPanel>,
    /// An error to show, whatever the action.
    pub error: Option<String>,
}

/// `command_response.open_panel`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OpenPanel {
    /// Panel id, chosen by the extension.
    pub id: String,
    /// Heading line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Body lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    /// Line shown below the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
}

/// `panel_render` from an extension.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Panel {
    /// Panel id, chosen by the extension.
    pub panel_id: String,
    /// Heading line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Body lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    /// Line shown below the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
}

/// Payload shared by `event` and `event_intercept`. Empty fields are
/// left out of the frame.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventPayload {
    /// `turn_start`: the step number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// `turn_end`: why the turn stopped.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub stop: Option<String>,
    /// `turn_end`: an error, when the turn failed.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub error: Option<String>,
    /// `tool_call`: the call's id.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub tool_id: Option<String>,
    /// `tool_call`: the tool's name.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub tool_name: Option<String>,
    /// `tool_call`: the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_args: Option<Value>,
    /// `assistant_message`: the text.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub text: Option<String>,
}

fn is_empty(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

/// A frame sent by the host to an extension.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostFrame<'a> {
    /// Answer to `hello`.
    HelloAck {
        /// Always [`PROTOCOL_VERSION`].
        protocol_version: u32,
        /// Version of the embedding zot.
        zot_version: &'a str,
        /// The LLM provider in use.
        provider: &'a str,
        /// The model in use.
        model: &'a str,
        /// The user's project directory.
        cwd: &'a str,
        /// The extension's absolute directory.
        extension_dir: &'a str,
        /// Where the extension may keep data (its directory too).
        data_dir: &'a str,
    },
    /// Run a slash command.
    CommandInvoked {
        /// Request id, echoed by `command_response`.
        id: &'a str,
        /// Command name, without the slash.
        name: &'a str,
        /// Text after the command name, trimmed.
        args: &'a str,
    },
    /// Run a tool.
    ToolCall {
        /// Request id, echoed by `tool_result`.
        id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Tool arguments (`{}` when none).
        args: &'a Value,
    },
    /// A lifecycle event, one-way.
    Event {
        /// Event name, e.g. `turn_start`.
        event: &'a str,
        /// Event fields, flattened into the frame.
        #[serde(flatten)]
        payload: &'a EventPayload,
    },
    /// A lifecycle event the extension may block or rewrite.
    EventIntercept {
        /// Request id, echoed by `event_intercept_response`.
        id: &'a str,
        /// `tool_call`, `turn_start` or `assistant_message`.
        event: &'a str,
        /// Event fields, flattened into the frame.
        #[serde(flatten)]
        payload: &'a EventPayload,
    },
    /// A key pressed in a panel the extension opened.
    PanelKey {
        /// The panel the key was pressed in.
        panel_id: &'a str,
        /// One of [`PANEL_KEYS`].
        key: &'a str,
        /// The typed text, for `rune`.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<&'a str>,
    },
    /// The user closed a panel.
    PanelClose {
        /// The panel that was closed.
        panel_id: &'a str,
    },
    /// Please acknowledge and exit.
    Shutdown,
}

impl HostFrame<'_> {
    /// The frame as one `\n`-terminated line.
    pub fn to_line(&self) -> Vec<u8> {
        // Serialising these types cannot fail: every map key is a string.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// What the line reader produced.
#[derive(Debug)]
pub enum Line {
    /// A complete line without its terminator, `\r` or leading BOM.
    Text(Vec<u8>),
    /// A line longer than the limit; it was discarded. Carries its length.
    TooLong(usize),
}

/// Reads `\n`-terminated lines with a length cap, discarding over-long
/// lines instead of buffering them.
pub struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: BufRead> LineReader<R> {
    /// Reads lines from `inner`, discarding any longer than `max` bytes.
    pub fn new(inner: R, max: usize) -> Self {
        LineReader { inner, max }
    }

    /// The next line, or `None` at end of stream. A final line without
    /// a terminator is still returned.
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut seen = 0usize;
        let mut overflow = false;
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                if seen == 0 {
                    return Ok(None);
                }
                break;
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], i + 1),
                None => (buf, buf.len()),
            };
            let found_newline = done > chunk.len();
            seen += chunk.len();
            if !overflow {
                if seen > self.max {
                    overflow = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            self.inner.consume(done);
            if found_newline {
                break;
            }
        }
        if overflow {
            return Ok(Some(Line::TooLong(seen)));
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.starts_with(b"\xEF\xBB\xBF") {
            line.drain(..3);
        }
        Ok(Some(Line::Text(line)))
    }
}

/// A frame's fields, taken one by one with the type the frame's `type`
/// gives them. Fields the frame does not use are never looked at, so
/// unknown (or, for this type, irrelevant) fields are ignored.
struct Fields(serde_json::Map<String, Value>);

impl Fields {
    /// An optional field; `null` counts as absent.
    fn opt<T: serde::de::DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, String> {
        match self.0.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| format!("field `{key}`: {e}")),
        }
    }

    /// A required field.
    fn req<T: serde::de::DeserializeOwned>(&mut self, key: &str) -> Result<T, String> {
        self.opt(key)?
            .ok_or_else(|| format!("missing field `{key}`"))
    }

    fn into_frame(mut self) -> Result<ExtFrame, String> {
        let kind: String = self.req("type")?;
        Ok(match kind.as_str() {
            "hello" => ExtFrame::Hello {
                name: self.req("name")?,
                version: self.opt("version")?,
                capabilities: self.opt("capabilities")?,
            },
            "register_command" => ExtFrame::RegisterCommand {
                name: self.req("name")?,
                description: self.opt("description")?,
            },
            "register_tool" => ExtFrame::RegisterTool {
                name: self.req("name")?,
                description: self.opt("description")?,
                schema: self.opt("schema")?,
            },
            "subscribe" => ExtFrame::Subscribe {
                events: self.opt("events")?,
                intercept: self.opt("intercept")?,
            },
            "ready" => ExtFrame::Ready,
            "command_response" => ExtFrame::CommandResponse(CommandResponse {
                id: self.req("id")?,
                action: self.opt("action")?,
                prompt: self.opt("prompt")?,
                insert: self.opt("insert")?,
                display: self.opt("display")?,
                open_panel: self.opt("open_panel")?,
                error: self.opt("error")?,
            }),
            "tool_result" => ExtFrame::ToolResult {
                id: self.req("id")?,
                content: self.opt("content")?,
                is_error: self.opt("is_error")?,
            },
            "event_intercept_response" => ExtFrame::EventInterceptResponse {
                id: self.req("id")?,
                block: self.opt("block")?,
                reason: self.opt("reason")?,
                modified_args: self.opt("modified_args")?,
                replace_text: self.opt("replace_text")?,
            },
            "notify" => ExtFrame::Notify {
                level: self.opt("level")?,
                message: self.req("message")?,
            },
            "clear_notes" => ExtFrame::ClearNotes,
            "panel_render" => ExtFrame::PanelRender(Panel {
                panel_id: self.req("panel_id")?,
                title: self.opt("title")?,
                lines: self.opt("lines")?,
                footer: self.opt("footer")?,
            }),
            "panel_close" => ExtFrame::PanelClose {
                panel_id: self.req("panel_id")?,
            },
            "shutdown_ack" => ExtFrame::ShutdownAck,
            other => return Err(format!("unknown frame type `{other}`")),
        })
    }
}

/// Checks, without recursion and in one pass, that `json` nests arrays
/// and objects at most [`MAX_DEPTH`] deep. Brackets inside strings do
/// not count; malformed text is left for the parser to reject.
pub fn check_depth(json: &[u8]) -> Result<(), String> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("nested deeper than {MAX_DEPTH} levels"));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Parses one line into a frame, or says in one line why it cannot.
pub fn parse_ext_frame(line: &[u8]) -> Result<ExtFrame, String> {
    check_depth(line)
        .and_then(|()| serde_json::from_slice(line).map_err(|e| e.to_string()))
        .and_then(|map| Fields(map).into_frame())
        .map_err(|e| {
            let snippet = String::from_utf8_lossy(&line[..line.len().min(120)]);
            format!("dropped frame ({e}): {snippet}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<String> {
        let mut r = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            out.push(match l {
                Line::Text(t) => String::from_utf8(t).unwrap(),
                Line::TooLong(n) => format!("<too long {n}>"),
            });
        }
        out
    }

    #[test]
    fn strips_crlf_and_bom_and_caps_lines() {
        let got = lines(b"a\r\n\xEF\xBB\xBFb\nccccccccc\nd", 4);
        assert_eq!(got, ["a", "b", "<too long 9>", "d"]);
    }

    #[test]
    fn parses_every_extension_frame() {
        let ok = [
            r#"{"type":"hello","name":"x","extra":1}"#,
            r#"{"type":"register_command","name":"c"}"#,
            r#"{"type":"register_tool","name":"t","schema":{"type":"object"}}"#,
            r#"{"type":"subscribe","events":["turn_end"],"intercept":["tool_call"]}"#,
            r#"{"type":"ready","x":2}"#,
            r#"{"type":"command_response","id":"1","action":"display","display":"hi"}"#,
            r#"{"type":"tool_result","id":"1","content":[]}"#,
            r#"{"type":"event_intercept_response","id":"1","block":true}"#,
            r#"{"type":"notify","level":"warn","message":"m"}"#,
            r#"{"type":"clear_notes"}"#,
            r#"{"type":"panel_render","panel_id":"p","lines":["a"]}"#,
            r#"{"type":"panel_close","panel_id":"p"}"#,
            r#"{"type":"shutdown_ack"}"#,
            // Fields other frame types use, with other types: ignored here.
            r#"{"type":"register_tool","name":"t","lines":"x","id":7}"#,
            r#"{"type":"notify","message":"m","title":3}"#,
        ];
        for line in ok {
            let frame = parse_ext_frame(line.as_bytes()).unwrap();
            assert!(line.contains(frame.kind()), "{line}");
        }
        for bad in [
            "not json",
            r#"{"name":"x"}"#,
            r#"{"type":"nope"}"#,
            r#"{"type":"hello","name":5}"#,
            r#"[1,2]"#,
        ] {
            let err = parse_ext_frame(bad.as_bytes()).unwrap_err();
            assert!(err.starts_with("dropped frame"), "{err}");
        }
    }

    #[test]
    fn depth_is_checked_without_recursion() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check_depth(nest(MAX_DEPTH).as_bytes()).is_ok());
        assert!(check_depth(nest(MAX_DEPTH + 1).as_bytes()).is_err());
        assert!(check_depth(nest(1_000_000).as_bytes()).is_err());
        // Brackets in strings, escaped quotes included, do not count.
        let quoted = format!(r#"{{"a":"\"{}"}}"#, "[".repeat(500));
        assert!(check_depth(quoted.as_bytes()).is_ok(), "{quoted}");
        let deep = format!(r#"{{"type":"notify","message":"m","j":{}}}"#, nest(200));
        let err = parse_ext_frame(deep.as_bytes()).unwrap_err();
        assert!(err.contains("nested deeper than 64 levels"), "{err}");
    }

    #[test]
    fn event_frames_omit_empty_fields() {
        let payload = EventPayload {
            step: Some(1),
            stop: Some(String::new()),
            ..Default::default()
        };
        let line = HostFrame::Event {
            event: "turn_start",
            payload: &payload,
        }
        .to_line();
        assert_eq!(
            line,
            b"{\"type\":\"event\",\"event\":\"turn_start\",\"step\":1}\n"
        );
    }
}
