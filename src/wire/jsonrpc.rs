//! JSON-RPC 2.0, one message per line (MCP's stdio transport): the one
//! message type that the MCP client of `"protocol": "mcp"` extensions
//! (docs/PROTOCOL.md#mcp-servers) and `zot mcp` (docs/PROTOCOL.md#zot-mcp) read and
//! write.
//!
//! [`Message::parse`] reads a line by the rules of docs/PROTOCOL.md#zot-mcp:
//! what is not a request, a notification or a response is an
//! [`Invalid`] that says what to answer. Ids are kept as the JSON text
//! they came as (docs/PROTOCOL.md#zot-mcp): a `Value` would turn an integer
//! beyond 64 bits into a float, so two such ids would collide and come
//! back changed.

use crate::wire::protocol::parse_json;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt;

/// Invalid JSON was received.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// A server error: too many requests in flight (docs/PROTOCOL.md#limits-and-bounds).
pub const SERVER_BUSY: i64 = -32000;
/// MCP 2026-07-28: the requested protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// One JSON-RPC message. `P` is what requests and notifications carry
/// as `params`, `R` what a response carries as `result`: read, they are
/// JSON; written, anything that serializes.
#[derive(Debug)]
pub enum Message<P = Map<String, Value>, R = Value> {
    /// Must get exactly one response (unless cancelled).
    Request(Request<P>),
    /// Never answered.
    Notification(Notification<P>),
    /// The answer to a request.
    Response(Response<R>),
}

/// A request: `params` is `{}` when it came without.
#[derive(Debug)]
pub struct Request<P = Map<String, Value>> {
    /// Its id, echoed by the response.
    pub id: Id,
    /// Its method.
    pub method: String,
    /// Its params.
    pub params: P,
}

/// A notification.
#[derive(Debug)]
pub struct Notification<P = Map<String, Value>> {
    /// Its method.
    pub method: String,
    /// Its params (`None`: it has none, written without).
    pub params: Option<P>,
    /// Read only: `params.requestId` exactly as it came (what
    /// `notifications/cancelled` names).
    pub request_id: Option<Id>,
}

/// A response: its `result`, or its `error`.
#[derive(Debug)]
pub struct Response<R = Value> {
    /// The id of the request it answers.
    pub id: Id,
    /// `result`, or `error`.
    pub result: Result<R, RpcError>,
}

/// A JSON-RPC error: code, message and optional data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    /// The error code (0 when a peer sent none).
    pub code: i64,
    /// What went wrong (empty when a peer sent none).
    pub message: String,
    /// Anything more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// [`INVALID_PARAMS`] with `message`.
    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// A peer's error object, whatever its shape: what is missing or
    /// mistyped is left empty.
    fn read(value: Value) -> RpcError {
        let Value::Object(mut obj) = value else {
            return RpcError::new(0, "");
        };
        let message = match obj.remove("message") {
            Some(Value::String(m)) => m,
            _ => String::new(),
        };
        let code = obj.get("code").and_then(Value::as_i64).unwrap_or(0);
        RpcError {
            code,
            message,
            data: obj.remove("data"),
        }
    }
}

/// A line that is not a message, and what to answer.
#[derive(Debug)]
pub struct Invalid {
    /// The id to answer: `null` when it could not be read; `None` for a
    /// malformed notification, which is never answered.
    pub reply_to: Option<Id>,
    /// The error code to answer with.
    pub code: i64,
    /// What is wrong with the line.
    pub why: String,
    /// The request it would answer, when it has an `id` and no `method`:
    /// a response that is not one (JSON-RPC 2.0 section 5: `jsonrpc`
    /// "2.0", and `result` or `error`).
    pub answers: Option<Id>,
}

impl Invalid {
    /// The error to answer with.
    pub fn error(&self) -> RpcError {
        let message = match self.code {
            PARSE_ERROR => format!("parse error: {}", self.why),
            INVALID_REQUEST => format!("invalid request: {}", self.why),
            _ => self.why.clone(),
        };
        RpcError::new(self.code, message)
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

    /// An id as it came: strings and 64-bit integers in their usual
    /// text (`"a\u0062"` is `"ab"`), other numbers as written. `None`
    /// when it is neither a string nor a number.
    fn read(raw: Box<RawValue>) -> Option<Id> {
        match serde_json::from_str::<Value>(raw.get()).ok()? {
            v @ Value::String(_) => Some(Id::of(&v)),
            Value::Number(n) if n.is_i64() || n.is_u64() => Some(Id::of(&n.into())),
            Value::Number(_) => Some(Id(raw)),
            _ => None,
        }
    }

    /// The key under which it is tracked: its text (`1` and `"1"` differ).
    pub fn key(&self) -> &str {
        self.0.get()
    }

    /// The number it is, when it is a 64-bit unsigned integer.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        self.key().parse().ok()
    }
}

