//! What zot things become in MCP (docs/PROTOCOL.md#zot-mcp): tools are tools,
//! commands are prompts with one optional `args` argument.

use serde_json::{json, Map, Value};
use zot_host::internal::jsonrpc::{RpcError, INTERNAL_ERROR};
use zot_host::{CommandOutcome, Content, Snapshot, ToolResult};

/// `tools/list` entries: every active extension tool (a deferred one
/// once activated), with its `outputSchema` when it declares one that
/// MCP can carry (docs/PROTOCOL.md#structured-and-deferred-tools).
pub fn tools(snapshot: &Snapshot) -> Vec<Value> {
    let tools = snapshot.tools.iter();
    #[cfg(feature = "tool-extras")]
    let tools = tools.filter(|t| t.active);
    tools
        .map(|t| {
            #[cfg_attr(not(feature = "tool-extras"), allow(unused_mut))]
            let mut tool = json!({
                "name": t.name,
                "description": t.description,
                "inputSchema": object_schema(t.schema.as_ref()).unwrap_or_default(),
            });
            #[cfg(feature = "tool-extras")]
            if let Some(output) = t
                .output_schema
                .as_ref()
                .and_then(|s| object_schema(Some(s)))
            {
                tool["outputSchema"] = output.into();
            }
            tool
        })
        .collect()
}

/// A schema as MCP requires it, `"type": "object"` (zot only requires a
/// JSON object: the type is added when absent); none for another type.
fn object_schema(schema: Option<&Value>) -> Option<Map<String, Value>> {
    let mut schema = match schema {
        Some(Value::Object(s)) => s.clone(),
        _ => Map::new(),
    };
    let kind = schema
        .entry("type")
        .or_insert_with(|| Value::from("object"));
    (kind == "object").then_some(schema)
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

/// An extension tool's result as a `tools/call` result. MCP clients validate the
/// `structuredContent` of a tool with an `outputSchema` and reject a
/// result without it: that is an `isError` result saying so instead.
/// Without the `tool-extras` feature there is neither.
#[cfg_attr(not(feature = "tool-extras"), allow(unused_variables))]
pub fn tool_result(name: &str, outcome: ToolResult) -> Map<String, Value> {
    let failed = outcome.is_error || outcome.blocked;
    #[cfg(feature = "tool-extras")]
    let structured = match outcome.structured_content {
        Some(Value::Object(o)) => Some(o),
        Some(_) if outcome.declares_output && !failed => {
            return tool_failure(&format!(
                "tool {name} returned structured_content that is not a JSON object; MCP carries objects only"
            ));
        }
        None if outcome.declares_output && !failed => {
            return tool_failure(&format!(
                "tool {name} declares an output_schema but returned no structured_content"
            ));
        }
        _ => None,
    };
    let content: Vec<Value> = if outcome.blocked {
        let reason = outcome.reason.as_deref().unwrap_or("blocked by a guard");
        vec![json!({"type": "text", "text": format!("blocked: {reason}")})]
    } else {
        outcome.content.into_iter().map(block).collect()
    };
    let mut result = Map::new();
    result.insert("content".into(), content.into());
    #[cfg(feature = "tool-extras")]
    if let Some(structured) = structured {
        result.insert("structuredContent".into(), structured.into());
    }
    result.insert("isError".into(), failed.into());
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
fn block(b: Content) -> Value {
    match b {
        Content::Image { mime_type, data } => json!({
            "type": "image",
            "data": data,
            "mimeType": mime_type,
        }),
        // MCP has no display hint: the text only.
        Content::Text(text) | Content::Formatted { text, .. } => {
            json!({"type": "text", "text": text})
        }
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
        // MCP prompts carry messages, not tool calls: the prompt alone;
        // the client (or its model) may call the tool itself.
        #[cfg(feature = "tool-extras")]
        "tool_prompt" => (
            format!(
                "/{name}: a prompt meant to follow the result of tool {} (not run here)",
                outcome.tool_name.as_deref().unwrap_or("?")
            ),
            vec![message("user", outcome.prompt)],
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
        let ok = tool_result(
            "t",
            ToolResult {
                extension: "e".into(),
                content: vec![
                    Content::Text("hi".into()),
                    Content::Formatted {
                        text: "*md*".into(),
                        format: "markdown".into(),
                    },
                    Content::Image {
                        mime_type: "image/png".into(),
                        data: "AAAA".into(),
                    },
                ],
                is_error: false,
                blocked: false,
                reason: None,
                ..Default::default()
            },
        );
        assert_eq!(
            Value::Object(ok),
            json!({"content": [{"type": "text", "text": "hi"},
                               {"type": "text", "text": "*md*"},
                               {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                   "isError": false})
        );
        let blocked = tool_result(
            "t",
            ToolResult {
                extension: "e".into(),
                content: vec![],
                is_error: false,
                blocked: true,
                reason: Some("no".into()),
                ..Default::default()
            },
        );
        assert_eq!(blocked["content"][0]["text"], "blocked: no");
        assert_eq!(blocked["isError"], true);
    }

    #[test]
    fn command_actions_become_messages() {
        let out = |action: &str| CommandOutcome {
            extension: "e".into(),
            action: zot_host::Action::parse(action).expect("an action"),
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
