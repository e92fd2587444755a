//! Reading a manifest's `permissions`, validated with the rest of it.
//! Only a build that confines (`confine`) or checks extensions
//! (`author`) reads them; the minimal build ignores the field, as it
//! cannot confine.

/// Manifest `permissions` (docs/PROTOCOL.md#confinement): what a confined extension may
/// touch. Paths are kept as written (absolute, or `$EXT`, `$CWD`,
/// `$HOME`, `$TMP` and an optional `/rest`); `confine` expands them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Permissions {
    /// Paths it may write (and read) beneath, besides `$EXT` and its `TMPDIR`.
    pub write: Vec<String>,
    /// Paths it may read beneath; `None` is `"all"`.
    pub read: Option<Vec<String>>,
    /// Whether it may connect to and bind TCP ports.
    pub network: bool,
}

/// The variables a permission path may start with.
pub(crate) const PATH_VARIABLES: [&str; 4] = ["$EXT", "$CWD", "$HOME", "$TMP"];

impl Permissions {
    /// What they allow a confined extension, in one line: `write its
    /// data directory, its TMPDIR, ...; read everything; use no TCP`.
    pub fn describe(&self) -> String {
        let mut write = vec!["its data directory", "its TMPDIR"];
        write.extend(self.write.iter().map(String::as_str));
        let read = match &self.read {
            None => "everything".to_string(),
            Some(list) => {
                let mut read = vec!["$EXT", "what it needs to start", "what it may write"];
                read.extend(list.iter().map(String::as_str).filter(|p| *p != "$EXT"));
                read.join(", ")
            }
        };
        let tcp = if self.network {
            "use TCP"
        } else {
            "use no TCP"
        };
        format!("write {}; read {read}; {tcp}", write.join(", "))
    }

    /// Validates the `permissions` object; errors name the field.
    pub(crate) fn parse(value: &serde_json::Value) -> Result<Permissions, String> {
        use serde_json::Value;
        let Value::Object(fields) = value else {
            return Err("field `permissions` must be an object".into());
        };
        let mut perms = Permissions::default();
        for (key, value) in fields {
            match (key.as_str(), value) {
                ("write", value) => perms.write = paths("permissions.write", value)?,
                ("read", Value::String(all)) if all == "all" => perms.read = None,
                ("read", value) => perms.read = Some(paths("permissions.read", value)?),
                ("network", Value::Bool(on)) => perms.network = *on,
                ("network", other) => {
                    return Err(format!(
                        "field `permissions.network` must be true or false, not {other}"
                    ))
                }
                (other, _) => {
                    return Err(format!(
                        "field `permissions.{other}` is unknown (write, read, network)"
                    ))
                }
            }
        }
        Ok(perms)
    }
}

/// A list of permission paths in `field` (`read` may also be `"all"`).
fn paths(field: &str, value: &serde_json::Value) -> Result<Vec<String>, String> {
    let all = if field.ends_with("read") {
        " or \"all\""
    } else {
        ""
    };
    let list = value
        .as_array()
        .ok_or_else(|| format!("field `{field}` must be a list of paths{all}, not {value}"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let path = item
            .as_str()
            .ok_or_else(|| format!("field `{field}[{i}]` must be a string, not {item}"))?;
        check_permission_path(path)
            .map_err(|why| format!("field `{field}[{i}]` {path:?} {why}"))?;
        out.push(path.to_string());
    }
    Ok(out)
}

/// Whether `path` is absolute or starts with one of [`PATH_VARIABLES`]
/// (alone or followed by `/`).
fn check_permission_path(path: &str) -> Result<(), String> {
    if path.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    if path.split('/').any(|part| part == "..") {
        return Err("has a `..` component: name the directory itself".into());
    }
    if path.starts_with('/') {
        return Ok(());
    }
    let known = PATH_VARIABLES.iter().any(|var| {
        path.strip_prefix(var)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    });
    match (known, path.starts_with('$')) {
        (true, _) => Ok(()),
        (false, true) => Err("uses an unknown variable (known: $EXT, $CWD, $HOME, $TMP)".into()),
        (false, false) => {
            Err("is relative: give an absolute path or start with $EXT, $CWD, $HOME or $TMP".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::manifest::Manifest;

    #[test]
    fn errors_name_the_field() {
        let fields = |extra: &str| format!(r#"{{"name":"a","exec":"x",{extra}}}"#);
        let cases = [
            (
                fields(r#""permissions":[]"#),
                "`permissions` must be an object",
            ),
            (
                fields(r#""permissions":{"write":["data"]}"#),
                "field `permissions.write[0]` \"data\" is relative",
            ),
            (
                fields(r#""permissions":{"read":["$EXT","$EXTRA/x"]}"#),
                "field `permissions.read[1]` \"$EXTRA/x\" uses an unknown variable",
            ),
            (
                fields(r#""permissions":{"write":["$EXT/../.."]}"#),
                "field `permissions.write[0]` \"$EXT/../..\" has a `..` component",
            ),
            (
                fields(r#""permissions":{"write":["$PWD"]}"#),
                "`permissions.write[0]` \"$PWD\" uses an unknown variable",
            ),
            (
                fields(r#""permissions":{"network":"yes"}"#),
                "field `permissions.network` must be true or false",
            ),
            (
                fields(r#""permissions":{"read":"some"}"#),
                "field `permissions.read` must be a list of paths or \"all\"",
            ),
            (
                fields(r#""permissions":{"write":[1]}"#),
                "field `permissions.write[0]` must be a string",
            ),
            (
                fields(r#""permissions":{"writes":[]}"#),
                "field `permissions.writes` is unknown",
            ),
        ];
        for (text, want) in cases {
            let err = Manifest::parse(text.as_bytes()).unwrap_err();
            assert!(err.0.contains(want), "{err} should mention {want}");
        }
    }

    #[test]
    fn permissions_parse() {
        let text = r#"{"name":"a","exec":"x","permissions":
            {"write":["$EXT/out","$CWD","/var/tmp/x"],"read":["$HOME/.config"],"network":true}}"#;
        let m = Manifest::parse(text.as_bytes()).unwrap();
        let want = Permissions {
            write: vec!["$EXT/out".into(), "$CWD".into(), "/var/tmp/x".into()],
            read: Some(vec!["$HOME/.config".into()]),
            network: true,
        };
        assert_eq!(m.permissions, Some(want));
        let all = r#"{"name":"a","exec":"x","permissions":{"read":"all"}}"#;
        let m = Manifest::parse(all.as_bytes()).unwrap();
        assert_eq!(m.permissions, Some(Permissions::default()));
        let none = Manifest::parse(br#"{"name":"a","exec":"x"}"#).unwrap();
        assert_eq!(none.permissions, None);
    }
}
