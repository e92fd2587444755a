//! Wire frames (SPEC section 2) and the line reader that turns an
//! extension's stdout into frames.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::io::{self, BufRead};

/// Longest line accepted from an extension; longer lines are discarded.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Deepest nesting accepted in one JSON text (frame, rpc request,
/// manifest): serde_json recurses, so deeper input would reach the stack.
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

/// Event names an extension may subscribe to (SPEC 14.4, upstream's
/// list); the host emits the first five itself, the embedder any.
pub const EVENT_NAMES: [&str; 14] = [
    "session_start",
    "turn_start",
    "turn_end",
    "tool_call",
    "assistant_message",
    "session_end",
    "user_prompt_submit",
    "tool_result",
    "tool_confirmation_requested",
    "permission_decision",
    "pre_compact",
    "post_compact",
    "subagent_start",
    "subagent_stop",
];

/// Payload keys the host sets itself: the frame's own keys, and the
/// event counter (SPEC 14.4). An embedder's payload may not carry them.
pub const RESERVED_EVENT_FIELDS: [&str; 4] = ["type", "event", "id", "sequence"];

/// Protocol version announced in `hello_ack`.
pub const PROTOCOL_VERSION: u32 = 1;

/// A frame sent by an extension to the host; the variants and fields
/// are the frames of SPEC section 2.
#[allow(missing_docs)]
#[derive(Debug, Clone)]
pub enum ExtFrame {
    Hello {
        name: String,
        /// Used when the manifest has no version.
        version: Option<String>,
        /// Parsed (a wrong type drops the frame) but not acted on.
        capabilities: Option<Vec<String>>,
    },
    RegisterCommand {
        name: String,
        description: Option<String>,
    },
    RegisterTool {
        name: String,
        description: Option<String>,
        schema: Option<Value>,
    },
    Subscribe {
        events: Option<Vec<String>>,
        intercept: Option<Vec<String>>,
    },
    Ready,
    CommandResponse(CommandResponse),
    ToolResult {
        id: String,
        content: Option<Vec<Value>>,
        is_error: Option<bool>,
    },
    EventInterceptResponse {
        id: String,
        block: Option<bool>,
        reason: Option<String>,
        modified_args: Option<Value>,
        replace_text: Option<String>,
    },
    Notify {
        level: Option<String>,
        message: String,
    },
    ClearNotes,
    PanelRender(Panel),
    PanelClose {
        panel_id: String,
    },
    ShutdownAck,
    /// Internal, never read from the wire: an MCP server's prompt left
    /// its list (SPEC 11).
    UnregisterCommand {
        name: String,
    },
    /// Internal, never read from the wire: an MCP server's tool left its
    /// list (SPEC 11).
    UnregisterTool {
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

/// Body of `command_response` (SPEC section 2).
#[allow(missing_docs)]
#[derive(Debug, Clone)]
pub struct CommandResponse {
    pub id: String,
    /// `prompt`, `insert`, `display`, `noop` or `open_panel`.
    pub action: Option<String>,
    pub prompt: Option<String>,
    pub insert: Option<String>,
    pub display: Option<String>,
    pub open_panel: Option<OpenPanel>,
    /// An error to show, whatever the action.
    pub error: Option<String>,
}

/// `command_response.open_panel`.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct OpenPanel {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
}

/// `panel_render` from an extension.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Panel {
    pub panel_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
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
    /// Any other field (`reason`, `status`, `session_id`...), passed
    /// through unchanged (SPEC 14.4); none of [`RESERVED_EVENT_FIELDS`].
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

impl EventPayload {
    /// The first of [`RESERVED_EVENT_FIELDS`] the payload carries, if any.
    pub fn reserved_field(&self) -> Option<&'static str> {
        RESERVED_EVENT_FIELDS
            .into_iter()
            .find(|k| self.extra.contains_key(*k))
    }
}

fn is_empty(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

/// A frame sent by the host to an extension (SPEC section 2).
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostFrame<'a> {
    HelloAck {
        protocol_version: u32,
        zot_version: &'a str,
        provider: &'a str,
        model: &'a str,
        cwd: &'a str,
        extension_dir: &'a str,
        data_dir: &'a str,
    },
    CommandInvoked {
        id: &'a str,
        name: &'a str,
        args: &'a str,
    },
    ToolCall {
        id: &'a str,
        name: &'a str,
        args: &'a Value,
    },
    /// `sequence` counts every event of the host's life; `session_id`
    /// and `cwd` are left out when the payload gives its own (SPEC 14.4).
    Event {
        event: &'a str,
        sequence: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        session_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cwd: Option<&'a str>,
        #[serde(flatten)]
        payload: &'a EventPayload,
    },
    EventIntercept {
        id: &'a str,
        event: &'a str,
        #[serde(flatten)]
        payload: &'a EventPayload,
    },
    PanelKey {
        panel_id: &'a str,
        key: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<&'a str>,
    },
    PanelClose {
        panel_id: &'a str,
    },
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
        let (mut line, mut seen) = (Vec::new(), 0usize);
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
            let newline = buf.iter().position(|&b| b == b'\n');
            let chunk = &buf[..newline.unwrap_or(buf.len())];
            seen += chunk.len();
            if seen <= self.max {
                line.extend_from_slice(chunk);
            } else {
                line = Vec::new();
            }
            let used = newline.map_or(buf.len(), |i| i + 1);
            self.inner.consume(used);
            if newline.is_some() {
                break;
            }
        }
        if seen > self.max {
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

/// Parses one JSON text (frame, rpc or MCP message, manifest), refusing
/// nesting deeper than [`MAX_DEPTH`] before serde recurses into it.
pub fn parse_json<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    check_depth(json)?;
    serde_json::from_slice(json).map_err(|e| e.to_string())
}

/// Checks without recursion that `json` nests at most [`MAX_DEPTH`] deep.
/// Brackets inside strings do not count; malformed text is left for the parser.
fn check_depth(json: &[u8]) -> Result<(), String> {
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
    parse_json(line)
        .and_then(|map| Fields(map).into_frame())
        .map_err(|e| format!("dropped frame ({e}): {}", snippet(line)))
}

/// The start of a dropped line, for the log.
pub(crate) fn snippet(line: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(&line[..line.len().min(120)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_other_frame_types_are_ignored() {
        for line in [
            r#"{"type":"register_tool","name":"t","lines":"x","id":7}"#,
            r#"{"type":"notify","message":"m","title":3}"#,
        ] {
            let frame = parse_ext_frame(line.as_bytes()).unwrap();
            assert!(line.contains(frame.kind()), "{line}");
        }
    }

    #[test]
    fn depth_limit_is_exact_and_ignores_brackets_in_strings() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check_depth(nest(MAX_DEPTH).as_bytes()).is_ok());
        assert!(check_depth(nest(MAX_DEPTH + 1).as_bytes()).is_err());
        let quoted = format!(r#"{{"a":"\"{}"}}"#, "[".repeat(500));
        assert!(check_depth(quoted.as_bytes()).is_ok(), "{quoted}");
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
            sequence: 3,
            session_id: Some("s"),
            cwd: None,
            payload: &payload,
        }
        .to_line();
        assert_eq!(
            line,
            b"{\"type\":\"event\",\"event\":\"turn_start\",\"sequence\":3,\"session_id\":\"s\",\"step\":1}\n"
        );
    }
}
