//! `extension.json`: reading and validating an extension's manifest
//! (docs/PROTOCOL.md#manifest, docs/PROTOCOL.md#bundles) and resolving its
//! executable (docs/PROTOCOL.md#processes-and-logs).

#[cfg(feature = "bundles")]
use crate::ext::bundle::{self, Provides};
#[cfg(any(feature = "confine", feature = "author"))]
pub use crate::ext::permissions::Permissions;
use crate::wire::protocol::{parse_json, wrong_field};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// File name of the manifest inside an extension directory.
pub const MANIFEST_FILE: &str = "extension.json";

/// Why a manifest with `"protocol": "mcp"` is invalid in a build
/// without the `mcp` feature.
pub(crate) fn no_mcp() -> String {
    crate::build::needs_feature("an MCP server (`\"protocol\": \"mcp\"`)", "mcp")
}

/// Why a manifest without `exec` (a bundle) is invalid in a build without
/// the `bundles` feature.
#[cfg(not(feature = "bundles"))]
fn no_bundles() -> String {
    let what = "no `exec`: a bundle (skills, a theme, no process)";
    crate::build::needs_feature(what, "bundles")
}

/// Largest manifest read: a real one is a few hundred bytes.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Longest `prefix`: it is prepended to every one of up to 10,000 names.
pub(crate) const MAX_PREFIX: usize = 64;

/// A validated manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Unique name, `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`.
    pub name: String,
    /// Executable: absolute, relative to the manifest (contains `/`), or a
    /// `$PATH` name. None: a bundle (docs/PROTOCOL.md#bundles), never started.
    pub exec: Option<String>,
    /// Extra argv.
    pub args: Vec<String>,
    /// Shown in listings.
    pub version: Option<String>,
    /// Informational only.
    pub language: Option<String>,
    /// Shown in listings.
    pub description: Option<String>,
    /// `false` keeps it installed but not started.
    pub enabled: bool,
    /// What the program speaks on stdio (docs/PROTOCOL.md#mcp-servers).
    pub protocol: Protocol,
    /// Prepended to an MCP server's tool and command names.
    pub prefix: Option<String>,
    /// Whether a crashed extension is started again (docs/PROTOCOL.md#supervision).
    pub(crate) restart: Restart,
    /// What an interception means while this guard cannot answer (docs/PROTOCOL.md#supervision).
    pub(crate) guard_failure: GuardFailure,
    /// `skills` entries as written: directories scanned for `SKILL.md`
    /// files, or `SKILL.md` files, relative to the manifest. Without the
    /// `bundles` feature they are only shown as ignored.
    pub skills: Vec<String>,
    /// The skill files and theme found in the extension directory; filled
    /// by [`Manifest::load`] (empty after [`Manifest::parse`], which has
    /// no directory).
    #[cfg(feature = "bundles")]
    pub provides: Provides,
    /// What it may touch when confined (docs/PROTOCOL.md#confinement); `None`: not declared.
    /// Read only in a build that confines or checks extensions; the
    /// minimal build ignores the field, as it cannot confine.
    #[cfg(any(feature = "confine", feature = "author"))]
    pub permissions: Option<Permissions>,
}

/// The protocol an extension speaks on stdin/stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Zot extension frames (the default).
    Zot,
    /// An MCP server; the host is its client (docs/PROTOCOL.md#mcp-servers).
    Mcp,
}

impl Protocol {
    /// `zot` or `mcp`, as in the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Zot => "zot",
            Protocol::Mcp => "mcp",
        }
    }
}

/// Manifest `restart`: what happens when the extension crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// `"on-failure"` (default): started again after a backoff.
    OnFailure,
    /// `"never"`: stays exited.
    Never,
}

/// Manifest `guard_failure`: the outcome of an interception this
/// extension subscribed to but cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuardFailure {
    /// `"allow"` (default, as upstream): an absent guard lets it through.
    Allow,
    /// `"block"`: an absent guard blocks (fails closed).
    Block,
}

