//! JSON-RPC 2.0 framing for `zot mcp`: classifying one input line and
//! building response and notification lines (one JSON object per line).
//!
//! Ids are kept as the JSON text they came as (SPEC 9 "Bounds"): a
//! `Value` would turn an integer beyond 64 bits into a float, so two
//! such ids would collide and come back changed.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::fmt;

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

/// A request id: its JSON text, echoed as it came.
#[derive(Debug, Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    /// `null`, for an answer to a line whose id could not be read.
    pub fn null() -> Id {
        Id::of(&Value::Null)
    }

    /// The id `value` (exact when it is a string or a 64-bit integer).
    fn of(value: &Value) -> Id {
        let text = value.to_string();
        Id(RawValue::from_string(text).unwrap_or_else(|_| Id::null().0))
    }

    /// `raw` when it is the exact text of `value`, else `value`'s own.
    fn exact(value: &Value, raw: Option<Box<RawValue>>) -> Id {
        match raw {
            Some(raw) if serde_json::from_str::<Value>(raw.get()).ok().as_ref() == Some(value) => {
                Id(raw)
            }
            _ => Id::of(value),
        }
    }

    /// The key under which it is tracked: its text (`1` and `"1"` differ).
    pub fn key(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.key() == other.key()
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

impl Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// One line from the client, classified.
#[derive(Debug)]
pub enum Incoming {
    /// A request: must get exactly one response (unless cancelled).
    Request {
        id: Id,
        method: String,
        params: Map<String, Value>,
    },
    /// A notification: never answered. `request_id`: its
    /// `params.requestId`, exact (what `notifications/cancelled` names).
    Notification {
        method: String,
        request_id: Option<Id>,
    },
    /// A response to a request of ours (we send none): ignored.
    Response,
    /// Answer with this error; `id` is null when it could not be read.
    Invalid { id: Id, error: RpcError },
}

/// The ids of a line as their JSON text (read again only when a number
/// is one a `Value` cannot hold exactly).
#[derive(Deserialize, Default)]
struct RawIds {
    id: Option<Box<RawValue>>,
    params: Option<RawParams>,
}

#[derive(Deserialize)]
struct RawParams {
    #[serde(rename = "requestId")]
    request_id: Option<Box<RawValue>>,
}

/// Whether `v` is a number whose `Value` may differ from its text.
fn inexact(v: Option<&Value>) -> bool {
    v.and_then(Value::as_number)
        .is_some_and(|n| !n.is_i64() && !n.is_u64())
}

/// Classifies one line (SPEC 9 "Bad input").
pub fn classify(line: &[u8]) -> Incoming {
    let value: Value = match zot_host::protocol::parse_json(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Id::null(),
                error: RpcError::new(PARSE_ERROR, format!("parse error: {e}")),
            }
        }
    };
    let request_id = value.pointer("/params/requestId");
    let raw = match inexact(value.get("id")) || inexact(request_id) {
        true => serde_json::from_slice::<RawIds>(line).unwrap_or_default(),
        false => RawIds::default(),
    };
    let request_id = request_id.map(|v| Id::exact(v, raw.params.and_then(|p| p.request_id)));
    let invalid = |id: Option<Id>, why: &str| Incoming::Invalid {
        id: id.unwrap_or_else(Id::null),
        error: RpcError::new(INVALID_REQUEST, format!("invalid request: {why}")),
    };
    let Value::Object(mut obj) = value else {
        let why = if value.is_array() {
            "batches (arrays) are not supported; send one object per line"
        } else {
            "a message must be a JSON object"
        };
        return invalid(None, why);
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(Id::exact(&id, raw.id)),
        Some(_) => return invalid(None, "`id` must be a string or a number"),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "`jsonrpc` must be \"2.0\"");
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            return Incoming::Response
        }
        _ => return invalid(id, "missing string `method`"),
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
        None => Incoming::Notification { method, request_id },
    }
}

/// A response line: `result` or `error`, for `id` as it came.
#[derive(Serialize)]
pub struct Response<'a, R = Value> {
    jsonrpc: &'static str,
    id: &'a Id,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Value>,
}

/// A success response line.
pub fn result_line<R: Serialize>(id: &Id, result: R) -> Response<'_, R> {
    Response {
        jsonrpc: "2.0",
        id,
        result: Some(result),
        error: None,
    }
}

/// An error response line.
pub fn error_line<'a>(id: &'a Id, error: &RpcError) -> Response<'a> {
    let mut err = Map::new();
    err.insert("code".into(), error.code.into());
    err.insert("message".into(), error.message.clone().into());
    if let Some(data) = &error.data {
        err.insert("data".into(), data.clone());
    }
    Response {
        jsonrpc: "2.0",
        id,
        result: None,
        error: Some(err.into()),
    }
}

/// `fields` with `_meta` naming a listen stream by its id (2026-07-28),
/// and the server's identity when `server_info` is given.
#[derive(Serialize)]
pub struct WithSubscription<'a> {
    #[serde(flatten)]
    pub fields: Map<String, Value>,
    #[serde(rename = "_meta")]
    pub meta: SubscriptionMeta<'a>,
}

#[derive(Serialize)]
pub struct SubscriptionMeta<'a> {
    #[serde(
        rename = "io.modelcontextprotocol/serverInfo",
        skip_serializing_if = "Option::is_none"
    )]
    pub server_info: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/subscriptionId")]
    pub subscription_id: &'a Id,
}

/// A notification whose params name a listen stream.
#[derive(Serialize)]
pub struct SubscriptionNotification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    params: WithSubscription<'a>,
}

pub fn subscription_notification<'a>(
    method: &'a str,
    params: WithSubscription<'a>,
) -> SubscriptionNotification<'a> {
    SubscriptionNotification {
        jsonrpc: "2.0",
        method,
        params,
    }
}

/// A notification line.
pub fn notification_line(method: &str, params: Option<Value>) -> Value {
    match params {
        Some(p) => json!({"jsonrpc": "2.0", "method": method, "params": p}),
        None => json!({"jsonrpc": "2.0", "method": method}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(line: &str) -> (Value, i64) {
        match classify(line.as_bytes()) {
            Incoming::Invalid { id, error } => {
                (serde_json::from_str(id.key()).unwrap(), error.code)
            }
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
    }

    fn id_of(line: &str) -> Id {
        match classify(line.as_bytes()) {
            Incoming::Request { id, .. } => id,
            other => panic!("{line}: expected a request, got {other:?}"),
        }
    }

    #[test]
    fn ids_keep_their_json_text() {
        let big = "123456789012345678901234567890";
        let line = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(id_of(&line(big)).key(), big);
        assert_ne!(
            id_of(&line(big)),
            id_of(&line("123456789012345678901234567891"))
        );
        assert_eq!(id_of(&line("1e2")).key(), "1e2");
        assert_ne!(id_of(&line("1")), id_of(&line("\"1\"")));
        let answer = serde_json::to_string(&result_line(&id_of(&line(big)), json!({})));
        assert_eq!(
            answer.unwrap(),
            format!(r#"{{"jsonrpc":"2.0","id":{big},"result":{{}}}}"#)
        );
        let cancel = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{big}}}}}"#
        );
        let Incoming::Notification { request_id, .. } = classify(cancel.as_bytes()) else {
            panic!("not a notification");
        };
        assert_eq!(
            request_id.map(|id| id.key().to_string()),
            Some(big.to_string())
        );
    }
}
