//! JSON-RPC 2.0 framing for `zot mcp`: classifying one input line and
//! building response and notification lines (one JSON object per line).

use serde_json::{json, Map, Value};

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// A server error: too many requests in flight (SPEC 9 "Bounds").
pub const SERVER_BUSY: i64 = -32000;
/// MCP 2026-07-28: the requested protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// A JSON-RPC error: code, message and optional data.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
}

/// One line from the client, classified.
#[derive(Debug)]
pub enum Incoming {
    /// A request: must get exactly one response (unless cancelled).
    Request {
        id: Value,
        method: String,
        params: Map<String, Value>,
    },
    /// A notification: never answered.
    Notification {
        method: String,
        params: Map<String, Value>,
    },
    /// A response to a request of ours (we send none): ignored.
    Response,
    /// Answer with this error; `id` is null when it could not be read.
    Invalid { id: Value, error: RpcError },
}

/// Classifies one line (SPEC 9 "Bad input").
pub fn classify(line: &[u8]) -> Incoming {
    let value: Value = match zot_host::protocol::parse_json(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(PARSE_ERROR, format!("parse error: {e}")),
            }
        }
    };
    let invalid = |id: Value, why: &str| Incoming::Invalid {
        id,
        error: RpcError::new(INVALID_REQUEST, format!("invalid request: {why}")),
    };
    let Value::Object(mut obj) = value else {
        let why = if value.is_array() {
            "batches (arrays) are not supported; send one object per line"
        } else {
            "a message must be a JSON object"
        };
        return invalid(Value::Null, why);
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        Some(_) => return invalid(Value::Null, "`id` must be a string or a number"),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id.unwrap_or(Value::Null), "`jsonrpc` must be \"2.0\"");
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            return Incoming::Response
        }
        _ => return invalid(id.unwrap_or(Value::Null), "missing string `method`"),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            let error = RpcError::params("`params` must be an object");
            return match id {
                Some(id) => Incoming::Invalid { id, error },
                // A notification is never answered, even when malformed.
                None => Incoming::Response,
            };
        }
    };
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    }
}

/// A success response line.
pub fn result_line(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response line.
pub fn error_line(id: &Value, error: &RpcError) -> Value {
    let mut err = Map::new();
    err.insert("code".into(), error.code.into());
    err.insert("message".into(), error.message.clone().into());
    if let Some(data) = &error.data {
        err.insert("data".into(), data.clone());
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err})
}

/// A notification line.
pub fn notification_line(method: &str, params: Option<Value>) -> Value {
    match params {
        Some(p) => json!({"jsonrpc": "2.0", "method": method, "params": p}),
        None => json!({"jsonrpc": "2.0", "method": method}),
    }
}

/// The key under which a request id is tracked (`1` and `"1"` differ).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(line: &str) -> (Value, i64) {
        match classify(line.as_bytes()) {
            Incoming::Invalid { id, error } => (id, error.code),
            other => panic!("{line}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn lines_nested_too_deep_are_parse_errors() {
        // 100 levels: valid JSON serde would parse, refused before it.
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(code(&deep), (Value::Null, PARSE_ERROR));
        let deeper = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}}"#,
            "[".repeat(1_000_000)
        );
        assert_eq!(code(&deeper), (Value::Null, PARSE_ERROR));
    }

    #[test]
    fn bad_input_gets_the_json_rpc_codes() {
        assert_eq!(code("{not json"), (Value::Null, PARSE_ERROR));
        assert_eq!(code("[]"), (Value::Null, INVALID_REQUEST));
        assert_eq!(
            code("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]").1,
            INVALID_REQUEST
        );
        assert_eq!(code("7"), (Value::Null, INVALID_REQUEST));
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":3}"#),
            (json!(3), INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"id":3,"method":"ping"}"#),
            (json!(3), INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#).1,
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":[1]}"#),
            (json!("a"), INVALID_PARAMS)
        );
    }

    #[test]
    fn requests_notifications_and_responses() {
        let req = classify(br#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#);
        assert!(matches!(req, Incoming::Request { ref method, .. } if method == "tools/list"));
        let note = classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(note, Incoming::Notification { .. }));
        let resp = classify(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert!(matches!(resp, Incoming::Response));
        assert_ne!(id_key(&json!(1)), id_key(&json!("1")));
    }
}
