//! Where extensions live (docs/PROTOCOL.md#discovery) and which of them run, in
//! precedence order (docs/PROTOCOL.md#discovery).

use crate::ext::manifest::{Manifest, ManifestError, MANIFEST_FILE};
use crate::ext::trust::{Record, Untrusted};
use crate::log::inert;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

closed_set! {
    /// Where an extension was found.
    pub enum Scope {
        /// Given with `-e/--ext`.
        Explicit = "explicit",
        /// `./.zot/extensions/`.
        Project = "project",
        /// `$ZOT_HOME/extensions/`.
        Global = "global",
    }
}

/// What discovery decided about one extension directory.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// It will be started.
    Start,
    /// `enabled: false`.
    Disabled,
    /// A higher-precedence extension already has this name.
    Shadowed {
        /// Directory of the one that wins.
        by: PathBuf,
    },
    /// The manifest is unusable.
    Invalid(ManifestError),
    /// A project extension the user has not trusted as it is now
    /// (docs/PROTOCOL.md#trust); it still claims its name.
    Untrusted(Untrusted),
}

/// One discovered extension directory.
#[derive(Debug, Clone)]
pub struct Found {
    /// Where it was found.
    pub scope: Scope,
    /// The extension's directory (absolute when the inputs are).
    pub dir: PathBuf,
    /// The manifest, when it is valid.
    pub manifest: Option<Manifest>,
    /// Whether it runs.
    pub status: Status,
}

/// The state directory: `$ZOT_HOME`, else `$XDG_STATE_HOME/zot` on every
/// platform (docs/PROTOCOL.md#discovery), else the platform default (`~/.local/state/zot`
/// on Linux, `~/Library/Application Support/zot` on macOS).
pub fn zot_home() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("ZOT_HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(home));
    }
    let platform = if cfg!(target_os = "macos") {
        dirs::data_dir()
    } else {
        dirs::home_dir().map(|h| h.join(".local/state"))
    };
    default_home(std::env::var_os("XDG_STATE_HOME"), platform)
}

/// `$ZOT_HOME`'s default: `$XDG_STATE_HOME/zot` when that is set to an
/// absolute path (the XDG rule: a relative one is ignored), else
/// `platform/zot`.
fn default_home(xdg_state_home: Option<OsString>, platform: Option<PathBuf>) -> Option<PathBuf> {
    let xdg = xdg_state_home
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    xdg.or(platform).map(|d| d.join("zot"))
}

/// `$ZOT_HOME/extensions`.
pub fn global_dir(zot_home: &Path) -> PathBuf {
    zot_home.join("extensions")
}

/// `<cwd>/.zot/extensions`.
pub fn project_dir(cwd: &Path) -> PathBuf {
    cwd.join(".zot").join("extensions")
}

/// `$ZOT_HOME/logs`.
pub fn logs_dir(zot_home: &Path) -> PathBuf {
    zot_home.join("logs")
}

/// Extension directories directly below `root` (symlinks followed),
/// sorted by name; none when `root` is missing. Dot directories are
/// skipped: they are `zot ext install`/`remove` scratch space. A broken
/// symlink (dangling, or a loop) is kept, to be reported as invalid.
pub fn scan(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
        .filter_map(|e| {
            // The entry's own type comes with the listing; only a
            // symlink needs a look at what it points to.
            let kind = e.file_type().ok()?;
            let path = e.path();
            let keep = kind.is_dir() || kind.is_symlink() && (path.is_dir() || !path.exists());
            keep.then_some(path)
        })
        .collect();
    dirs.sort();
    dirs
}

/// Reads the manifest of one directory (or of a manifest file itself,
/// for `-e path/to/extension.json`), with its text when it is valid.
fn load(scope: Scope, path: &Path) -> (Found, Option<Vec<u8>>) {
    // Only an explicit path can name a manifest; a scan finds directories.
    let (dir, manifest_path) = if scope == Scope::Explicit && path.is_file() {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        (dir, path.to_path_buf())
    } else {
        (path.to_path_buf(), path.join(MANIFEST_FILE))
    };
    let (manifest, status, text) = match Manifest::load_with_text(&manifest_path) {
        Ok((m, text)) if m.enabled => (Some(m), Status::Start, Some(text)),
        Ok((m, text)) => (Some(m), Status::Disabled, Some(text)),
        Err(e) => (None, Status::Invalid(e), None),
    };
    let found = Found {
        scope,
        dir,
        manifest,
        status,
    };
    (found, text)
}