/// What is wrong with a manifest's text, in one line (no file named).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidManifest(pub String);

impl fmt::Display for InvalidManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidManifest {}

/// Why a manifest could not be used; names the file.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestError {
    /// The manifest file.
    pub path: PathBuf,
    /// What is wrong with it, in one line.
    pub reason: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

impl std::error::Error for ManifestError {}

#[derive(Deserialize)]
struct RawManifest {
    name: Option<String>,
    exec: Option<String>,
    args: Option<Vec<String>>,
    version: Option<String>,
    language: Option<String>,
    description: Option<String>,
    enabled: Option<bool>,
    protocol: Option<String>,
    prefix: Option<String>,
    restart: Option<String>,
    guard_failure: Option<String>,
    skills: Option<Vec<String>>,
    #[cfg(any(feature = "confine", feature = "author"))]
    permissions: Option<serde_json::Value>,
}

/// Whether `name` is a valid extension name.
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let ok = |b: u8, first: bool| b.is_ascii_alphanumeric() || (!first && b"._-".contains(&b));
    !bytes.is_empty() && bytes.len() <= 64 && bytes.iter().enumerate().all(|(i, &b)| ok(b, i == 0))
}

impl Manifest {
    /// Reads and validates the manifest at `path`, and finds what its
    /// directory provides besides a process (docs/PROTOCOL.md#bundles).
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        Manifest::load_with_text(path).map(|(manifest, _)| manifest)
    }

    /// [`Manifest::load`], also giving the text it parsed (what workspace
    /// trust compares, docs/PROTOCOL.md#trust).
    pub(crate) fn load_with_text(path: &Path) -> Result<(Manifest, Vec<u8>), ManifestError> {
        let err = |reason: String| ManifestError {
            path: path.to_path_buf(),
            reason,
        };
        let text = read_file(path).map_err(err)?;
        let manifest = Manifest::parse_text(&text).map_err(err)?;
        #[cfg(feature = "bundles")]
        let manifest = Manifest {
            provides: bundle::of_manifest(path, &manifest.skills, manifest.is_bundle())
                .map_err(err)?,
            ..manifest
        };
        Ok((manifest, text))
    }

    /// No `exec`: skills and a theme only, never started.
    #[cfg(feature = "bundles")]
    pub fn is_bundle(&self) -> bool {
        self.exec.is_none()
    }

    /// Parses and validates manifest text (a leading UTF-8 byte order mark
    /// ignored); the error is the reason alone, [`Manifest::load`]'s names
    /// the file too.
    pub fn parse(text: &[u8]) -> Result<Manifest, InvalidManifest> {
        Manifest::parse_text(text).map_err(InvalidManifest)
    }

    fn parse_text(text: &[u8]) -> Result<Manifest, String> {
        let text = strip_bom(text);
        let raw: RawManifest = parse_json(text).map_err(|e| match wrong_field(text, &e) {
            Some(field) => format!("field `{field}`: {e}"),
            None => format!("invalid JSON: {e}"),
        })?;
        let name = raw.name.ok_or("missing required field `name`")?;
        if !valid_name(&name) {
            return Err(format!(
                "field `name` {name:?} is not a valid name (letters, digits, '.', '_', '-', \
                 starting with a letter or digit, at most 64)"
            ));
        }
        // Without `exec` it may still be a bundle (`load` decides), in a
        // build that has them.
        let exec = raw.exec;
        #[cfg(not(feature = "bundles"))]
        if exec.is_none() {
            return Err(no_bundles());
        }
        if exec.as_ref().is_some_and(|e| e.trim().is_empty()) {
            return Err("field `exec` is empty".into());
        }
        let args = raw.args.unwrap_or_default();
        // No program name or argument can hold a NUL: it could never start.
        let exec_text = exec.clone().unwrap_or_default();
        for (field, text) in [("exec", exec_text), ("args", args.concat())] {
            if text.contains('\0') {
                return Err(format!("field `{field}` contains a NUL byte"));
            }
        }
        let protocol = match raw.protocol.as_deref() {
            None | Some("zot") => Protocol::Zot,
            Some("mcp") if cfg!(feature = "mcp") => Protocol::Mcp,
            Some("mcp") => return Err(no_mcp()),
            Some(other) => return Err(not_one_of("protocol", ["zot", "mcp"], other)),
        };
        if let Some(prefix) = &raw.prefix {
            if prefix.len() > MAX_PREFIX {
                return Err(format!(
                    "field `prefix` is {} bytes, longer than the {MAX_PREFIX} allowed",
                    prefix.len()
                ));
            }
            if prefix.chars().any(char::is_whitespace) {
                return Err(format!(
                    "field `prefix` {prefix:?} contains whitespace (tool and command names cannot)"
                ));
            }
            if protocol != Protocol::Mcp {
                return Err("field `prefix` applies only with \"protocol\": \"mcp\"".into());
            }
        }
        let restart = match raw.restart.as_deref() {
            None | Some("on-failure") => Restart::OnFailure,
            Some("never") => Restart::Never,
            Some(other) => return Err(not_one_of("restart", ["on-failure", "never"], other)),
        };
        let guard_failure = match raw.guard_failure.as_deref() {
            None | Some("allow") => GuardFailure::Allow,
            Some("block") => GuardFailure::Block,
            Some(other) => return Err(not_one_of("guard_failure", ["allow", "block"], other)),
        };
        #[cfg(any(feature = "confine", feature = "author"))]
        let permissions = match &raw.permissions {
            None => None,
            Some(value) => Some(Permissions::parse(value)?),
        };
        Ok(Manifest {
            name,
            exec,
            args,
            version: raw.version,
            language: raw.language,
            description: raw.description,
            enabled: raw.enabled.unwrap_or(true),
            protocol,
            prefix: raw.prefix.filter(|p| !p.is_empty()),
            restart,
            guard_failure,
            skills: raw.skills.unwrap_or_default(),
            #[cfg(feature = "bundles")]
            provides: Provides::default(),
            #[cfg(any(feature = "confine", feature = "author"))]
            permissions,
        })
    }

    /// Resolves `exec` for an extension in `dir`: absolute as-is,
    /// containing `/` relative to `dir`, otherwise searched in `$PATH`.
    pub fn resolve_exec(&self, dir: &Path) -> Result<PathBuf, String> {
        let Some(name) = &self.exec else {
            return Err("no `exec`: a bundle is never started".into());
        };
        let exec = Path::new(name);
        if exec.is_absolute() {
            return Ok(exec.to_path_buf());
        }
        if name.contains('/') {
            return Ok(dir.join(exec));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|p| p.join(exec))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| format!("`{name}` not found in $PATH"))
    }
}

