//! Wire frames (docs/PROTOCOL.md#wire-format) and the line reader that turns an
//! extension's stdout into frames.

#[cfg(feature = "panels")]
use crate::wire::panels::{OpenPanel, Panel, PanelKey};
use crate::wire::toolresult::Block;
use crate::wire::toolresult::Content;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::io::{self, BufRead};

/// Longest line accepted from an extension; longer lines are discarded.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Deepest nesting accepted in one JSON text (frame, rpc request,
/// manifest): serde_json recurses, so deeper input would reach the stack.
pub(crate) const MAX_DEPTH: usize = 64;

/// Event names an extension may subscribe to (docs/PROTOCOL.md#events, upstream's
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
/// event counter (docs/PROTOCOL.md#events). An embedder's payload may not carry them.
pub(crate) const RESERVED_EVENT_FIELDS: [&str; 4] = ["type", "event", "id", "sequence"];

/// Protocol version announced in `hello_ack`.
pub const PROTOCOL_VERSION: u32 = 1;

/// What `hello_ack.capabilities` says this host supports (docs/PROTOCOL.md#capabilities):
/// `panels` only in a build with the `panels` feature, `call_tool` only
/// with the `ext-calls` feature.
pub const HOST_CAPABILITIES: &[&str] = &[
    "commands",
    "tools",
    "events",
    #[cfg(feature = "panels")]
    "panels",
    "tool_cancel",
    #[cfg(feature = "ext-calls")]
    "call_tool",
];

/// A frame sent by an extension to the host; the variants and fields
/// are the frames of docs/PROTOCOL.md#frames-from-extensions. The wire
/// tags a frame with its `type` field; the frame reader finds it and
/// hands it to this derive as the variant's name (`Tagged`, in this file).
#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtFrame {
    Hello {
        name: String,
        /// Used when the manifest has no version.
        version: Option<String>,
        /// `tool_cancel` and `call_tool` are acted on (docs/PROTOCOL.md#capabilities); other
        /// names are ignored.
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
        /// Upstream's optional fields (docs/PROTOCOL.md#structured-and-deferred-tools).
        #[serde(flatten)]
        extra: ToolExtras,
    },
    Subscribe {
        events: Option<Vec<String>>,
        intercept: Option<Vec<String>>,
    },
    Ready,
    CommandResponse(CommandResponse),
    ToolResult {
        id: String,
        content: Option<Vec<Block>>,
        is_error: Option<bool>,
        /// Any JSON, for callers of a tool with an `output_schema`; a
        /// reconcile answer's state (docs/PROTOCOL.md#replay-and-reconcile).
        #[cfg(any(feature = "tool-extras", feature = "journal"))]
        structured_content: Option<Value>,
        /// Deferred tools of this extension to activate
        /// (docs/PROTOCOL.md#structured-and-deferred-tools).
        #[cfg(feature = "tool-extras")]
        activate_tools: Option<Vec<String>>,
    },
    EventInterceptResponse {
        id: String,
        block: Option<bool>,
        reason: Option<String>,
        modified_args: Option<Value>,
        replace_text: Option<String>,
        /// `before_agent_start` (docs/PROTOCOL.md#system-prompt): kept raw, so that a number
        /// is reported as such rather than dropping the whole answer.
        system_prompt: Option<Value>,
    },
    /// A tool call of the extension's own (docs/PROTOCOL.md#calls-from-extensions). Fields are kept
    /// loose so that each mistake gets an error result, not silence.
    CallTool {
        id: Option<Value>,
        name: Option<Value>,
        args: Option<Value>,
        parent_id: Option<String>,
    },
    CallToolCancel {
        id: String,
    },
    Notify {
        level: Option<String>,
        message: String,
    },
    ClearNotes,
    #[cfg(feature = "panels")]
    PanelRender(Panel),
    #[cfg(feature = "panels")]
    PanelClose {
        panel_id: String,
    },
    /// A panel opened outside any command (docs/PROTOCOL.md#panels): its `panel` field.
    #[cfg(feature = "panels")]
    #[serde(deserialize_with = "crate::wire::panels::panel_field")]
    OpenPanel(OpenPanel),
    /// A prompt to run as if the user typed it (docs/PROTOCOL.md#submits).
    #[cfg(feature = "panels")]
    Submit {
        text: String,
    },
    /// A slash command line to run as if typed; starts with `/`.
    #[cfg(feature = "panels")]
    SubmitSlash {
        text: String,
    },
    ShutdownAck,
    /// Internal, never read from the wire: an MCP server's prompt left
    /// its list (docs/PROTOCOL.md#mcp-servers).
    #[serde(skip_deserializing)]
    UnregisterCommand {
        name: String,
    },
    /// Internal, never read from the wire: an MCP server's tool left its
    /// list (docs/PROTOCOL.md#mcp-servers).
    #[serde(skip_deserializing)]
    UnregisterTool {
        name: String,
    },
    /// Internal: a line that could not be read (over [`MAX_LINE`] bytes,
    /// too deep, not a valid frame) whose start says it is a frame `kind`
    /// with `id` (empty for `hello`; see `frame_head`); `why` completes
    /// "it ...".
    #[serde(skip_deserializing)]
    Unreadable {
        kind: String,
        id: String,
        why: String,
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
            ExtFrame::CallTool { .. } => "call_tool",
            ExtFrame::CallToolCancel { .. } => "call_tool_cancel",
            ExtFrame::Notify { .. } => "notify",
            ExtFrame::ClearNotes => "clear_notes",
            #[cfg(feature = "panels")]
            ExtFrame::PanelRender(_) => "panel_render",
            #[cfg(feature = "panels")]
            ExtFrame::PanelClose { .. } => "panel_close",
            #[cfg(feature = "panels")]
            ExtFrame::OpenPanel(_) => "open_panel",
            #[cfg(feature = "panels")]
            ExtFrame::Submit { .. } => "submit",
            #[cfg(feature = "panels")]
            ExtFrame::SubmitSlash { .. } => "submit_slash",
            ExtFrame::ShutdownAck => "shutdown_ack",
            ExtFrame::UnregisterCommand { .. } => "unregister_command",
            ExtFrame::UnregisterTool { .. } => "unregister_tool",
            ExtFrame::Unreadable { .. } => "unreadable",
        }
    }
}

