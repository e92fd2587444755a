//! Mapping an extension's `tool_result.content` to the blocks the
//! model sees (SPEC 3.12).

use serde_json::{json, Value};

/// Text used when a tool returns no blocks at all.
pub(crate) const NO_CONTENT: &str = "(extension returned no content)";

/// Keeps valid text and image blocks; an invalid image or unknown block
/// becomes an error text block; empty text blocks are dropped, as
/// upstream does; no blocks left become `NO_CONTENT`.
pub fn map_content(blocks: Vec<Value>) -> Vec<Value> {
    let kept: Vec<Value> = blocks
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
pub fn is_empty_text(block: &Value) -> bool {
    match plain_text(block) {
        Some(text) => text.is_empty(),
        None => block["type"] == "text" && block["text"] == "",
    }
}

/// Whether an image block is invalid (its `data` not base64, or fields
/// missing): upstream then marks the whole result `is_error`.
pub(crate) fn has_invalid_image(blocks: &[Value]) -> bool {
    blocks.iter().any(|b| {
        plain_text(b).is_none()
            && b["type"] == "image"
            && !matches!(
                (b["mime_type"].as_str(), b["data"].as_str()),
                (Some(m), Some(d)) if !m.is_empty() && valid_base64(d)
            )
    })
}

/// The text of a text block with a string `text` and no other field,
/// keys in `text_block`'s order: the block most tools return, kept as it
/// came instead of built again. Its fields are walked in order, not
/// looked up by hash (each lookup hashes the key).
fn plain_text(block: &Value) -> Option<&str> {
    let mut fields = block.as_object()?.iter();
    match (fields.next(), fields.next(), fields.next()) {
        (Some((ty, Value::String(kind))), Some((key, Value::String(text))), None)
            if ty == "type" && kind == "text" && key == "text" =>
        {
            Some(text)
        }
        _ => None,
    }
}

/// A text content block.
pub(crate) fn text_block(s: &str) -> Value {
    json!({"type": "text", "text": s})
}

fn map_block(block: Value) -> Value {
    if plain_text(&block).is_some() {
        return block; // already what text_block would build
    }
    match block["type"].as_str().unwrap_or("") {
        "text" => match block["text"].as_str() {
            Some(t) => text_block(t),
            None => text_block("error: text block without a string `text`"),
        },
        "image" => match (block["mime_type"].as_str(), block["data"].as_str()) {
            (Some(m), Some(d)) if !m.is_empty() && valid_base64(d) => {
                json!({"type": "image", "mime_type": m, "data": d})
            }
            (Some(m), Some(_)) if !m.is_empty() => {
                text_block("error: image block `data` is not valid base64")
            }
            _ => text_block("error: image block needs string `mime_type` and `data`"),
        },
        other => text_block(&format!("error: unsupported content block type {other:?}")),
    }
}

/// Bytes of text and image data a `call_tool` result or a `tool_result`
/// event carries at most (SPEC 13.4, 13.5).
pub(crate) const RESULT_BUDGET: usize = 256 * 1024;

/// Blocks a `tool_result` event carries at most (upstream's observation limit).
pub(crate) const EVENT_BLOCKS: usize = 128;

/// The blocks that fit `budget` bytes of text, base64 data and MIME
/// types, and at most `max_blocks` of them; true when anything was cut.
/// The first text that does not fit is cut at a UTF-8 boundary, an image
/// that does not fit is left out, and every block after is dropped.
pub(crate) fn bounded(blocks: &[Value], budget: usize, max_blocks: usize) -> (Vec<Value>, bool) {
    let mut left = budget;
    let mut kept = Vec::new();
    for block in blocks {
        if kept.len() == max_blocks || left == 0 {
            return (kept, true);
        }
        let text = block["text"].as_str();
        let size = match text {
            Some(t) => t.len(),
            None => {
                let field = |k: &str| block[k].as_str().map_or(0, str::len);
                field("data") + field("mime_type")
            }
        };
        if size <= left {
            left -= size;
            kept.push(block.clone());
            continue;
        }
        if let Some(t) = text.filter(|_| block["type"] == "text") {
            let mut end = left;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            kept.push(text_block(&t[..end]));
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

    #[test]
    fn empty_text_is_dropped_and_a_bad_image_is_an_error() {
        let blocks = vec![
            json!({"type": "text", "text": ""}),
            json!({"type": "text", "text": "hi"}),
            json!({"type": "image", "mime_type": "image/png", "data": "not base64!"}),
        ];
        assert!(has_invalid_image(&blocks));
        let mapped = map_content(blocks);
        assert_eq!(mapped.len(), 2, "{mapped:?}");
        assert_eq!(mapped[0], text_block("hi"));
        let good = [json!({"type": "image", "mime_type": "image/png", "data": "aGk="})];
        assert!(!has_invalid_image(&good));
        let empty = map_content(vec![
            json!({"type": "text", "text": ""}),
            json!({"text": "", "type": "text"}),
        ]);
        assert_eq!(empty, [text_block(NO_CONTENT)]);
        let odd = [json!({"type": "text", "text": 7}), json!({"type": "image"})];
        assert!(!is_empty_text(&odd[0]) && has_invalid_image(&odd));
    }

    #[test]
    fn a_text_block_comes_out_as_text_block_builds_it() {
        let blocks = vec![
            json!({"type": "text", "text": "plain"}),
            json!({"text": "reordered", "type": "text"}),
            json!({"type": "text", "text": "extra", "annotations": {"a": 1}}),
        ];
        let mapped = map_content(blocks);
        let lines: Vec<String> = mapped.iter().map(Value::to_string).collect();
        assert_eq!(
            lines,
            [
                r#"{"type":"text","text":"plain"}"#,
                r#"{"type":"text","text":"reordered"}"#,
                r#"{"type":"text","text":"extra"}"#,
            ]
        );
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
        let image = json!({"type": "image", "mime_type": "image/png", "data": "aGVsbG8h"});
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
