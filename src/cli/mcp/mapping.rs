//! What zot things become in MCP (SPEC 9 "Mapping"): tools are tools,
//! commands are prompts with one optional `args` argument.

use super::jsonrpc::{RpcError, INTERNAL_ERROR};
use serde_json::{json, Map, Value};
use zot_host::{CommandOutcome, Snapshot, ToolOutcome};

/// `tools/list` entries: every extension tool.
pub fn tools(snapshot: &Snapshot) -> Vec<Value> {
    snapshot
        .tools
        .iter()
        .map(|t| {
            let mut schema = match &t.schema {
                Some(Value::Object(s)) => s.clone(),
                _ => Map::new(),
            };
            // MCP requires an object schema; zot only requires an object.
            schema
                .entry("type")
                .or_insert_with(|| Value::from("object"));
            json!({"name": t.name, "description": t.description, "inputSchema": schema})
        })
        .collect()
}

/// `prompts/list` entries: every extension command.
pub fn prompts(snapshot: &Snapshot) -> Vec<Value> {
    snapshot
        .commands
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "description": c.description,
                "arguments": [{
                    "name": "args",
                    "description": "the command's argument text",
                    "required": false,
                }],
            })
        })
        .collect()
}

/// A tool outcome as a `tools/call` result.
pub fn tool_result(outcome: ToolOutcome) -> Map<String, Value> {
    let content: Vec<Value> = if outcome.blocked {
        let reason = outcome.reason.as_deref().unwrap_or("blocked by a guard");
        vec![json!({"type": "text", "text": format!("blocked: {reason}")})]
    } else {
        outcome.content.into_iter().map(block).collect()
    };
    let mut result = Map::new();
    result.insert("content".into(), content.into());
    result.insert(
        "isError".into(),
        (outcome.is_error || outcome.blocked).into(),
    );
    result
}

/// A tool that could not run (its extension exited or timed out).
pub fn tool_failure(error: &str) -> Map<String, Value> {
    let mut result = Map::new();
    result.insert("content".into(), json!([{"type": "text", "text": error}]));
    result.insert("isError".into(), true.into());
    result
}

/// One zot result block as an MCP content block.
fn block(b: Value) -> Value {
    match b.get("type").and_then(Value::as_str) {
        Some("image") => json!({
            "type": "image",
            "data": b.get("data").cloned().unwrap_or_default(),
            "mimeType": b.get("mime_type").cloned().unwrap_or_default(),
        }),
        _ => json!({
            "type": "text",
            "text": b.get("text").and_then(Value::as_str).unwrap_or_default(),
        }),
    }
}

/// A command outcome as a `prompts/get` result; a command error is a
/// JSON-RPC error with its text.
pub fn prompt_result(name: &str, outcome: CommandOutcome) -> Result<Map<String, Value>, RpcError> {
    if let Some(error) = outcome.error.filter(|e| !e.is_empty()) {
        return Err(RpcError::new(INTERNAL_ERROR, error));
    }
    let message = |role: &str, text: Option<String>| json!({"role": role, "content": {"type": "text", "text": text.unwrap_or_default()}});
    let (description, messages) = match outcome.action.as_str() {
        "prompt" => (
            format!("/{name}: a prompt to submit"),
            vec![message("user", outcome.prompt)],
        ),
        "insert" => (
            format!("/{name}: text for the input line"),
            vec![message("user", outcome.insert)],
        ),
        "display" => (
            format!("/{name}: a note to show"),
            vec![message("assistant", outcome.display)],
        ),
        other => (
            format!("/{name} ran ({other}); it gives no message"),
            Vec::new(),
        ),
    };
    let mut result = Map::new();
    result.insert("description".into(), description.into());
    result.insert("messages".into(), messages.into());
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_blocked_calls() {
        let ok = tool_result(ToolOutcome {
            extension: "e".into(),
            content: vec![
                json!({"type": "text", "text": "hi"}),
                json!({"type": "image", "mime_type": "image/png", "data": "AAAA"}),
            ],
            is_error: false,
            blocked: false,
            reason: None,
            ..Default::default()
        });
        assert_eq!(
            Value::Object(ok),
            json!({"content": [{"type": "text", "text": "hi"},
                               {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                   "isError": false})
        );
        let blocked = tool_result(ToolOutcome {
            extension: "e".into(),
            content: vec![],
            is_error: false,
            blocked: true,
            reason: Some("no".into()),
            ..Default::default()
        });
        assert_eq!(blocked["content"][0]["text"], "blocked: no");
        assert_eq!(blocked["isError"], true);
    }

    #[test]
    fn command_actions_become_messages() {
        let out = |action: &str| CommandOutcome {
            extension: "e".into(),
            action: action.into(),
            prompt: Some("p".into()),
            insert: Some("i".into()),
            display: Some("d".into()),
            ..Default::default()
        };
        let p = prompt_result("c", out("prompt")).unwrap();
        assert_eq!(
            p["messages"],
            json!([{"role": "user", "content": {"type": "text", "text": "p"}}])
        );
        let d = prompt_result("c", out("display")).unwrap();
        assert_eq!(d["messages"][0]["role"], "assistant");
        assert_eq!(
            prompt_result("c", out("noop")).unwrap()["messages"],
            json!([])
        );
        let mut failed = out("display");
        failed.error = Some("bad".into());
        assert_eq!(prompt_result("c", failed).unwrap_err().message, "bad");
    }
}