fn not_one_of(field: &str, [a, b]: [&str; 2], value: &str) -> String {
    format!("field `{field}` must be {a:?} or {b:?}, not {value:?}")
}

/// `text` without a leading UTF-8 byte order mark.
pub fn strip_bom(text: &[u8]) -> &[u8] {
    text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text)
}

/// Reads a manifest an attacker may have placed (a cloned project's
/// `.zot/extensions`): only a small regular file, opened non-blocking (a
/// FIFO cannot hang us) and checked again once open. The error is the
/// reason alone.
pub fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("cannot read: {e}");
    let file = open_regular(path, MAX_MANIFEST_BYTES, false)?;
    // Room for a usual manifest: one read, not a probe and several more.
    let mut text = Vec::with_capacity(4096);
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(too_large(MAX_MANIFEST_BYTES));
    }
    Ok(text)
}

/// Opens a file an attacker may have placed, for reading at most `max`
/// bytes: a regular file (never a FIFO, a device or a socket), checked
/// before opening (opening some devices has effects of its own) and
/// again once open, opened non-blocking so nothing can hang the open.
/// With `no_symlink` a symlink is refused rather than followed. The
/// error is the reason alone; the caller still bounds its reads by `max`
/// (the file may grow once open).
pub(crate) fn open_regular(
    path: &Path,
    max: u64,
    no_symlink: bool,
) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| format!("cannot read: {e}");
    let meta = if no_symlink {
        std::fs::symlink_metadata(path)
    } else {
        std::fs::metadata(path)
    };
    check_regular(&meta.map_err(cannot)?, max)?;
    let nofollow = if no_symlink { libc::O_NOFOLLOW } else { 0 };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | nofollow)
        .open(path)
        .map_err(cannot)?;
    check_regular(&file.metadata().map_err(cannot)?, max)?;
    Ok(file)
}