/// `register_tool`'s optional fields from upstream
/// (docs/PROTOCOL.md#structured-and-deferred-tools), as they came; the engine
/// validates them. Without the `tool-extras` feature `exposure` and
/// `deferred` are still read, to refuse a tool not offered directly.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ToolExtras {
    /// Any JSON here; only an object is accepted.
    #[cfg(feature = "tool-extras")]
    pub output_schema: Option<Value>,
    #[cfg(feature = "tool-extras")]
    pub namespace: Option<String>,
    #[cfg(feature = "tool-extras")]
    pub namespace_description: Option<String>,
    #[cfg(feature = "tool-extras")]
    pub namespace_instructions: Option<String>,
    pub exposure: Option<String>,
    pub deferred: Option<bool>,
    /// Waits for the user: no reply deadline (docs/PROTOCOL.md#interactive-tools).
    pub interactive: Option<bool>,
    /// `never`, `safe`, `idempotent` or `reconcile`; anything else is
    /// `never`. Only the `journal` feature reads it: without it serde
    /// skips the field, which only informs a durable host.
    #[cfg(feature = "journal")]
    pub replay: Option<String>,
}

/// Body of `command_response` (docs/PROTOCOL.md#commands-and-actions).
#[allow(missing_docs)]
#[derive(Debug, Clone, Deserialize)]
pub struct CommandResponse {
    pub id: String,
    /// `prompt`, `insert`, `display`, `noop`, `open_panel` or `tool_prompt`.
    pub action: Option<String>,
    pub prompt: Option<String>,
    /// `tool_prompt`: the tool to run first, and its args (any JSON
    /// here: the engine checks them and names a wrong one).
    #[cfg(feature = "tool-extras")]
    pub tool_name: Option<Value>,
    #[cfg(feature = "tool-extras")]
    pub tool_args: Option<Value>,
    pub insert: Option<String>,
    pub display: Option<String>,
    #[cfg(feature = "panels")]
    pub open_panel: Option<OpenPanel>,
    /// An error to show, whatever the action.
    pub error: Option<String>,
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
    /// `before_agent_start`: the system prompt, sent even when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Any other field (`reason`, `status`, `session_id`...), passed
    /// through unchanged (docs/PROTOCOL.md#events); none of `type`, `event`, `id`, `sequence`.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

impl EventPayload {
    /// The first of [`RESERVED_EVENT_FIELDS`] the payload carries, if any.
    pub(crate) fn reserved_field(&self) -> Option<&'static str> {
        RESERVED_EVENT_FIELDS
            .into_iter()
            .find(|k| self.extra.contains_key(*k))
    }
}

/// An [`EventPayload`] from a JSON object's fields, as its `Deserialize`
/// reads it (the same values, errors and order of `extra`), without
/// the buffering that `#[serde(flatten)]` costs in code.
pub fn event_payload(fields: serde_json::Map<String, Value>) -> serde_json::Result<EventPayload> {
    use serde_json::from_value;
    let mut payload = EventPayload::default();
    for (key, value) in fields {
        let text = match key.as_str() {
            "step" => {
                payload.step = from_value(value)?;
                continue;
            }
            "tool_args" => {
                payload.tool_args = from_value(value)?;
                continue;
            }
            "stop" => &mut payload.stop,
            "error" => &mut payload.error,
            "tool_id" => &mut payload.tool_id,
            "tool_name" => &mut payload.tool_name,
            "text" => &mut payload.text,
            "system_prompt" => &mut payload.system_prompt,
            _ => {
                payload.extra.insert(key, value);
                continue;
            }
        };
        *text = from_value(value)?;
    }
    Ok(payload)
}

fn is_empty(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

/// A frame sent by the host to an extension (docs/PROTOCOL.md#frames-from-the-host).
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
        capabilities: &'a [&'a str],
    },
    CommandInvoked {
        id: &'a str,
        name: &'a str,
        args: &'a str,
    },
    /// `operation_key` and `reconcile` only when the embedder or the
    /// journal gave them (the `journal` feature's build only).
    ToolCall {
        id: &'a str,
        name: &'a str,
        args: &'a Value,
        #[cfg(feature = "journal")]
        #[serde(skip_serializing_if = "Option::is_none")]
        operation_key: Option<&'a str>,
        #[cfg(feature = "journal")]
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        reconcile: bool,
    },
    /// An abandoned `tool_call` (docs/PROTOCOL.md#cancellation).
    ToolCancel {
        id: &'a str,
    },
    /// The answer to the extension's `call_tool` (docs/PROTOCOL.md#calls-from-extensions).
    ToolResult {
        id: &'a str,
        name: &'a str,
        content: &'a [Content],
        is_error: bool,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
    },
    /// `sequence` counts every event of the host's life; `session_id`
    /// and `cwd` are left out when the payload gives its own (docs/PROTOCOL.md#events).
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
    #[cfg(feature = "panels")]
    PanelKey {
        panel_id: &'a str,
        key: PanelKey,
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<&'a str>,
    },
    #[cfg(feature = "panels")]
    PanelClose {
        panel_id: &'a str,
    },
    /// The panel's room on the screen, in columns and rows (docs/PROTOCOL.md#panels).
    #[cfg(feature = "panels")]
    PanelResize {
        panel_id: &'a str,
        width: u32,
        height: u32,
    },
    Shutdown,
}

