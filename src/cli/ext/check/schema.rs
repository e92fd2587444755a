//! Whether a tool's `schema` is a JSON Schema for its arguments.

use serde_json::Value;

/// Why `schema` is not a usable JSON Schema for tool arguments.
pub(super) fn schema_problem(schema: &Value) -> Option<String> {
    let Some(obj) = schema.as_object() else {
        return Some(format!(
            "{schema} is not a JSON object: the host rejects the tool"
        ));
    };
    match obj.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        None => {
            return Some(
                "no \"type\": tool arguments are an object, say \"type\": \"object\"".into(),
            )
        }
        Some(other) => return Some(format!("\"type\" is {other}, expected \"object\"")),
    }
    let properties = match obj.get("properties") {
        None => None,
        Some(Value::Object(p)) => Some(p),
        Some(other) => {
            return Some(format!(
                "\"properties\" is {other}: it must be an object of name -> schema"
            ))
        }
    };
    for (name, prop) in properties.into_iter().flatten() {
        if !prop.is_object() && !prop.is_boolean() {
            return Some(format!("property {name:?} is {prop}, not a schema object"));
        }
    }
    match obj.get("required") {
        None => {}
        Some(Value::Array(names)) => {
            for name in names {
                let Some(name) = name.as_str() else {
                    return Some(format!("\"required\" lists {name}, not a property name"));
                };
                if !properties.is_some_and(|p| p.contains_key(name)) {
                    return Some(format!("required {name:?} is not in \"properties\""));
                }
            }
        }
        Some(other) => {
            return Some(format!(
                "\"required\" is {other}: it must be an array of property names"
            ))
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_rules() {
        let ok = [
            json!({"type": "object"}),
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
            json!({"type": "object", "properties": {"a": true}}),
        ];
        for s in ok {
            assert_eq!(schema_problem(&s), None, "{s}");
        }
        let bad = [
            (json!("x"), "not a JSON object"),
            (json!({"properties": {}}), "no \"type\""),
            (json!({"type": "string"}), "expected \"object\""),
            (
                json!({"type": "object", "properties": []}),
                "\"properties\" is []",
            ),
            (
                json!({"type": "object", "properties": {"a": 1}}),
                "property \"a\"",
            ),
            (
                json!({"type": "object", "required": ["a"]}),
                "required \"a\"",
            ),
            (
                json!({"type": "object", "properties": {}, "required": "a"}),
                "array",
            ),
        ];
        for (s, want) in bad {
            let got = schema_problem(&s).unwrap_or_default();
            assert!(got.contains(want), "{s}: {got:?} should mention {want}");
        }
    }
}