fn check_regular(meta: &std::fs::Metadata, max: u64) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    let what = match () {
        () if kind.is_file() && meta.len() > max => return Err(too_large(max)),
        () if kind.is_file() => return Ok(()),
        () if kind.is_dir() => "a directory",
        () if kind.is_symlink() => "a symlink",
        () if kind.is_fifo() => "a FIFO",
        () if kind.is_char_device() || kind.is_block_device() => "a device",
        () if kind.is_socket() => "a socket",
        () => "a special file",
    };
    Err(format!("not a regular file ({what}); refusing to read it"))
}

fn too_large(max: u64) -> String {
    format!("larger than {max} bytes; refusing to read it")
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["a", "A1", "my-ext_2.0", &"x".repeat(64)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "..", &"x".repeat(65), "é"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let fields = |extra: &str| format!(r#"{{"name":"a","exec":"x",{extra}}}"#);
        let cases = [
            ("{".to_string(), "invalid JSON"),
            (r#"{"exec":"x"}"#.into(), "`name`"),
            (r#"{"name":"a b","exec":"x"}"#.into(), "not a valid name"),
            (r#"{"name":"a","exec":" "}"#.into(), "`exec` is empty"),
            (r#"{"name":"a","skills":"docs"}"#.into(), "invalid type"),
            (fields(r#""enabled":"yes""#), "invalid type"),
            (fields(r#""protocol":"lsp""#), "field `protocol` must be"),
            (
                fields(r#""protocol":"mcp","prefix":"a b""#),
                if cfg!(feature = "mcp") {
                    "field `prefix`"
                } else {
                    "an MCP server"
                },
            ),
            (
                fields(r#""prefix":"gh_""#),
                r#"only with "protocol": "mcp""#,
            ),
            (
                fields(&format!(
                    r#""protocol":"mcp","prefix":"{}""#,
                    "p".repeat(65)
                )),
                if cfg!(feature = "mcp") {
                    "field `prefix` is 65 bytes, longer than the 64 allowed"
                } else {
                    "an MCP server"
                },
            ),
            (fields(r#""restart":"always""#), "`restart`"),
            (fields(r#""guard_failure":"deny""#), "`guard_failure`"),
            (fields(r#""restart":true"#), "invalid type"),
            (
                fields(r#""args":"--flag""#),
                "field `args`: invalid type: string",
            ),
        ];
        for (text, want) in cases {
            let err = Manifest::parse(text.as_bytes()).unwrap_err();
            assert!(err.0.contains(want), "{err} should mention {want}");
        }
    }

    #[test]
    fn an_mcp_server_needs_the_mcp_feature() {
        let text = r#"{"name":"a","exec":"x","protocol":"mcp"}"#;
        match Manifest::parse(text.as_bytes()) {
            Ok(m) => assert!(cfg!(feature = "mcp") && m.protocol == Protocol::Mcp),
            Err(err) => assert!(!cfg!(feature = "mcp") && err.0 == no_mcp(), "{err}"),
        }
    }
}
