//! The two MCP protocol eras served on one stream, decided per request:
//! the legacy `initialize` handshake (2024-11-05 .. 2025-11-25) and the
//! stateless 2026-07-28 revision, where each request names its version
//! in `params._meta` and every result says what it is (`resultType`).

use serde_json::{json, Map, Value};
use zot_host::internal::jsonrpc::{RpcError, UNSUPPORTED_PROTOCOL_VERSION};

/// Versions reachable through `initialize`, oldest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Versions served through the per-request `_meta` envelope.
pub const MODERN_VERSIONS: [&str; 1] = ["2026-07-28"];
/// What `initialize` answers when the client's version is unknown.
pub const LATEST_LEGACY: &str = "2025-11-25";

/// `_meta` keys of the 2026-07-28 envelope.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Every version this server speaks, oldest first.
pub fn supported_versions() -> Vec<&'static str> {
    LEGACY_VERSIONS
        .iter()
        .chain(&MODERN_VERSIONS)
        .copied()
        .collect()
}

/// Under which rules one request is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    Legacy,
    /// 2026-07-28, with the log level the request opted in to, if any.
    Modern(Option<Level>),
}

/// The era of a request from its `params._meta`; -32022 for a version
/// this server does not speak, -32602 for a malformed envelope.
pub fn era_of(params: &Map<String, Value>) -> Result<Era, RpcError> {
    let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
        return Ok(Era::Legacy);
    };
    let Some(version) = meta.get(META_PROTOCOL_VERSION) else {
        return Ok(Era::Legacy);
    };
    let Some(version) = version.as_str() else {
        return Err(RpcError::params(format!(
            "_meta[\"{META_PROTOCOL_VERSION}\"] must be a string"
        )));
    };
    if !MODERN_VERSIONS.contains(&version) {
        return Err(RpcError {
            code: UNSUPPORTED_PROTOCOL_VERSION,
            message: format!("unsupported protocol version {version:?}"),
            data: Some(json!({"supported": supported_versions(), "requested": version})),
        });
    }
    let level = match meta.get(META_LOG_LEVEL) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str().and_then(Level::parse).ok_or_else(|| {
            RpcError::params(format!(
                "_meta[\"{META_LOG_LEVEL}\"] must be one of {}",
                Level::NAMES.join(", ")
            ))
        })?),
    };
    Ok(Era::Modern(level))
}

/// `serverInfo`: who answers.
pub fn server_info() -> Value {
    json!({"name": "zot", "version": env!("CARGO_PKG_VERSION")})
}

/// Server capabilities, the same in both eras.
pub fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "prompts": {"listChanged": true},
        "logging": {},
    })
}

/// Whether a result may be cached by the client (2026 cache hints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Cacheable,
}

/// Stamps a result with what the request's era requires: under
/// 2026-07-28 `resultType`, the server identity in `_meta` and, for
/// list results, the cache hints (the official clients reject list
/// results without them). Lists change whenever an extension comes or
/// goes, so they are never fresh (`ttlMs: 0`).
pub fn finish(era: Era, kind: Kind, mut result: Map<String, Value>) -> Value {
    if let Era::Modern(_) = era {
        result.insert("resultType".into(), "complete".into());
        let meta = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(META_SERVER_INFO.into(), server_info());
        }
        if kind == Kind::Cacheable {
            result.insert("ttlMs".into(), 0.into());
            result.insert("cacheScope".into(), "private".into());
        }
    }
    Value::Object(result)
}

/// Syslog severities of MCP logging, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl Level {
    pub const NAMES: [&'static str; 8] = [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ];
    const ALL: [Level; 8] = [
        Level::Debug,
        Level::Info,
        Level::Notice,
        Level::Warning,
        Level::Error,
        Level::Critical,
        Level::Alert,
        Level::Emergency,
    ];

    pub fn parse(name: &str) -> Option<Level> {
        let i = Level::NAMES.iter().position(|n| *n == name)?;
        Some(Level::ALL[i])
    }

    pub fn name(self) -> &'static str {
        Level::NAMES[self as usize]
    }

    /// A zot note level as an MCP level (docs/PROTOCOL.md#zot-mcp).
    pub fn of_note(level: &str) -> Level {
        match level {
            "success" => Level::Notice,
            "warn" => Level::Warning,
            "error" => Level::Error,
            _ => Level::Info,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(meta: Value) -> Map<String, Value> {
        json!({"_meta": meta})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn era_comes_from_the_meta_envelope() {
        assert_eq!(era_of(&Map::new()), Ok(Era::Legacy));
        assert_eq!(
            era_of(&params(json!({META_PROTOCOL_VERSION: "2026-07-28"}))),
            Ok(Era::Modern(None))
        );
        assert_eq!(
            era_of(&params(
                json!({META_PROTOCOL_VERSION: "2026-07-28", META_LOG_LEVEL: "warning"})
            )),
            Ok(Era::Modern(Some(Level::Warning)))
        );
        let err = era_of(&params(json!({META_PROTOCOL_VERSION: "2099-01-01"}))).unwrap_err();
        assert_eq!(err.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(err.data.as_ref().unwrap()["requested"], "2099-01-01");
        let bad = era_of(&params(
            json!({META_PROTOCOL_VERSION: "2026-07-28", META_LOG_LEVEL: "loud"}),
        ));
        assert_eq!(
            bad.unwrap_err().code,
            zot_host::internal::jsonrpc::INVALID_PARAMS
        );
    }

    #[test]
    fn modern_results_are_stamped_and_lists_carry_cache_hints() {
        let legacy = finish(Era::Legacy, Kind::Cacheable, Map::new());
        assert_eq!(legacy, json!({}));
        let modern = finish(Era::Modern(None), Kind::Cacheable, Map::new());
        assert_eq!(modern["resultType"], "complete");
        assert_eq!(modern["ttlMs"], 0);
        assert_eq!(modern["cacheScope"], "private");
        assert_eq!(modern["_meta"][META_SERVER_INFO]["name"], "zot");
        assert!(Level::Notice > Level::Info && Level::of_note("warn") == Level::Warning);
    }
}
