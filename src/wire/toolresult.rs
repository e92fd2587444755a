//! Mapping a tool's result blocks, as an extension, the embedder or an
//! MCP server sent them, to the blocks the model sees (docs/PROTOCOL.md#tool-results).

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// One block of a tool's result (docs/PROTOCOL.md#tool-results). Serialized as the frames
/// carry it: `{"type":"text","text":...}` or
/// `{"type":"image","mime_type":...,"data":...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Text for the model.
    Text(String),
    /// Text with a display hint (`format`, e.g. `markdown`): the model
    /// gets the text; a value other than `markdown` displays as plain.
    Formatted {
        /// The text.
        text: String,
        /// The hint, as the extension sent it.
        format: String,
    },
    /// An image: its MIME type and its bytes in standard base64.
    Image {
        /// E.g. `image/png`.
        mime_type: String,
        /// Standard base64, with padding.
        data: String,
    },
}

impl Content {
    /// A text block's text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Content::Text(text) | Content::Formatted { text, .. } => Some(text),
            Content::Image { .. } => None,
        }
    }

    /// A text block's display hint, when it has one.
    pub fn format(&self) -> Option<&str> {
        match self {
            Content::Formatted { format, .. } => Some(format),
            _ => None,
        }
    }

    /// The block with its display hint dropped (what MCP carries).
    pub fn plain(self) -> Content {
        match self {
            Content::Formatted { text, .. } => Content::Text(text),
            other => other,
        }
    }

    /// The block as JSON, as it is serialized.
    pub fn to_value(&self) -> Value {
        // Strings into a `Value`: this serialization cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

impl Serialize for Content {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        match self {
            Content::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Content::Formatted { text, format } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
                map.serialize_entry("format", format)?;
            }
            Content::Image { mime_type, data } => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry("mime_type", mime_type)?;
                map.serialize_entry("data", data)?;
            }
        }
        map.end()
    }
}

/// A block equals the JSON it serializes to.
impl PartialEq<Value> for Content {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

/// Text used when a tool returns no blocks at all.
pub(crate) const NO_CONTENT: &str = "(extension returned no content)";

/// A result block as it came: the fields a block may use, each as sent
/// (`None` when absent). Other fields are not kept, nor is anything of a
/// block that is no object. Read straight from a frame's text without
/// building a map (a JSON object as a `Value` hashes each of its keys).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Block {
    kind: Option<Part>,
    text: Option<Part>,
    mime_type: Option<Part>,
    data: Option<Part>,
    /// A text block's display hint (`markdown`, ...).
    format: Option<Part>,
}

/// A field of a block: a string (what a valid block has), or any other
/// value, kept to be quoted (boxed: a `Value` is several times larger).
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Str(String),
    Other(Box<Value>),
}

impl From<Value> for Part {
    fn from(value: Value) -> Part {
        match value {
            Value::String(s) => Part::Str(s),
            other => Part::Other(Box::new(other)),
        }
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Part, D::Error> {
        Value::deserialize(d).map(Part::from)
    }
}

/// The field's text, when it is a string.
fn str_of(part: &Option<Part>) -> Option<&str> {
    match part {
        Some(Part::Str(s)) => Some(s),
        _ => None,
    }
}

impl Block {
    /// Its `type`, or `""` when that is missing or not a string.
    pub fn kind(&self) -> &str {
        str_of(&self.kind).unwrap_or("")
    }

    /// Its `text`, when that is a string.
    pub fn text(&self) -> Option<&str> {
        str_of(&self.text)
    }

    fn mime_type(&self) -> Option<&str> {
        str_of(&self.mime_type)
    }

    fn data(&self) -> Option<&str> {
        str_of(&self.data)
    }
}

/// A block given as JSON (by the embedder, or mapped from MCP).
impl From<Value> for Block {
    fn from(block: Value) -> Block {
        let Value::Object(mut fields) = block else {
            return Block::default();
        };
        let mut take = |key: &str| fields.remove(key).map(Part::from);
        Block {
            kind: take("type"),
            text: take("text"),
            mime_type: take("mime_type"),
            data: take("data"),
            format: take("format"),
        }
    }
}

/// The fields it kept, as JSON: what `zot ext check` quotes.
impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let fields = [
            ("type", &self.kind),
            ("text", &self.text),
            ("mime_type", &self.mime_type),
            ("data", &self.data),
            ("format", &self.format),
        ];
        let value = |part: &Part| match part {
            Part::Str(s) => Value::String(s.clone()),
            Part::Other(v) => (**v).clone(),
        };
        let kept =
            (fields.into_iter()).filter_map(|(k, v)| Some((k.to_string(), value(v.as_ref()?))));
        write!(f, "{}", Value::Object(kept.collect()))
    }
}

/// The fields of a block, by name.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    Type,
    Text,
    MimeType,
    Data,
    Format,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Block, D::Error> {
        d.deserialize_any(BlockVisitor)
    }
}

/// Reads a block; anything that is no object is a block of no known
/// type (mapped to an error text), not a broken frame.
struct BlockVisitor;

