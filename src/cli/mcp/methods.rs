//! Serving one MCP request or notification: the method table.

use super::era::{self, Era, Kind, Level};
use super::mapping;
use super::server::Server;
use serde_json::{json, Map, Value};
use zot_host::internal::jsonrpc::{Id, RpcError, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND};
use zot_host::{EventPayload, Request, ToolOutcome, ToolRequest};

/// Whether a request of `method` is served by the host, and so takes an
/// in-flight slot ([`Server::admit`]).
pub fn takes_slot(method: &str) -> bool {
    matches!(
        method,
        "tools/list" | "prompts/list" | "tools/call" | "prompts/get"
    )
}

/// Serves the request `id`. Host-bound requests answer later, from the
/// host loop, through [`Server::finish`]: then it returns true (the
/// request is in flight); false when it was answered at once.
pub fn request(server: &Server, id: Id, method: &str, params: Map<String, Value>) -> bool {
    if server.start_session() {
        server.submit(Request::Emit {
            event: "session_start".into(),
            payload: EventPayload::default(),
            reply: Box::new(|_| {}),
        });
    }
    // `initialize` belongs to the legacy era whatever it carries.
    let era = if method == "initialize" {
        Ok(Era::Legacy)
    } else {
        era::era_of(&params)
    };
    let era = match era {
        Ok(era) => era,
        Err(e) => {
            server.respond(&id, Err(e));
            return false;
        }
    };
    if let Era::Modern(_) = era {
        server.modern();
    }
    let now = |result: Map<String, Value>| Ok(era::finish(era, Kind::Plain, result));
    match method {
        "initialize" => {
            let result = initialize(&params);
            if result.is_ok() {
                server.initializing();
            }
            server.respond(&id, result);
        }
        "server/discover" => {
            let mut result = Map::new();
            result.insert("supportedVersions".into(), json!(era::supported_versions()));
            result.insert("capabilities".into(), era::capabilities());
            // Without the envelope a discover is still answered in its era.
            let era = match era {
                Era::Legacy => Era::Modern(None),
                modern => modern,
            };
            server.respond(&id, Ok(era::finish(era, Kind::Cacheable, result)));
        }
        "ping" => server.respond(&id, now(Map::new())),
        "logging/setLevel" => {
            let level = params.get("level").and_then(Value::as_str);
            match level.and_then(Level::parse) {
                Some(level) => {
                    server.set_level(level);
                    server.respond(&id, now(Map::new()));
                }
                None => server.respond(
                    &id,
                    Err(RpcError::params(format!(
                        "`level` must be one of {}",
                        Level::NAMES.join(", ")
                    ))),
                ),
            }
        }
        "subscriptions/listen" => {
            let filter = params.get("notifications").and_then(Value::as_object);
            let Some(filter) = filter else {
                server.respond(&id, Err(RpcError::params("missing object `notifications`")));
                return false;
            };
            let wants = |key: &str| filter.get(key).and_then(Value::as_bool) == Some(true);
            server.listen(&id, wants("toolsListChanged"), wants("promptsListChanged"));
        }
        "tools/list" | "prompts/list" => {
            if params.get("cursor").is_some_and(|c| !c.is_null()) {
                let error = RpcError::params("invalid cursor: lists have one page");
                server.respond(&id, Err(error));
                return false;
            }
            let prompts = method == "prompts/list";
            let (s, key) = (server.clone(), id.clone());
            let request = Request::List {
                reply: Box::new(move |snapshot| {
                    let result = snapshot
                        .map(|snap| {
                            let (k, v) = if prompts {
                                ("prompts", mapping::prompts(&snap))
                            } else {
                                ("tools", mapping::tools(&snap))
                            };
                            let mut result = Map::new();
                            result.insert(k.into(), v.into());
                            era::finish(era, Kind::Cacheable, result)
                        })
                        .map_err(|e| RpcError::new(INTERNAL_ERROR, e.to_string()));
                    s.finish(&key, result);
                }),
            };
            track(server, &id, era, request);
            return true;
        }
        "tools/call" => return tools_call(server, id, era, &params),
        "prompts/get" => return prompts_get(server, id, era, &params),
        _ => server.respond(
            &id,
            Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        ),
    }
    false
}