impl HostFrame<'_> {
    /// The frame as one `\n`-terminated line.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = Vec::new();
        self.write_line(&mut line);
        line
    }

    /// Appends the frame as one `\n`-terminated line to `out`: what a turn
    /// writes to an extension is serialised where it waits, not in a line
    /// of its own copied there.
    pub(crate) fn write_line(&self, out: &mut Vec<u8>) {
        // Room for most frames at once, not grown from 8 bytes by doubling.
        out.reserve(128);
        // Serialising these types cannot fail: every map key is a string.
        let start = out.len();
        let written = serde_json::to_writer(&mut *out, self);
        if written.is_err() {
            out.truncate(start);
        }
        out.push(b'\n');
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

/// What [`LineReader::read_into`] read.
pub(crate) enum Filled {
    /// A complete line, now in the buffer ([`Line::Text`]).
    Line,
    /// A line longer than the limit, discarded ([`Line::TooLong`]).
    TooLong(usize),
}

/// Reads `\n`-terminated lines with a length cap, discarding over-long
/// lines instead of buffering them (all but their first and last `HEAD`
/// bytes).
pub struct LineReader<R> {
    inner: R,
    max: usize,
    head: Vec<u8>,
    /// The last `HEAD` bytes of the line being discarded.
    tail: Vec<u8>,
}

/// How much of each end of a discarded line is kept: enough for the
/// `type` and `id` that upstream's SDK writes first (see `frame_head`),
/// or the `id` a JSON-RPC library writes last (see `tail_id`).
pub(crate) const HEAD: usize = 4096;

impl<R: BufRead> LineReader<R> {
    /// Reads lines from `inner`, discarding any longer than `max` bytes.
    pub fn new(inner: R, max: usize) -> Self {
        LineReader {
            inner,
            max,
            head: Vec::new(),
            tail: Vec::new(),
        }
    }

    /// The first `HEAD` bytes of the line last returned as too long,
    /// then `\n` and its last `HEAD` bytes (a line holds no `\n`, so
    /// the two ends cannot run together; see [`split_ends`]).
    pub(crate) fn discarded_head(&self) -> &[u8] {
        &self.head
    }

    /// The next line, or `None` at end of stream. A final line without
    /// a terminator is still returned.
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut line = Vec::new();
        Ok(self.read_into(&mut line)?.map(|read| match read {
            Filled::Line => Line::Text(line),
            Filled::TooLong(len) => Line::TooLong(len),
        }))
    }

    /// [`LineReader::next_line`] into `line`, cleared first: a reader of
    /// many lines keeps one buffer instead of an allocation per line.
    pub(crate) fn read_into(&mut self, line: &mut Vec<u8>) -> io::Result<Option<Filled>> {
        line.clear();
        self.head.clear();
        let mut seen = 0;
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
                if !line.is_empty() || seen == chunk.len() {
                    // Over the limit now: keep its start, drop the rest.
                    self.tail.clear();
                    keep_tail(&mut self.tail, line);
                    let mut head = std::mem::take(line);
                    head.extend_from_slice(&chunk[..chunk.len().min(HEAD)]);
                    head.truncate(HEAD);
                    self.head = head;
                } else if self.head.len() < HEAD {
                    let room = HEAD - self.head.len();
                    self.head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                keep_tail(&mut self.tail, chunk);
            }
            let used = newline.map_or(buf.len(), |i| i + 1);
            self.inner.consume(used);
            if newline.is_some() {
                break;
            }
        }
        if seen > self.max {
            self.head.push(b'\n');
            self.head.append(&mut self.tail);
            return Ok(Some(Filled::TooLong(seen)));
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.starts_with(b"\xEF\xBB\xBF") {
            line.drain(..3);
        }
        Ok(Some(Filled::Line))
    }
}

/// Appends `bytes` to `tail`, keeping its last `HEAD` bytes.
fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() >= HEAD {
        tail.clear();
        tail.extend_from_slice(&bytes[bytes.len() - HEAD..]);
        return;
    }
    tail.extend_from_slice(bytes);
    if tail.len() > HEAD {
        tail.drain(..tail.len() - HEAD);
    }
}

/// The start and the end of a discarded line, as
/// `LineReader::discarded_head` keeps them.
#[cfg(feature = "mcp")]
pub(crate) fn split_ends(kept: &[u8]) -> (&[u8], &[u8]) {
    match kept.iter().position(|&b| b == b'\n') {
        Some(at) => (&kept[..at], &kept[at + 1..]),
        None => (kept, &[]),
    }
}

/// Parses one JSON text (frame, rpc or MCP message, manifest), refusing
/// nesting deeper than `MAX_DEPTH` before serde recurses into it, and a
/// text whose parse would take more than `PARSE_BUDGET` bytes. A lone
/// UTF-16 surrogate escape (what Python's `json.dumps` writes for a file
/// name that is not UTF-8) reads as U+FFFD.
pub fn parse_json<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    parse_json_with(json, |json: &[u8]| serde_json::from_slice(json))
}

