//! Upstream's newer tool frames, judged the same way by the host and by
//! `zot ext check`: a `register_tool` with upstream's optional fields
//! (docs/PROTOCOL.md#structured-and-deferred-tools), and the fields of the
//! `tool_prompt` action (docs/PROTOCOL.md#commands-and-actions), which
//! runs a tool, then a prompt with its result. Only the `tool-extras`
//! feature keeps upstream's optional fields and the action; without it a
//! tool that is not to be offered directly is refused, and so is the
//! action.

use crate::wire::protocol::ToolExtras;
#[cfg(feature = "tool-extras")]
use crate::wire::registry;
use serde::Serialize;
use serde_json::Value;

/// A registered tool, the JSON Schema of its args, and its owning
/// extension; with the optional fields of upstream's `register_tool`
/// (docs/PROTOCOL.md#structured-and-deferred-tools), kept as registered.
#[allow(missing_docs)]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    pub schema: Option<Value>,
    pub extension: String,
    /// The JSON Schema of the tool's `structured_content`.
    #[cfg(feature = "tool-extras")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Groups the tool's discovery entries; upstream's default is the
    /// extension's name.
    #[cfg(feature = "tool-extras")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[cfg(feature = "tool-extras")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_description: Option<String>,
    #[cfg(feature = "tool-extras")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_instructions: Option<String>,
    #[cfg(feature = "tool-extras")]
    pub exposure: Exposure,
    /// False for a deferred tool until a `tool_result` activates it.
    #[cfg(feature = "tool-extras")]
    pub active: bool,
    /// Waits for the user: no reply deadline (docs/PROTOCOL.md#interactive-tools).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[cfg(feature = "panels")]
    pub interactive: bool,
    /// What a durable host may do with a call a crash interrupted
    /// (docs/PROTOCOL.md#replay-and-reconcile); only the `journal`
    /// feature's build reads it.
    #[cfg(feature = "journal")]
    pub replay: Replay,
}

#[cfg(feature = "journal")]
closed_set! {
    /// A tool's `register_tool.replay`: what a durable host may do with a
    /// call of it that a crash interrupted.
    #[derive(Default)]
    pub enum Replay {
        /// Never run again (the default).
        #[default]
        Never = "never",
        /// Safe to run again: the guards are asked again, then it runs.
        Safe = "safe",
        /// Run again with the same `operation_key`.
        Idempotent = "idempotent",
        /// Ask the extension first (`reconcile: true`).
        Reconcile = "reconcile",
    }
}

#[cfg(feature = "tool-extras")]
closed_set! {
    /// Where a tool is offered (upstream's `register_tool.exposure`). This
    /// host runs no scripts, so only `Deferred` changes what it does: the
    /// tool is inactive until activated.
    #[derive(Default)]
    pub enum Exposure {
        /// Offered to the model with its definition (the default).
        #[default]
        Direct = "direct",
        /// Callable from scripts, discoverable without a direct definition.
        Codemode = "codemode",
        /// Registered but not offered until a `tool_result` names it in
        /// `activate_tools`.
        Deferred = "deferred",
        /// Offered to the model, not callable from scripts.
        ModelOnly = "model-only",
    }
}

/// The registered tool, or why the registration is rejected: a `schema`
/// or `output_schema` that is not an object, an unknown `exposure`;
/// without the `tool-extras` feature, one asking not to be offered directly.
// The struct update fills the `tool-extras` fields; without them it has none to fill.
#[cfg_attr(not(feature = "tool-extras"), allow(clippy::needless_update))]
pub fn tool_info(
    name: &str,
    description: String,
    schema: Option<Value>,
    extra: ToolExtras,
    extension: &str,
) -> Result<ToolInfo, String> {
    if schema.as_ref().is_some_and(|s| !s.is_object()) {
        return Err("`schema` must be a JSON object".into());
    }
    let tool = ToolInfo {
        name: name.to_string(),
        description,
        schema,
        extension: extension.to_string(),
        #[cfg(feature = "panels")]
        interactive: extra.interactive == Some(true),
        #[cfg(feature = "journal")]
        replay: (extra.replay.as_deref())
            .and_then(Replay::parse)
            .unwrap_or_default(),
        ..Default::default()
    };
    with_extras(tool, extra)
}

/// `tool` with upstream's optional fields, checked.
#[cfg(feature = "tool-extras")]
fn with_extras(tool: ToolInfo, extra: ToolExtras) -> Result<ToolInfo, String> {
    if extra.output_schema.as_ref().is_some_and(|s| !s.is_object()) {
        return Err("`output_schema` must be a JSON object".into());
    }
    // An explicit exposure overrides the legacy `deferred` flag (upstream).
    let exposure = match extra.exposure.as_deref() {
        Some(e) => Exposure::parse(e).ok_or_else(|| {
            format!(
                "`exposure` {e:?} is not one of {}",
                Exposure::NAMES.join(", ")
            )
        })?,
        None if extra.deferred == Some(true) => Exposure::Deferred,
        None => Exposure::Direct,
    };
    Ok(ToolInfo {
        output_schema: extra.output_schema,
        namespace: extra.namespace,
        namespace_description: extra.namespace_description,
        namespace_instructions: extra.namespace_instructions,
        exposure,
        active: exposure != Exposure::Deferred,
        ..tool
    })
}