/// Serves a notification (never answered).
pub fn notification(server: &Server, method: &str, request_id: Option<Id>) {
    match method {
        "notifications/initialized" => server.initialized(),
        "notifications/cancelled" => {
            if let Some(id) = request_id {
                server.cancel(&id);
            }
        }
        _ => {}
    }
}

/// Sends a host request for `id`, which is in flight until answered.
fn track(server: &Server, id: &Id, era: Era, request: Request) {
    let log = match era {
        Era::Modern(level) => level,
        Era::Legacy => None,
    };
    server.begin(id, log, request);
}

fn initialize(params: &Map<String, Value>) -> Result<Value, RpcError> {
    let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
        return Err(RpcError::params("missing string `protocolVersion`"));
    };
    let version = if era::LEGACY_VERSIONS.contains(&asked) {
        asked
    } else {
        era::LATEST_LEGACY
    };
    Ok(json!({
        "protocolVersion": version,
        "capabilities": era::capabilities(),
        "serverInfo": era::server_info(),
        "instructions": "Tools and prompts (slash commands) of the loaded zot extensions.",
    }))
}

fn string_param(params: &Map<String, Value>, key: &str) -> Result<String, RpcError> {
    match params.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(RpcError::params(format!("missing string `{key}`"))),
    }
}

fn object_param(params: &Map<String, Value>, key: &str) -> Result<Map<String, Value>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(RpcError::params(format!("`{key}` must be an object"))),
    }
}

fn tools_call(server: &Server, id: Id, era: Era, params: &Map<String, Value>) -> bool {
    let call = string_param(params, "name").and_then(|name| {
        let args = object_param(params, "arguments")?;
        Ok(ToolRequest::new(name, Value::Object(args)))
    });
    let call = match call {
        Ok(call) => call,
        Err(e) => {
            server.respond(&id, Err(e));
            return false;
        }
    };
    // Built-in tools are the embedder's, never served here: refused
    // before the pipeline, so no subscriber sees a call that never runs.
    if zot_host::BUILTIN_TOOLS.contains(&call.name.as_str()) {
        let error = RpcError::params(format!("unknown tool {}", call.name));
        server.respond(&id, Err(error));
        return false;
    }
    let (s, key) = (server.clone(), id.clone());
    let name = call.name.clone();
    let tool = Request::Tool {
        call,
        pipeline: true,
        reply: Box::new(move |outcome| {
            let result = match outcome {
                // Built-in tools are the embedder's: not served here.
                Ok(ToolOutcome::Builtin(_)) => Err(RpcError::new(
                    INVALID_PARAMS,
                    format!("unknown tool {name}"),
                )),
                Ok(ToolOutcome::Ran(result)) => Ok(mapping::tool_result(&name, result)),
                // A name the host does not run is the client's mistake.
                Err(e) if e.is_unknown_name() => Err(RpcError::new(INVALID_PARAMS, e.to_string())),
                Err(e) => Ok(mapping::tool_failure(&e.to_string())),
            };
            s.finish(&key, result.map(|r| era::finish(era, Kind::Plain, r)));
        }),
    };
    // Cancellable: `notifications/cancelled` reaches the extension.
    let request = Request::Cancellable {
        ticket: server.ticket(),
        request: Box::new(tool),
    };
    track(server, &id, era, request);
    true
}

fn prompts_get(server: &Server, id: Id, era: Era, params: &Map<String, Value>) -> bool {
    let request = string_param(params, "name").and_then(|name| {
        let arguments = object_param(params, "arguments")?;
        let args = match arguments.get("args") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(RpcError::params("argument `args` must be a string")),
        };
        Ok((name, args))
    });
    let (name, args) = match request {
        Ok(r) => r,
        Err(e) => {
            server.respond(&id, Err(e));
            return false;
        }
    };
    let (s, key, command) = (server.clone(), id.clone(), name.clone());
    let request = Request::Command {
        name,
        args,
        reply: Box::new(move |outcome| {
            let result = match outcome {
                Ok(outcome) => mapping::prompt_result(&command, outcome),
                Err(e) if e.is_unknown_name() => Err(RpcError::new(INVALID_PARAMS, e.to_string())),
                Err(e) => Err(RpcError::new(INTERNAL_ERROR, e.to_string())),
            };
            s.finish(&key, result.map(|r| era::finish(era, Kind::Plain, r)));
        }),
    };
    track(server, &id, era, request);
    true
}