/// [`parse_json`] with `parse` in place of `serde_json::from_slice`.
fn parse_json_with<T>(
    json: &[u8],
    parse: impl Fn(&[u8]) -> serde_json::Result<T>,
) -> Result<T, String> {
    check_depth(json)?;
    match parse(json) {
        Err(e) if lone_surrogate(&e.to_string()) => {
            parse(&replace_lone_surrogates(json)).map_err(|e| e.to_string())
        }
        parsed => parsed.map_err(|e| e.to_string()),
    }
}

/// Most bytes the parse of one JSON text may take, estimated before it
/// starts: a line of 16 MiB of `{"a":0},` would take over 1 GB as values.
pub(crate) const PARSE_BUDGET: usize = 256 << 20;

/// What a parsed object costs at least (its map's two allocations and
/// its first entry), and each further value (an element or a member).
const OBJECT_COST: usize = 400;
const VALUE_COST: usize = 80;

/// Checks without recursion that `json` nests at most `MAX_DEPTH` deep
/// and that its parse stays within `PARSE_BUDGET`. Brackets and commas
/// inside strings do not count; malformed text is left for the parser.
fn check_depth(json: &[u8]) -> Result<(), String> {
    // No deeper than it has brackets: most frames have a few, and
    // counting them costs a fraction of the walk below. A text this
    // short cannot reach the budget (each byte costs at most 161).
    let opening = json.iter().filter(|&&b| b == b'[' || b == b'{').count();
    let short = json.len() <= PARSE_BUDGET / 256;
    if opening <= MAX_DEPTH && short {
        return Ok(());
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut objects, mut values) = (0usize, 1usize);
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
                objects += usize::from(b == b'{');
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("nested deeper than {MAX_DEPTH} levels"));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' => values += 1,
            _ => {}
        }
    }
    let cost = json.len() + objects * OBJECT_COST + values * VALUE_COST;
    if cost > PARSE_BUDGET {
        return Err(format!(
            "{objects} objects and {values} values would take about {} MiB to read, \
             over the {} MiB limit",
            cost >> 20,
            PARSE_BUDGET >> 20
        ));
    }
    Ok(())
}

/// Whether serde_json refused a text for a UTF-16 surrogate escape
/// without its pair.
fn lone_surrogate(error: &str) -> bool {
    error.contains("lone leading surrogate") || error.contains("unexpected end of hex escape")
}

/// `json` with every `\uXXXX` escape of a lone UTF-16 surrogate (one
/// not part of a high-low pair) replaced by `\ufffd`, the same length.
fn replace_lone_surrogates(json: &[u8]) -> Vec<u8> {
    let mut out = json.to_vec();
    let unit = |at: usize| -> Option<u16> {
        let escape = json.get(at..at + 6)?;
        let hex = escape.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let (mut i, mut in_string) = (0, false);
    while i < json.len() {
        match json[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let Some(n) = unit(i) else {
                    i += 2; // another escape: its second byte is not special
                    continue;
                };
                let high = (0xD800..=0xDBFF).contains(&n);
                let paired = high && unit(i + 6).is_some_and(|m| (0xDC00..=0xDFFF).contains(&m));
                if paired {
                    i += 12;
                    continue;
                }
                if (0xD800..=0xDFFF).contains(&n) {
                    out[i..i + 6].copy_from_slice(b"\\ufffd");
                }
                i += 6;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Parses one line into a frame, or says in one line why it cannot.
/// Lone surrogate escapes read as U+FFFD, as in [`parse_json`].
pub fn parse_ext_frame(line: &[u8]) -> Result<ExtFrame, String> {
    read_ext_frame(line).map_err(|e| dropped_frame(&e, line))
}

/// [`parse_ext_frame`], its error only the reason.
pub(crate) fn read_ext_frame(line: &[u8]) -> Result<ExtFrame, String> {
    // Not a frame: a syntax error or a value other than an object in
    // serde's words, else what is wrong with the object's type.
    let refused = |why: &str| {
        let object = parse_json::<serde_json::Map<String, Value>>(line);
        Err(object.err().unwrap_or_else(|| why.into()))
    };
    // Every top-level key is looked at: of two types, JSON readers
    // differ on which one counts, so a frame with two is refused.
    let Some((value, again)) = top_level_field(line, "type", true) else {
        return refused("missing field `type`");
    };
    let Some(kind) = string_value(value) else {
        return refused("field `type` is not a string");
    };
    let parse = |json: &[u8]| {
        let mut de = serde_json::Deserializer::from_slice(json);
        let frame = ExtFrame::deserialize(Tagged {
            kind: &kind,
            fields: &mut de,
        });
        let frame = frame.and_then(|frame| de.end().map(|()| frame));
        frame.map_err(|e| {
            // A field's error in serde's words alone: the frame is one
            // line, and the error names the field, or wrong_field does.
            let position = format!(" at line {} column {}", e.line(), e.column());
            match e.to_string().strip_suffix(&position) {
                Some(words) if e.is_data() => serde::de::Error::custom(words),
                _ => e,
            }
        })
    };
    let frame = parse_json_with(line, parse).map_err(|e| {
        // serde names the field or the variant; the frame's type says where.
        if e.starts_with("unknown variant") {
            #[cfg(not(feature = "panels"))]
            if let Some((_, what)) = UI_FRAMES.iter().find(|(k, _)| *k == kind) {
                return format!("`{kind}`: this build has no {what} (the `panels` feature)");
            }
            return format!("unknown frame type `{kind}`");
        }
        match wrong_field(line, &e) {
            Some(field) => format!("{kind}: field `{field}`: {e}"),
            None => format!("{kind}: {e}"),
        }
    })?;
    // Said once the text is known to be JSON: a string followed by a
    // colon is a key only there.
    match again {
        true => Err(format!("{kind}: duplicate field `type`")),
        false => Ok(frame),
    }
}

/// The frames of panels and submits an extension may send
/// (docs/PROTOCOL.md#panels, docs/PROTOCOL.md#submits), with what they
/// are: a build without the `panels` feature drops them, saying why.
#[cfg(not(feature = "panels"))]
const UI_FRAMES: [(&str, &str); 5] = [
    ("panel_render", "panels"),
    ("panel_close", "panels"),
    ("open_panel", "panels"),
    ("submit", "submits"),
    ("submit_slash", "submits"),
];

/// A frame's object whose `type` is `kind`, read as the externally
/// tagged enum variant `kind` with the object's fields: serde's code for
/// a tag stated beside the fields would first buffer the whole object.
/// The variant's own fields ignore the `type` field among them.
struct Tagged<'a, D> {
    kind: &'a str,
    fields: D,
}

impl<'de, D: serde::Deserializer<'de>> serde::Deserializer<'de> for Tagged<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, D: serde::Deserializer<'de>> serde::de::EnumAccess<'de> for Tagged<'_, D> {
    type Error = D::Error;
    type Variant = VariantFields<D>;

    fn variant_seed<S: serde::de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, VariantFields<D>), D::Error> {
        use serde::de::IntoDeserializer;
        let variant = seed.deserialize(self.kind.into_deserializer())?;
        Ok((variant, VariantFields(self.fields)))
    }
}

/// The fields of a [`Tagged`] frame: the whole object. A newtype
/// variant's struct reads them as a map, as a struct variant does.
struct VariantFields<D>(D);

impl<'de, D: serde::Deserializer<'de>> serde::Deserializer<'de> for VariantFields<D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

impl<'de, D: serde::Deserializer<'de>> serde::de::VariantAccess<'de> for VariantFields<D> {
    type Error = D::Error;

    fn unit_variant(self) -> Result<(), D::Error> {
        serde::de::IgnoredAny::deserialize(self.0).map(drop)
    }

    fn newtype_variant_seed<T: serde::de::DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, D::Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: serde::de::Visitor<'de>>(
        self,
        len: usize,
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, v)
    }

    /// The fields are an object ([`read_ext_frame`] found `type` among
    /// them), so only the visitor's map half is asked for: a struct's
    /// would also read an array, and bring in its code for each variant.
    fn struct_variant<V: serde::de::Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }
}