/// Without the `tool-extras` feature every tool is offered directly, so
/// one that asks otherwise (`exposure` other than `direct`, `deferred:
/// true`) is refused rather than made active behind its author's back.
/// `output_schema` and `namespace*` only add information: serde skips them.
#[cfg(not(feature = "tool-extras"))]
fn with_extras(tool: ToolInfo, extra: ToolExtras) -> Result<ToolInfo, String> {
    let field = match (extra.exposure.as_deref(), extra.deferred) {
        (Some(e), _) if e != "direct" => format!("`exposure` {e:?}"),
        (None, Some(true)) => "`deferred: true`".to_string(),
        _ => return Ok(tool),
    };
    Err(crate::build::needs_feature(&field, "tool-extras"))
}

/// What to log of a `register_tool`'s `replay` that is no known policy
/// (the tool is then `never`).
#[cfg(feature = "journal")]
pub fn replay_warning(extra: &ToolExtras) -> Option<String> {
    let given = extra.replay.as_deref()?;
    Replay::parse(given).is_none().then(|| {
        format!(
            "`replay` {given:?} is not one of {}: the tool is `never` replayed",
            Replay::NAMES.join(", ")
        )
    })
}

/// `tool_name` and `tool_args` of a `tool_prompt` response, or an error
/// naming the field that is missing or wrong. `prompt` may be absent:
/// upstream's Go SDK leaves an empty prompt out of the frame.
#[cfg(feature = "tool-extras")]
pub fn tool_prompt_fields(
    tool_name: Option<Value>,
    tool_args: Option<Value>,
) -> Result<(String, Value), String> {
    let name = match tool_name {
        Some(Value::String(n)) if registry::valid_name(&n) => n,
        None | Some(Value::Null) => return Err("tool_prompt: missing string `tool_name`".into()),
        Some(other) => {
            return Err(format!(
                "tool_prompt: `tool_name` must be a tool name (a string without whitespace), not {other}"
            ))
        }
    };
    match tool_args {
        Some(args @ Value::Object(_)) => Ok((name, args)),
        None | Some(Value::Null) => Err("tool_prompt: missing object `tool_args`".into()),
        Some(other) => Err(format!(
            "tool_prompt: `tool_args` must be a JSON object, not {}",
            kind(&other)
        )),
    }
}

/// What kind of JSON value it is, for an error.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "tool-extras")]
    use serde_json::json;

    #[cfg(feature = "tool-extras")]
    #[test]
    fn exposures_round_trip_and_exposure_wins_over_deferred() {
        for name in Exposure::NAMES {
            assert_eq!(Exposure::parse(name).map(Exposure::as_str), Some(*name));
        }
        let extra = |exposure: Option<&str>| ToolExtras {
            exposure: exposure.map(str::to_string),
            deferred: Some(true),
            ..Default::default()
        };
        let tool = |e| tool_info("t", String::new(), None, extra(e), "x");
        assert_eq!(
            tool(None).map(|t| (t.exposure, t.active)),
            Ok((Exposure::Deferred, false))
        );
        let direct = tool(Some("direct")).map(|t| (t.exposure, t.active));
        assert_eq!(direct, Ok((Exposure::Direct, true)));
        assert!(tool(Some("Direct")).is_err(), "exposure names are exact");
    }

    #[cfg(not(feature = "tool-extras"))]
    #[test]
    fn a_tool_not_offered_directly_is_refused_naming_the_field() {
        let tool = |exposure: Option<&str>, deferred| {
            let extra = ToolExtras {
                exposure: exposure.map(str::to_string),
                deferred,
                ..Default::default()
            };
            tool_info("t", String::new(), None, extra, "x")
        };
        let err = tool(None, Some(true)).unwrap_err();
        assert!(
            err.starts_with("`deferred: true` is not in this build")
                && err.contains("`tool-extras`")
        );
        let err = tool(Some("codemode"), None).unwrap_err();
        assert!(
            err.starts_with("`exposure` \"codemode\" is not in"),
            "{err}"
        );
        assert!(tool(Some("direct"), Some(true)).is_ok(), "exposure wins");
        assert!(tool(None, Some(false)).is_ok());
    }

    #[cfg(feature = "tool-extras")]
    #[test]
    fn each_bad_field_is_named() {
        let ok = tool_prompt_fields(Some(json!("skill")), Some(json!({"name": "x"})));
        assert_eq!(ok, Ok(("skill".into(), json!({"name": "x"}))));
        let err = |n, a| tool_prompt_fields(n, a).unwrap_err();
        assert!(err(None, Some(json!({}))).contains("`tool_name`"));
        assert!(err(Some(json!("a b")), Some(json!({}))).contains("`tool_name`"));
        assert!(err(Some(json!(7)), Some(json!({}))).contains("`tool_name`"));
        assert!(err(Some(json!("t")), None).contains("missing object `tool_args`"));
        assert!(err(Some(json!("t")), Some(json!([1]))).contains("not an array"));
        assert!(err(Some(json!("t")), Some(json!("{}"))).contains("not a string"));
    }
}