impl From<u64> for Id {
    fn from(n: u64) -> Id {
        Id::of(&n.into())
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
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl Message {
    /// Reads one line (docs/PROTOCOL.md#zot-mcp).
    pub fn parse(line: &[u8]) -> Result<Message, Invalid> {
        let parse_error = |why| Invalid {
            reply_to: Some(Id::null()),
            code: PARSE_ERROR,
            why,
            answers: None,
        };
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            parse_json::<IgnoredAny>(line).map_err(parse_error)?;
            let why = match first {
                Some(b'[') => "batches (arrays) are not supported; send one object per line",
                _ => "a message must be a JSON object",
            };
            return Err(invalid(Some(Id::null()), INVALID_REQUEST, why));
        }
        let obj: Fields = parse_json(line).map_err(parse_error)?;
        let id = match obj.id.map(Id::read) {
            None => None,
            Some(Some(id)) => Some(id),
            Some(None) => {
                let why = "`id` must be a string or a number";
                return Err(invalid(Some(Id::null()), INVALID_REQUEST, why));
            }
        };
        let reply_to = || Some(id.clone().unwrap_or_else(Id::null));
        let answers = id.clone().filter(|_| obj.method.is_none());
        if obj.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Err(Invalid {
                answers,
                ..invalid(reply_to(), INVALID_REQUEST, "`jsonrpc` must be \"2.0\"")
            });
        }
        let method = match (obj.method, id) {
            (Some(Value::String(m)), id) => (m, id),
            (None, Some(id)) if obj.result.is_some() || obj.error.is_some() => {
                let result = match (obj.result, obj.error) {
                    (Some(result), _) => Ok(result),
                    (None, error) => Err(RpcError::read(error.unwrap_or_default())),
                };
                return Ok(Message::Response(Response { id, result }));
            }
            (None, Some(id)) => {
                let why = "missing string `method` (a response: `result` or `error`)";
                return Err(Invalid {
                    answers,
                    ..invalid(Some(id), INVALID_REQUEST, why)
                });
            }
            (_, id) => {
                let reply_to = Some(id.unwrap_or_else(Id::null));
                return Err(invalid(
                    reply_to,
                    INVALID_REQUEST,
                    "missing string `method`",
                ));
            }
        };
        let (method, id) = method;
        let params = match obj.params {
            None | Some(Value::Null) => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => {
                return Err(Invalid {
                    // A notification is never answered, even when malformed.
                    reply_to: id,
                    code: INVALID_PARAMS,
                    why: "`params` must be an object".into(),
                    answers: None,
                });
            }
        };
        Ok(match id {
            Some(id) => Message::Request(Request {
                id,
                method,
                params: params.unwrap_or_default(),
            }),
            None => {
                let request_id = params.as_ref().and_then(|p| p.get("requestId"));
                let request_id = request_id.and_then(|v| match v {
                    Value::Number(n) if !n.is_i64() && !n.is_u64() => exact_request_id(line),
                    v => Some(Id::of(v)),
                });
                Message::Notification(Notification {
                    method,
                    params,
                    request_id,
                })
            }
        })
    }
}

fn invalid(reply_to: Option<Id>, code: i64, why: &str) -> Invalid {
    Invalid {
        reply_to,
        code,
        why: why.into(),
        answers: None,
    }
}

/// `params.requestId` as written, read again only when it is a number
/// a `Value` cannot hold exactly.
fn exact_request_id(line: &[u8]) -> Option<Id> {
    #[derive(Deserialize)]
    struct Line {
        params: Params,
    }
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "requestId")]
        request_id: Box<RawValue>,
    }
    let line: Line = serde_json::from_slice(line).ok()?;
    Some(Id(line.params.request_id))
}

impl<P: Serialize, R: Serialize> Message<P, R> {
    /// A request.
    pub(crate) fn request(id: Id, method: impl Into<String>, params: P) -> Message<P, R> {
        let method = method.into();
        Message::Request(Request { id, method, params })
    }

    /// A notification (`params: None`: without params).
    pub fn notification(method: impl Into<String>, params: Option<P>) -> Message<P, R> {
        Message::Notification(Notification {
            method: method.into(),
            params,
            request_id: None,
        })
    }

    /// A response: `result`, or `error`.
    pub fn response(id: Id, result: Result<R, RpcError>) -> Message<P, R> {
        Message::Response(Response { id, result })
    }

    /// The message as one `\n`-terminated line, appended to `out`.
    pub(crate) fn write_line(&self, out: &mut Vec<u8>) {
        // Serializing cannot fail: every map key is a string.
        let _ = serde_json::to_writer(&mut *out, self);
        out.push(b'\n');
    }
}