/// Everything found, highest precedence first: `explicit` paths in order,
/// then (with `include_dirs`) the project's directories, then the global
/// ones. The first valid manifest with a name claims it, even disabled
/// (so disabling the winning copy disables the extension) or untrusted
/// (so trusting it later changes nothing else). A project extension the
/// trust record of `zot_home` does not vouch for is [`Status::Untrusted`].
pub fn discover(
    explicit: &[PathBuf],
    cwd: &Path,
    zot_home: &Path,
    include_dirs: bool,
) -> Vec<Found> {
    discover_with(explicit, cwd, zot_home, include_dirs, false)
}

/// [`discover`]; with `trust_project` every project extension is trusted
/// for this run, whatever the record says (docs/PROTOCOL.md#trust).
pub fn discover_with(
    explicit: &[PathBuf],
    cwd: &Path,
    zot_home: &Path,
    include_dirs: bool,
    trust_project: bool,
) -> Vec<Found> {
    let mut loaded: Vec<(Found, Option<Vec<u8>>)> =
        explicit.iter().map(|p| load(Scope::Explicit, p)).collect();
    if include_dirs {
        for dir in scan(&project_dir(cwd)) {
            loaded.push(load(Scope::Project, &dir));
        }
        for dir in scan(&global_dir(zot_home)) {
            loaded.push(load(Scope::Global, &dir));
        }
    }
    let mut owners: HashMap<String, PathBuf> = HashMap::new();
    for (f, _) in &mut loaded {
        let Some(m) = &f.manifest else { continue };
        if let Some(by) = owners.get(&m.name) {
            f.status = Status::Shadowed { by: by.clone() };
        } else {
            owners.insert(m.name.clone(), f.dir.clone());
        }
    }
    // Read only when a project extension would start.
    let mut record: Option<Result<Record, String>> = None;
    for (f, text) in &mut loaded {
        let (Some(m), Some(text)) = (&f.manifest, text) else {
            continue;
        };
        if trust_project || f.scope != Scope::Project || f.status != Status::Start {
            continue;
        }
        let verdict = match record.get_or_insert_with(|| Record::load(zot_home)) {
            Ok(record) => record.check(cwd, &f.dir, text, m),
            Err(why) => Err(Untrusted::Record(why.clone())),
        };
        if let Err(why) = verdict {
            f.status = Status::Untrusted(why);
        }
    }
    loaded.into_iter().map(|(f, _)| f).collect()
}

/// The lines every surface prints on stderr about untrusted project
/// extensions (docs/PROTOCOL.md#trust): why the record is unusable, if it is, then
/// `zot: N project extension(s) in <dir>/.zot/extensions not trusted:
/// <names>; review them and run 'zot ext trust'`. Empty when all are
/// trusted. Names and paths are shown [`crate::log::inert`].
pub fn trust_notices(found: &[Found], cwd: &Path) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for f in found {
        let Status::Untrusted(why) = &f.status else {
            continue;
        };
        if let Untrusted::Record(why) = why {
            let line = format!("zot: {why}");
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
        names.extend(f.manifest.as_ref().map(|m| m.name.as_str()));
    }
    if !names.is_empty() {
        lines.push(format!(
            "zot: {} project extension(s) in {} not trusted: {}; review them and run 'zot ext trust'",
            names.len(),
            project_dir(cwd).display(),
            names.join(", ")
        ));
    }
    lines.iter().map(|l| inert(l).into_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_state_home_wins_over_every_platform_default() {
        let mac = Some(PathBuf::from("/Users/u/Library/Application Support"));
        let xdg = Some(OsString::from("/var/state"));
        assert_eq!(
            default_home(xdg, mac.clone()),
            Some(PathBuf::from("/var/state/zot"))
        );
        assert_eq!(
            default_home(Some("relative/state".into()), mac.clone()),
            Some(PathBuf::from("/Users/u/Library/Application Support/zot"))
        );
        assert_eq!(
            default_home(None, mac),
            Some(PathBuf::from("/Users/u/Library/Application Support/zot"))
        );
    }

    #[test]
    fn hidden_dirs_are_skipped_and_a_disabled_copy_keeps_its_name() {
        let tmp = std::env::temp_dir().join(format!("zot-disc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let (home, cwd) = (tmp.join("home"), tmp.join("proj"));
        let write = |dir: PathBuf, manifest: &str| {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(MANIFEST_FILE), manifest).unwrap();
        };
        let disabled = project_dir(&cwd).join("b");
        write(
            disabled.clone(),
            r#"{"name":"b","exec":"x","enabled":false}"#,
        );
        write(global_dir(&home).join("b"), r#"{"name":"b","exec":"x"}"#);
        write(
            global_dir(&home).join(".install-1-0"),
            r#"{"name":"d","exec":"x"}"#,
        );
        let found = discover(&[], &cwd, &home, true);
        let status: Vec<&Status> = found.iter().map(|f| &f.status).collect();
        assert_eq!(
            status,
            [&Status::Disabled, &Status::Shadowed { by: disabled }]
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