/// The log line of a frame dropped for `reason`.
pub(crate) fn dropped_frame(reason: &str, line: &[u8]) -> String {
    format!("dropped frame ({reason}): {}", snippet(line))
}

/// The top-level field of the object `line` that a serde "invalid
/// type" error is about: the one field whose value is what the error
/// says it got (serde's own message does not name it).
pub(crate) fn wrong_field(line: &[u8], error: &str) -> Option<String> {
    let got = error
        .strip_prefix("invalid type: ")?
        .split(", expected")
        .next()?;
    let fields: serde_json::Map<String, Value> = parse_json(line).ok()?;
    let described = |value: &Value| match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_f64() => format!("floating point `{n}`"),
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".to_string(),
        Value::Object(_) => "map".to_string(),
    };
    let mut matching = fields.iter().filter(|(_, v)| described(v) == got);
    let (field, _) = matching.next()?;
    matching.next().is_none().then(|| field.clone())
}

/// The top-level `"id"` of a JSON object's text when it is a string or
/// an integer: what is known of a message too deep or too big to parse,
/// wherever its `id` is.
#[cfg(feature = "mcp")]
pub(crate) fn top_level_id(text: &[u8]) -> Option<Value> {
    top_level_scalar(text, "id")
}

/// The top-level field `key` of a JSON object's text when it is a
/// string or an integer (the first, if there are more).
#[cfg(feature = "mcp")]
fn top_level_scalar(text: &[u8], key: &str) -> Option<Value> {
    let (value, _) = top_level_field(text, key, false)?;
    json_scalar(value).map(|(v, _)| v)
}

/// Whether the JSON object's text `line` has the top-level field `key`
/// more than once (JSON readers differ on which one counts).
pub fn field_twice(line: &[u8], key: &str) -> bool {
    top_level_field(line, key, true).is_some_and(|(_, again)| again)
}

