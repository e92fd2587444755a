//! Where extensions live (SPEC section 4) and which of them run, in
//! precedence order (SPEC 3.1).

use crate::manifest::{Manifest, ManifestError, MANIFEST_FILE};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Where an extension was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Given with `-e/--ext`.
    Explicit,
    /// `./.zot/extensions/`.
    Project,
    /// `$ZOT_HOME/extensions/`.
    Global,
}

impl Scope {
    /// `explicit`, `project` or `global`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Explicit => "explicit",
            Scope::Project => "project",
            Scope::Global => "global",
        }
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

/// The state directory: `$ZOT_HOME`, else the platform default
/// (`$XDG_STATE_HOME/zot` or `~/.local/state/zot` on Linux,
/// `~/Library/Application Support/zot` on macOS).
pub fn zot_home() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("ZOT_HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(home));
    }
    if cfg!(target_os = "macos") {
        return dirs::data_dir().map(|d| d.join("zot"));
    }
    dirs::state_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
        .map(|d| d.join("zot"))
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

/// Extension directories directly below `root`, sorted by name.
/// Symlinked directories are followed. A missing root is empty. Hidden
/// (dot) directories are skipped: `zot ext install`/`remove` work in
/// `.install-*`/`.old-*`/`.remove-*` scratch directories there, which
/// must never be started as extensions.
pub fn scan(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Reads the manifest of one directory (or of a manifest file itself,
/// for `-e path/to/extension.json`).
pub fn load(scope: Scope, path: &Path) -> Found {
    let (dir, manifest_path) = if path.is_file() {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        (dir, path.to_path_buf())
    } else {
        (path.to_path_buf(), path.join(MANIFEST_FILE))
    };
    match Manifest::load(&manifest_path) {
        Ok(m) => {
            let status = if m.enabled {
                Status::Start
            } else {
                Status::Disabled
            };
            Found {
                scope,
                dir,
                manifest: Some(m),
                status,
            }
        }
        Err(e) => Found {
            scope,
            dir,
            manifest: None,
            status: Status::Invalid(e),
        },
    }
}

/// Everything found, highest precedence first: `explicit` paths in the
/// order given, then the project's directories, then the global ones.
/// With `include_dirs` false only the explicit paths are read
/// (`--no-ext`). The first valid manifest with a name claims it (even
/// when disabled, so disabling the winning copy disables the
/// extension); later ones with that name are [`Status::Shadowed`].
pub fn discover(
    explicit: &[PathBuf],
    cwd: &Path,
    zot_home: &Path,
    include_dirs: bool,
) -> Vec<Found> {
    let mut found: Vec<Found> = explicit.iter().map(|p| load(Scope::Explicit, p)).collect();
    if include_dirs {
        for dir in scan(&project_dir(cwd)) {
            found.push(load(Scope::Project, &dir));
        }
        for dir in scan(&global_dir(zot_home)) {
            found.push(load(Scope::Global, &dir));
        }
    }
    apply_precedence(&mut found);
    found
}

/// Marks every later copy of a name as shadowed by the first one.
pub fn apply_precedence(found: &mut [Found]) {
    let mut owners: Vec<(String, PathBuf)> = Vec::new();
    let mut taken = HashSet::new();
    for f in found.iter_mut() {
        let Some(m) = &f.manifest else { continue };
        if taken.insert(m.name.clone()) {
            owners.push((m.name.clone(), f.dir.clone()));
        } else if let Some((_, by)) = owners.iter().find(|(n, _)| *n == m.name) {
            f.status = Status::Shadowed { by: by.clone() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, manifest: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(MANIFEST_FILE), manifest).unwrap();
    }

    #[test]
    fn precedence_explicit_project_global() {
        let tmp = std::env::temp_dir().join(format!("zot-disc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let home = tmp.join("home");
        let cwd = tmp.join("proj");
        write(&tmp.join("dev/a"), r#"{"name":"a","exec":"x"}"#);
        write(&project_dir(&cwd).join("a"), r#"{"name":"a","exec":"x"}"#);
        write(
            &project_dir(&cwd).join("b"),
            r#"{"name":"b","exec":"x","enabled":false}"#,
        );
        write(&global_dir(&home).join("b"), r#"{"name":"b","exec":"x"}"#);
        write(&global_dir(&home).join("c"), r#"{"name":"c"}"#);
        write(&global_dir(&home).join("d"), r#"{"name":"d","exec":"x"}"#);
        write(
            &global_dir(&home).join(".install-1-0"),
            r#"{"name":"d","exec":"x"}"#,
        );
        let found = discover(&[tmp.join("dev/a")], &cwd, &home, true);
        let summary: Vec<(Scope, &str)> = found
            .iter()
            .map(|f| {
                let s = match &f.status {
                    Status::Start => "start",
                    Status::Disabled => "disabled",
                    Status::Shadowed { .. } => "shadowed",
                    Status::Invalid(_) => "invalid",
                };
                (f.scope, s)
            })
            .collect();
        use Scope::*;
        assert_eq!(
            summary,
            [
                (Explicit, "start"),
                (Project, "shadowed"),
                (Project, "disabled"),
                (Global, "shadowed"),
                (Global, "invalid"),
                (Global, "start")
            ]
        );
        let only = discover(&[tmp.join("dev/a")], &cwd, &home, false);
        assert_eq!(only.len(), 1);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