impl<'de> Visitor<'de> for BlockVisitor {
    type Value = Block;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content block")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Block, M::Error> {
        let mut block = Block::default();
        // A key given twice counts once, its last value (as in a `Value`).
        while let Some(field) = map.next_key()? {
            let slot = match field {
                Field::Type => &mut block.kind,
                Field::Text => &mut block.text,
                Field::MimeType => &mut block.mime_type,
                Field::Data => &mut block.data,
                Field::Format => &mut block.format,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        Ok(block)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Block, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Block::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<Block, E> {
        Ok(Block::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Block, E> {
        Ok(Block::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Block, E> {
        Ok(Block::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Block, E> {
        Ok(Block::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Block, E> {
        Ok(Block::default())
    }

    fn visit_unit<E>(self) -> Result<Block, E> {
        Ok(Block::default())
    }
}

/// Keeps valid text and image blocks; an invalid image or unknown block
/// becomes an error text block; empty text blocks are dropped, as
/// upstream does; no blocks left become `NO_CONTENT`.
pub fn map_content(blocks: Vec<Block>) -> Vec<Content> {
    let kept: Vec<Content> = blocks
        .into_iter()
        .filter(|b| !is_empty_text(b))
        .map(map_block)
        .collect();
    if kept.is_empty() {
        return vec![text_block(NO_CONTENT)];
    }
    kept
}

/// A text block with no text: the model is not shown it.
pub fn is_empty_text(block: &Block) -> bool {
    block.kind() == "text" && block.text() == Some("")
}

/// Whether an image block is invalid (its `data` not base64, or fields
/// missing): upstream then marks the whole result `is_error`.
pub(crate) fn has_invalid_image(blocks: &[Block]) -> bool {
    blocks.iter().any(|b| {
        b.kind() == "image"
            && !matches!(
                (b.mime_type(), b.data()),
                (Some(m), Some(d)) if !m.is_empty() && valid_base64(d)
            )
    })
}

/// A text content block.
pub(crate) fn text_block(s: &str) -> Content {
    Content::Text(s.to_string())
}

/// A string field's text, taken.
fn string(field: Option<Part>) -> String {
    match field {
        Some(Part::Str(s)) => s,
        _ => String::new(),
    }
}

fn map_block(block: Block) -> Content {
    match block.kind() {
        // A display hint that is no string, or empty, is no hint.
        "text" if block.text().is_some() => match str_of(&block.format) {
            Some(f) if !f.is_empty() => Content::Formatted {
                format: string(block.format),
                text: string(block.text),
            },
            _ => Content::Text(string(block.text)),
        },
        "text" => text_block("error: text block without a string `text`"),
        "image" => match (block.mime_type(), block.data()) {
            (Some(m), Some(d)) if !m.is_empty() && valid_base64(d) => Content::Image {
                mime_type: string(block.mime_type),
                data: string(block.data),
            },
            (Some(m), Some(_)) if !m.is_empty() => {
                text_block("error: image block `data` is not valid base64")
            }
            _ => text_block("error: image block needs string `mime_type` and `data`"),
        },
        other => text_block(&format!("error: unsupported content block type {other:?}")),
    }
}

/// Bytes of text and image data a `call_tool` result or a `tool_result`
/// event carries at most (docs/PROTOCOL.md#calls-from-extensions, docs/PROTOCOL.md#tool-pipeline).
pub(crate) const RESULT_BUDGET: usize = 256 * 1024;

/// Blocks a `tool_result` event carries at most (upstream's observation limit).
pub(crate) const EVENT_BLOCKS: usize = 128;

/// The blocks that fit `budget` bytes of text, base64 data and MIME
/// types, and at most `max_blocks` of them; true when anything was cut.
/// The first text that does not fit is cut at a UTF-8 boundary, an image
/// that does not fit is left out, and every block after is dropped.
pub(crate) fn bounded(
    blocks: &[Content],
    budget: usize,
    max_blocks: usize,
) -> (Vec<Content>, bool) {
    let mut left = budget;
    let mut kept = Vec::new();
    for block in blocks {
        if kept.len() == max_blocks || left == 0 {
            return (kept, true);
        }
        let size = match block {
            Content::Text(t) | Content::Formatted { text: t, .. } => t.len(),
            Content::Image { mime_type, data } => data.len() + mime_type.len(),
        };
        if size <= left {
            left -= size;
            kept.push(block.clone());
            continue;
        }
        if let Some(t) = block.text() {
            let mut end = left;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            kept.push(match block {
                Content::Formatted { format, .. } => Content::Formatted {
                    text: t[..end].to_string(),
                    format: format.clone(),
                },
                _ => text_block(&t[..end]),
            });
        }
        return (kept, true);
    }
    (kept, false)
}

/// Standard base64 with padding; empty is invalid.
fn valid_base64(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !b.len().is_multiple_of(4) {
        return false;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return false;
    }
    b[..b.len() - pad]
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blocks(values: Vec<Value>) -> Vec<Block> {
        values.into_iter().map(Block::from).collect()
    }

    #[test]
    fn empty_text_is_dropped_and_a_bad_image_is_an_error() {
        let given = blocks(vec![
            json!({"type": "text", "text": ""}),
            json!({"type": "text", "text": "hi"}),
            json!({"type": "image", "mime_type": "image/png", "data": "not base64!"}),
        ]);
        assert!(has_invalid_image(&given));
        let mapped = map_content(given);
        assert_eq!(mapped.len(), 2, "{mapped:?}");
        assert_eq!(mapped[0], text_block("hi"));
        let good = blocks(vec![
            json!({"type": "image", "mime_type": "image/png", "data": "aGk="}),
        ]);
        assert!(!has_invalid_image(&good));
        let image = Content::Image {
            mime_type: "image/png".into(),
            data: "aGk=".into(),
        };
        assert_eq!(map_content(good), [image]);
        let empty = map_content(blocks(vec![
            json!({"type": "text", "text": ""}),
            json!({"text": "", "type": "text"}),
        ]));
        assert_eq!(empty, [text_block(NO_CONTENT)]);
        let odd = blocks(vec![
            json!({"type": "text", "text": 7}),
            json!({"type": "image"}),
        ]);
        assert!(!is_empty_text(&odd[0]) && has_invalid_image(&odd));
    }

    #[test]
    fn a_block_read_from_text_keeps_its_four_fields_and_anything_else_is_no_type() {
        let line = r#"[{"text": "b", "type": "text", "annotations": {"a": [1]}, "text": "c"},
            {"type": "text", "text": 7}, "hi", 5, null, [1, {"type": "text"}], {"type": 3}]"#;
        let read: Vec<Block> = serde_json::from_str(line).expect("blocks parse");
        assert_eq!(read[0].kind(), "text");
        assert_eq!(
            read[0].text(),
            Some("c"),
            "a key given twice: its last value"
        );
        assert_eq!(read[1].to_string(), r#"{"type":"text","text":7}"#);
        for other in &read[2..6] {
            assert_eq!(*other, Block::default(), "{other}");
        }
        assert_eq!(read[6].kind(), "", "a type that is no string");
        let lines: Vec<String> = map_content(read)
            .iter()
            .map(|c| serde_json::to_string(c).expect("serializes"))
            .collect();
        let none = r#"{"type":"text","text":"error: unsupported content block type \"\""}"#;
        assert_eq!(
            lines,
            [
                r#"{"type":"text","text":"c"}"#,
                r#"{"type":"text","text":"error: text block without a string `text`"}"#,
                none,
                none,
                none,
                none,
                none,
            ]
        );
    }

    #[test]
    fn a_display_hint_is_kept_and_one_that_is_no_string_is_dropped() {
        let line = r#"[{"type": "text", "text": "*hi*", "format": "markdown"},
            {"type": "text", "text": "a", "format": "rst"},
            {"type": "text", "text": "b", "format": 3},
            {"type": "text", "text": "c", "format": ""}]"#;
        let read: Vec<Block> = serde_json::from_str(line).expect("blocks parse");
        let mapped = map_content(read);
        assert_eq!(mapped[0].format(), Some("markdown"));
        assert_eq!(mapped[0].text(), Some("*hi*"));
        assert_eq!(mapped[1].format(), Some("rst"), "kept as sent");
        assert_eq!(mapped[2], text_block("b"));
        assert_eq!(mapped[3], text_block("c"));
        let text = serde_json::to_string(&mapped[0]).expect("serializes");
        assert_eq!(text, r#"{"type":"text","text":"*hi*","format":"markdown"}"#);
        assert_eq!(mapped[0].clone().plain(), text_block("*hi*"));
    }

    #[test]
    fn bounded_cuts_text_at_a_char_boundary_and_drops_the_rest() {
        let blocks = vec![text_block("héllo"), text_block("more")];
        // "h" + the two bytes of "é" do not fit in 2: the cut is after "h".
        let (kept, cut) = bounded(&blocks, 2, 10);
        assert!(cut);
        assert_eq!(kept, vec![text_block("h")]);
        let (kept, cut) = bounded(&blocks, 100, 10);
        assert!(!cut);
        assert_eq!(kept, blocks);
        let (kept, cut) = bounded(&blocks, 100, 1);
        assert!(cut);
        assert_eq!(kept.len(), 1);
        let image = Content::Image {
            mime_type: "image/png".into(),
            data: "aGVsbG8h".into(),
        };
        let (kept, cut) = bounded(&[image], 10, 10);
        assert!(
            cut && kept.is_empty(),
            "an image that does not fit is left out"
        );
    }

    #[test]
    fn base64() {
        for ok in ["aGk=", "aGVsbG8h", "YQ==", "+/+/"] {
            assert!(valid_base64(ok), "{ok}");
        }
        for bad in ["", "aGk", "a===", "aG!k", "YQ=a"] {
            assert!(!valid_base64(bad), "{bad}");
        }
    }
}