/// The text from the value of the top-level field `key` of a JSON
/// object's text on, found by one pass that steps over nested values
/// without reading them. A key is compared as a JSON reader reads it
/// (`"typ\u0065"` is `type`). With `whole` the pass goes on to the end,
/// and says whether `key` is there again.
fn top_level_field<'a>(text: &'a [u8], key: &str, whole: bool) -> Option<(&'a [u8], bool)> {
    let start = text.iter().position(|b| !b.is_ascii_whitespace())?;
    if text[start] != b'{' {
        return None;
    }
    // A key of escapes is at most six bytes a character.
    let is_key = |quoted: &[u8]| {
        let raw = &quoted[1..quoted.len() - 1];
        raw == key.as_bytes()
            || (raw.len() <= 6 * key.len()
                && raw.contains(&b'\\')
                && serde_json::from_slice::<String>(quoted).is_ok_and(|k| k == key))
    };
    let (mut depth, mut i, mut found) = (0usize, start, None);
    while i < text.len() {
        match text[i] {
            b'"' => {
                let Some(end) = string_end(text, i) else {
                    break;
                };
                if depth == 1 && is_key(&text[i..end]) {
                    let after = text[end..].trim_ascii_start();
                    if let Some(value) = after.strip_prefix(b":") {
                        if found.is_some() {
                            return found.map(|value| (value, true));
                        }
                        found = Some(value.trim_ascii_start());
                        if !whole {
                            break;
                        }
                    }
                }
                i = end;
                continue;
            }
            b'[' | b'{' => depth += 1,
            // The object's end: what follows is not its fields.
            b']' | b'}' if depth <= 1 => break,
            b']' | b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    found.map(|value| (value, false))
}

/// The JSON string that `value` (a field's value text on) starts with,
/// read; `None` when it starts with anything else.
fn string_value(value: &[u8]) -> Option<String> {
    let end = value.starts_with(b"\"").then(|| string_end(value, 0))??;
    parse_json(&value[..end]).ok()
}

/// Where the JSON string starting at `text[at]` (a `"`) ends: just past
/// its closing quote, the first not escaped by an odd run of backslashes.
fn string_end(text: &[u8], at: usize) -> Option<usize> {
    let mut from = at + 1;
    loop {
        let quote = from + text[from..].iter().position(|&b| b == b'"')?;
        let before = &text[from..quote];
        let slashes = before.iter().rev().take_while(|&&b| b == b'\\').count();
        if slashes % 2 == 0 {
            return Some(quote + 1);
        }
        from = quote + 1;
    }
}

/// The top-level `"id"` at the end of the last bytes of an object's
/// text (`tail`), as JSON-RPC libraries that write it last leave it:
/// `..."id":7}` or `..."id":7,"jsonrpc":"2.0"}`.
#[cfg(feature = "mcp")]
pub(crate) fn tail_id(tail: &[u8]) -> Option<Value> {
    let mut rest = tail.trim_ascii_end().strip_suffix(b"}")?.trim_ascii_end();
    for member in [&br#""jsonrpc":"2.0""#[..], br#""jsonrpc": "2.0""#] {
        if let Some(before) = rest.strip_suffix(member) {
            rest = before.trim_ascii_end().strip_suffix(b",")?.trim_ascii_end();
        }
    }
    let at = rest.windows(4).rposition(|w| w == b"\"id\"")?;
    let value = rest[at + 4..].trim_ascii_start().strip_prefix(b":")?;
    let value: Value = serde_json::from_slice(value).ok()?;
    (value.is_string() || value.is_i64() || value.is_u64()).then_some(value)
}

/// The `type` and `id` of a frame from the start of its line (`head`),
/// when both are top-level string fields there, or the type is `hello`
/// (which has no id: empty): what is known of a frame that cannot be
/// read, so that its request (or the handshake) fails at once.
pub fn frame_head(head: &[u8]) -> Option<(String, String)> {
    let text = |key: &str| string_value(top_level_field(head, key, false)?.0);
    let kind = text("type")?;
    match text("id") {
        Some(id) => Some((kind, id)),
        None => (kind == "hello").then(|| (kind, String::new())),
    }
}

/// The top-level fields at the start of a JSON object's text whose
/// values are strings or integers, up to the first other value (or the
/// end of `head`): a JSON-RPC message's `id`.
#[cfg(feature = "mcp")]
pub(crate) fn head_fields(head: &[u8]) -> Vec<(String, Value)> {
    let mut fields = Vec::new();
    let Some(mut rest) = head.strip_prefix(b"{") else {
        return fields;
    };
    loop {
        let Some((key, after)) = json_string(rest.trim_ascii_start()) else {
            return fields;
        };
        let Some(after) = after.trim_ascii_start().strip_prefix(b":") else {
            return fields;
        };
        let Some((value, after)) = json_scalar(after.trim_ascii_start()) else {
            return fields;
        };
        fields.push((key, value));
        match after.trim_ascii_start().strip_prefix(b",") {
            Some(after) => rest = after,
            None => return fields,
        }
    }
}

/// A JSON string or integer at the start of `text`, and what follows.
#[cfg(feature = "mcp")]
fn json_scalar(text: &[u8]) -> Option<(Value, &[u8])> {
    if let Some((s, rest)) = json_string(text) {
        return Some((Value::String(s), rest));
    }
    let end = text
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'-'))?;
    let value: Value = serde_json::from_slice(&text[..end]).ok()?;
    value.is_number().then_some((value, &text[end..]))
}