impl<P: Serialize, R: Serialize> Serialize for Message<P, R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut wire = Wire {
            jsonrpc: "2.0",
            id: None,
            method: None,
            params: None,
            result: None,
            error: None,
        };
        match self {
            Message::Request(r) => {
                (wire.id, wire.method, wire.params) =
                    (Some(&r.id), Some(&r.method), Some(&r.params))
            }
            Message::Notification(n) => {
                (wire.method, wire.params) = (Some(&n.method), n.params.as_ref())
            }
            Message::Response(r) => {
                wire.id = Some(&r.id);
                match &r.result {
                    Ok(result) => wire.result = Some(result),
                    Err(error) => wire.error = Some(error),
                }
            }
        }
        wire.serialize(s)
    }
}

/// A message as written, fields in the usual order.
#[derive(Serialize)]
struct Wire<'a, P, R> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Id>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

/// The fields of a message; `id`, `result` and `error` count when
/// present, even as `null`.
#[derive(Deserialize)]
struct Fields {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// A field that is there, `null` included (absent is `None` by default).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn code(line: &str) -> (Value, i64) {
        match Message::parse(line.as_bytes()) {
            Err(Invalid {
                reply_to: Some(id),
                code,
                ..
            }) => (serde_json::from_str(id.key()).unwrap(), code),
            other => panic!("{line}: expected an error to answer, got {other:?}"),
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
        // A notification is never answered, however malformed.
        let note = r#"{"jsonrpc":"2.0","method":"x","params":[1]}"#;
        assert!(matches!(
            Message::parse(note.as_bytes()),
            Err(Invalid { reply_to: None, .. })
        ));
    }

    #[test]
    fn a_broken_response_names_the_request_it_answers() {
        let answers = |line: &str| match Message::parse(line.as_bytes()) {
            Err(invalid) => invalid.answers.map(|id| id.key().to_string()),
            Ok(msg) => panic!("{line}: read as {msg:?}"),
        };
        assert_eq!(answers(r#"{"jsonrpc":"2.0","id":3}"#).as_deref(), Some("3"));
        let v1 = r#"{"jsonrpc":"1.0","id":"a","result":{}}"#;
        assert_eq!(answers(v1).as_deref(), Some("\"a\""));
        // A request or a notification answers nothing.
        assert_eq!(answers(r#"{"jsonrpc":"2.0","id":3,"method":7}"#), None);
        assert_eq!(answers(r#"{"id":3,"method":"ping"}"#), None);
        assert_eq!(answers(r#"{"jsonrpc":"2.0","result":{}}"#), None);
    }

    #[test]
    fn requests_notifications_and_responses() {
        let req = Message::parse(br#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#);
        assert!(matches!(req, Ok(Message::Request(ref r)) if r.method == "tools/list"));
        let note = Message::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(note, Ok(Message::Notification(ref n)) if n.params.is_none()));
        let resp = Message::parse(br#"{"jsonrpc":"2.0","id":1,"result":null}"#);
        assert!(
            matches!(resp, Ok(Message::Response(Response { ref id, result: Ok(Value::Null) })) if id.as_u64() == Some(1))
        );
        // A peer's error, whatever its shape.
        let line = br#"{"jsonrpc":"2.0","id":"1","error":{"message":"no"}}"#;
        let Ok(Message::Response(Response { id, result })) = Message::parse(line) else {
            panic!("not a response");
        };
        assert_eq!((id.as_u64(), result), (None, Err(RpcError::new(0, "no"))));
    }

    fn id_of(line: &str) -> Id {
        match Message::parse(line.as_bytes()) {
            Ok(Message::Request(r)) => r.id,
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
        assert_eq!(id_of(&line(r#""a\u0062""#)).key(), r#""ab""#);
        assert_ne!(id_of(&line("1")), id_of(&line("\"1\"")));
        let mut answer = Vec::new();
        Message::<(), _>::response(id_of(&line(big)), Ok(json!({}))).write_line(&mut answer);
        assert_eq!(
            String::from_utf8(answer).unwrap(),
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{big},\"result\":{{}}}}\n")
        );
        let cancel = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{big}}}}}"#
        );
        let Ok(Message::Notification(n)) = Message::parse(cancel.as_bytes()) else {
            panic!("not a notification");
        };
        assert_eq!(
            n.request_id.map(|id| id.key().to_string()),
            Some(big.into())
        );
    }

    #[test]
    fn written_messages() {
        let mut out = Vec::new();
        Message::<_, ()>::request(Id::from(7), "tools/list", json!({})).write_line(&mut out);
        Message::<Value, ()>::notification("notifications/initialized", None).write_line(&mut out);
        let error = RpcError::new(METHOD_NOT_FOUND, "no");
        Message::<(), ()>::response(Id::from(8), Err(error)).write_line(&mut out);
        let want = concat!(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"message":"no"}}"#,
            "\n",
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