/// A JSON string at the start of `text`, and what follows it.
#[cfg(feature = "mcp")]
fn json_string(text: &[u8]) -> Option<(String, &[u8])> {
    let body = text.strip_prefix(b"\"")?;
    let mut escaped = false;
    let end = body.iter().position(|&b| {
        let end = b == b'"' && !escaped;
        escaped = b == b'\\' && !escaped;
        end
    })?;
    let value = serde_json::from_slice(&text[..end + 2]).ok()?;
    Some((value, &body[end + 1..]))
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
    fn a_refused_frame_names_its_type_and_the_wrong_field() {
        let error = |line: &str| parse_ext_frame(line.as_bytes()).expect_err(line);
        let cases = [
            (
                r#"{"type":"hello","name":5}"#,
                "(hello: field `name`: invalid type: integer `5`, expected a string)",
            ),
            (
                r#"{"type":"tool_result","id":"1","is_error":"yes"}"#,
                "field `is_error`",
            ),
            (r#"{"type":"teleport"}"#, "(unknown frame type `teleport`)"),
            (
                r#"{"type":"open_panel","panel":{"title":"x"}}"#,
                match cfg!(feature = "panels") {
                    true => "missing field `id`",
                    false => "(`open_panel`: this build has no panels (the `panels` feature))",
                },
            ),
            (
                r#"{"type":"submit_slash","text":5}"#,
                match cfg!(feature = "panels") {
                    true => "submit_slash: field `text`",
                    false => "(`submit_slash`: this build has no submits (the `panels` feature))",
                },
            ),
            (r#"{"type":"notify"}"#, "(notify: missing field `message`)"),
            (r#"{"id":"1"}"#, "missing field `type`"),
            (
                r#"{"type":"hello","name":5,"file":"caf\udce9"}"#,
                "hello: field `name`: invalid type",
            ),
        ];
        for (line, want) in cases {
            let e = error(line);
            assert!(
                e.starts_with("dropped frame (") && e.contains(want),
                "{line}: {e}"
            );
        }
        // Internal frames are never read from the wire.
        assert!(
            error(r#"{"type":"unreadable","kind":"x","id":"1","why":"x"}"#).contains("unreadable")
        );
        let panel = parse_ext_frame(br#"{"type":"open_panel","panel":{"id":"p","lines":["a"]}}"#);
        #[cfg(feature = "panels")]
        assert!(
            matches!(panel, Ok(ExtFrame::OpenPanel(ref p)) if p.id == "p"),
            "{panel:?}"
        );
        #[cfg(not(feature = "panels"))]
        assert!(
            matches!(panel, Err(ref e) if e.contains("no panels")),
            "{panel:?}"
        );
    }

    #[test]
    fn the_type_field_is_found_as_a_json_reader_sees_it() {
        // A key written with escapes is the same key.
        for line in [
            r#"{"typ\u0065":"notify","message":"m"}"#,
            r#"{"message":"m","\u0074\u0079\u0070\u0065":"notify"}"#,
            r#"{"a":{"type":"x","b":"]}\\"},"c":["[{\"type\":1"],"type":"notify","message":"m"}"#,
        ] {
            let frame = parse_ext_frame(line.as_bytes());
            assert!(
                matches!(frame, Ok(ExtFrame::Notify { .. })),
                "{line}: {frame:?}"
            );
        }
        let error = |line: &str| parse_ext_frame(line.as_bytes()).expect_err(line);
        // Two types are one too many, however written: readers differ on
        // which one counts.
        for line in [
            r#"{"type":"notify","message":"m","type":"hello","name":"x"}"#,
            r#"{"type":"ready","x":{"type":"y"},"typ\u0065":"ready"}"#,
            r#"{"type":"ready","type":5}"#,
        ] {
            let e = error(line);
            assert!(e.contains("duplicate field `type`"), "{line}: {e}");
        }
        // A type that is there but not a string is not a missing one.
        for value in ["null", "true", "{}", r#"["notify"]"#, "5", "1.5"] {
            let line = format!(r#"{{"type":{value},"message":"m"}}"#);
            let e = error(&line);
            assert!(e.contains("field `type` is not a string"), "{line}: {e}");
        }
        let e = error(r#"{"type":"\ud800","message":"m"}"#);
        assert!(e.contains("unknown frame type `\u{fffd}`"), "{e}");
        // Not an object, or not JSON: the parser's words.
        assert!(error(r#"{"type":}"#).contains("expected value"));
        for (line, want) in [
            (
                r#"{"type":"notify","message":"m"} x"#,
                "trailing characters",
            ),
            (
                r#"{"type":"notify","message":"m"}{"type":"notify"}"#,
                "trailing",
            ),
            (
                r#"{"type":"notify","message":"type":"x"}"#,
                "expected `,` or `}`",
            ),
        ] {
            let e = error(line);
            assert!(e.contains(&format!("notify: {want}")), "{line}: {e}");
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
    fn the_head_of_a_long_frame_names_it() {
        let go = br#"{"type":"tool_result","id":"17","content":[{"type":"text","text":"#;
        assert_eq!(frame_head(go), Some(("tool_result".into(), "17".into())));
        let py = br#"{"id": "4", "x": "a\"b", "type": "command_response", "prompt": "#;
        assert_eq!(
            frame_head(py),
            Some(("command_response".into(), "4".into()))
        );
        for unknown in [
            &br#"{"type":"tool_result","content":[{"id":"9"}]"#[..],
            br#"{"type":"tool_result","id":"#,
            br#"["type","id"]"#,
        ] {
            assert_eq!(frame_head(unknown), None, "{}", snippet(unknown));
        }
        // A hello has no id; its type may follow an array, and the line
        // may start with blanks.
        let go = br#" {"capabilities":["tools"],"name":"x","type":"hello","version":5}"#;
        assert_eq!(frame_head(go), Some(("hello".into(), String::new())));
        assert_eq!(frame_head(br#"{"type":"debug","msg":"x"}"#), None);
        #[cfg(feature = "mcp")]
        {
            let rpc = br#"{"jsonrpc":"2.0","id":42,"result":{"content":"#;
            let fields = head_fields(rpc);
            assert_eq!(fields[1], ("id".to_string(), Value::from(42)));
            assert_eq!(fields.len(), 2);
        }
    }

    #[test]
    fn a_discarded_line_keeps_its_head() {
        let mut text = b"{\"type\":\"x\",".to_vec();
        text.extend(std::iter::repeat_n(b'a', 10_000));
        let len = text.len();
        text.extend(b"\"id\":7}");
        let len = len + 7;
        text.extend(b"\nnext\n");
        // Read in small pieces: the ends are kept across them.
        let reader = std::io::BufReader::with_capacity(64, &text[..]);
        let mut lines = LineReader::new(reader, 100);
        assert!(matches!(lines.next_line(), Ok(Some(Line::TooLong(n))) if n == len));
        let kept = lines.discarded_head();
        assert!(kept.starts_with(b"{\"type\":\"x\",aaa"));
        assert!(kept.ends_with(b"aaa\"id\":7}"));
        #[cfg(feature = "mcp")]
        {
            let (head, tail) = split_ends(kept);
            assert_eq!((head.len(), tail.len()), (HEAD, HEAD));
            assert_eq!(tail_id(tail), Some(Value::from(7)));
        }
        assert!(matches!(lines.next_line(), Ok(Some(Line::Text(t))) if t == b"next"));
        // A short line over the limit: its ends overlap.
        let mut lines = LineReader::new(&b"{\"id\":\"a\",\"x\":1}\n"[..], 10);
        assert!(matches!(lines.next_line(), Ok(Some(Line::TooLong(16)))));
        #[cfg(feature = "mcp")]
        {
            let (head, tail) = split_ends(lines.discarded_head());
            assert_eq!((head, tail), (&b"{\"id\":\"a\",\"x\":1}"[..], head));
        }
    }

    #[cfg(feature = "mcp")]
    #[test]
    fn the_id_of_a_message_too_deep_or_too_long_to_read() {
        let deep = format!(
            r#"{{"result":{{"x":{}"id":1{}}},"jsonrpc":"2.0", "id" : 42}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(parse_json::<Value>(deep.as_bytes()).is_err());
        assert_eq!(top_level_id(deep.as_bytes()), Some(Value::from(42)));
        let quoted = br#"{"result":"\"id\":5","id":"k\"q"}"#;
        assert_eq!(top_level_id(quoted), Some(Value::from("k\"q")));
        for none in [
            &br#"{"result":{"id":5}}"#[..],
            br#"[{"id":5}]"#,
            br#"{"id":{}}"#,
        ] {
            assert_eq!(top_level_id(none), None, "{}", snippet(none));
        }
        for (tail, id) in [
            (&br#"aa"}]},"jsonrpc":"2.0","id":9}"#[..], Some(9)),
            (br#"aa"}]},"id":9,"jsonrpc":"2.0"}"#, Some(9)),
            (br#"aa"}]}, "id": 9 }"#, Some(9)),
            (br#"aa","id":9}]}}"#, None),
            (br#"aa"}]},"id":9,"x":1}"#, None),
        ] {
            assert_eq!(tail_id(tail), id.map(Value::from), "{}", snippet(tail));
        }
    }

    #[test]
    fn lone_surrogate_escapes_read_as_the_replacement_character() {
        let line =
            br#"{"a":"caf\udce9","b":"\ud83d","c":"\ud83d\ude00","d":"\\udce9","e":"\ud83d\n"}"#;
        let v: Value = parse_json(line).unwrap();
        assert_eq!(v["a"], "caf\u{fffd}");
        assert_eq!(v["b"], "\u{fffd}");
        assert_eq!(v["c"], "\u{1f600}", "a pair is kept");
        assert_eq!(v["d"], "\\udce9", "an escaped backslash is not an escape");
        assert_eq!(v["e"], "\u{fffd}\n");
        let frame = br#"{"type":"notify","message":"f\udce9.txt"}"#;
        let Ok(ExtFrame::Notify { message, .. }) = parse_ext_frame(frame) else {
            panic!("not read: {:?}", parse_ext_frame(frame));
        };
        assert_eq!(message, "f\u{fffd}.txt");
        assert!(parse_json::<Value>(br#"{"a":"\u12"}"#).is_err());
    }

    #[test]
    fn a_text_too_costly_to_parse_is_refused_before_parsing() {
        // 16 MiB of small objects: about 1 GB as values.
        let mut objects = b"[".to_vec();
        while objects.len() < MAX_LINE - 16 {
            objects.extend_from_slice(br#"{"a":0},"#);
        }
        objects.extend_from_slice(b"{}]");
        let error = parse_json::<Value>(&objects).unwrap_err();
        assert!(error.contains("over the 256 MiB limit"), "{error}");
        // As much text in one string is cheap to parse.
        let text = format!(r#"{{"text":"{}"}}"#, "{\\\"a\\\":0},".repeat(1 << 20));
        assert!(check_depth(text.as_bytes()).is_ok());
        let numbers = format!("[{}0]", "0,".repeat(1 << 20));
        assert!(check_depth(numbers.as_bytes()).is_ok(), "a million numbers");
    }

    #[test]
    fn event_payload_reads_fields_as_deserialize_does() {
        for text in [
            r#"{"step":2,"stop":"end","reason":"r","text":"t","n":[1,{"a":null}]}"#,
            r#"{"z":1,"tool_args":null,"tool_name":"x","system_prompt":"","a":2}"#,
            r#"{"tool_args":{"cmd":"ls"},"error":null,"tool_id":"7","session_id":"s"}"#,
            r#"{"step":"x","stop":3}"#,
            r#"{"stop":3,"step":"x"}"#,
            r#"{"step":-1}"#,
            r#"{"step":1.5}"#,
            r#"{"text":["a"]}"#,
            r#"{}"#,
        ] {
            let Ok(Value::Object(fields)) = serde_json::from_str(text) else {
                panic!("not an object: {text}");
            };
            let derived = serde_json::from_value::<EventPayload>(Value::Object(fields.clone()));
            let by_hand = event_payload(fields);
            match (derived, by_hand) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "{text}");
                    let keys = |p: &EventPayload| p.extra.keys().cloned().collect::<Vec<_>>();
                    assert_eq!(keys(&a), keys(&b), "order of extra: {text}");
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
                (a, b) => panic!("{text}: derived {a:?}, by hand {b:?}"),
            }
        }
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
