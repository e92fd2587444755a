//! What the `zot ext` commands share: where they look ([`Ctx`]), finding
//! an installed extension, their output and errors, removing a tree.

use crate::cli::common::{absolute, CliError};
use serde_json::{Map, Value};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use zot_host::internal::discovery;
use zot_host::internal::log::inert;
use zot_host::internal::manifest::{self, MANIFEST_FILE};
use zot_host::Scope;

pub(super) fn usage(msg: &str) -> CliError {
    CliError::Usage(format!("{msg} (try zot ext --help)"))
}

/// Where the command looks: the state directory and the project directory.
pub(super) struct Ctx {
    /// `$ZOT_HOME`, absolute.
    pub(super) home: PathBuf,
    /// The project directory (`--cwd` or the current directory), absolute.
    pub(super) cwd: PathBuf,
}

impl Ctx {
    pub(super) fn new(cwd: Option<PathBuf>) -> Result<Ctx, CliError> {
        let home = absolute(crate::cli::common::zot_home()?)?;
        // Else a file there reads as "no extensions installed".
        if std::fs::metadata(&home).is_ok_and(|m| !m.is_dir()) {
            let home = home.display();
            return Err(failed(format!("$ZOT_HOME ({home}) is not a directory")));
        }
        let cwd = crate::cli::common::project_dir(cwd.as_deref())?;
        Ok(Ctx { home, cwd })
    }

    /// `$ZOT_HOME/extensions`.
    pub(super) fn global(&self) -> PathBuf {
        discovery::global_dir(&self.home)
    }

    /// `<cwd>/.zot/extensions`.
    pub(super) fn project(&self) -> PathBuf {
        discovery::project_dir(&self.cwd)
    }
}

pub(super) fn failed(msg: String) -> CliError {
    CliError::Failed(msg)
}

/// Rejects names that could reach outside the extensions directory.
pub(super) fn check_name(name: &str) -> Result<(), CliError> {
    let mut parts = Path::new(name).components();
    let one_part = matches!(
        (parts.next(), parts.next()),
        (Some(Component::Normal(_)), None)
    );
    if !one_part || name.contains(['/', '\\', '\0']) || name.contains("..") {
        return Err(failed(format!(
            "invalid extension name {name:?}: a name cannot be empty or contain '/', '\\' or '..' \
             (see zot ext list for the installed names)"
        )));
    }
    Ok(())
}

/// The manifest of `dir` as a JSON object, read leniently (empty when
/// missing, unreadable or unparsable), for showing and matching invalid
/// manifests. Read with the same limits as a real manifest.
pub(super) fn raw_manifest(dir: &Path) -> Map<String, Value> {
    let text = manifest::read_file(&dir.join(MANIFEST_FILE)).unwrap_or_default();
    match serde_json::from_slice(manifest::strip_bom(&text)) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// One installed extension a name given on the command line can mean.
pub(super) struct Installed {
    pub(super) scope: Scope,
    pub(super) dir: PathBuf,
}

/// The one installation, project or global (`only` narrows it to one
/// scope), whose directory name or manifest name is `name` (docs/PROTOCOL.md#zot-ext).
/// None: an error saying where it looked. Several: an error listing
/// them, so nothing is changed on a guess.
pub(super) fn lookup(ctx: &Ctx, name: &str, only: Option<Scope>) -> Result<Installed, CliError> {
    let roots = [
        (Scope::Project, ctx.project()),
        (Scope::Global, ctx.global()),
    ];
    let roots: Vec<(Scope, PathBuf)> = (roots.into_iter())
        .filter(|(scope, _)| only.is_none_or(|o| o == *scope))
        .collect();
    let mut matches: Vec<Installed> = Vec::new();
    for (scope, root) in &roots {
        for dir in discovery::scan(root) {
            let by_dir = dir.file_name().is_some_and(|n| n == name);
            let by_name = || raw_manifest(&dir).get("name").and_then(Value::as_str) == Some(name);
            if by_dir || by_name() {
                matches.push(Installed { scope: *scope, dir });
            }
        }
    }
    if matches.len() > 1 {
        let listed: Vec<String> = (matches.iter())
            .map(|m| format!("{} {}", m.scope.as_str(), m.dir.display()))
            .collect();
        return Err(failed(format!(
            "{name} matches {} installations: {}; nothing was changed. Pick one by a directory \
             name only it has, or with --project or --global",
            matches.len(),
            listed.join(", ")
        )));
    }
    matches.pop().ok_or_else(|| {
        let looked: Vec<String> = roots.iter().map(|(_, r)| r.display().to_string()).collect();
        failed(format!(
            "no extension named {name} in {} (see zot ext list)",
            looked.join(" or ")
        ))
    })
}

/// Writes human-readable `text` to stdout, each line [`inert`]: it may
/// quote an extension's files (names, paths, manifest fields).
pub(super) fn say(text: &str) -> Result<(), CliError> {
    let mut shown = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        shown.push_str(&inert(line.strip_suffix('\n').unwrap_or(line)));
        shown.push('\n');
    }
    out(&shown)
}

/// Writes to stdout; a closed stdout (`| head`) is not an error.
pub(super) fn out(text: &str) -> Result<(), CliError> {
    crate::cli::common::print_out(text).map(drop)
}

/// Asks `question` on the terminal (`[y/N]`); without a terminal,
/// refuses with `refusal` rather than guess.
pub(super) fn confirm(question: &str, refusal: String) -> Result<bool, CliError> {
    use std::io::{BufRead, IsTerminal};
    if !io::stdin().is_terminal() {
        return Err(failed(refusal));
    }
    eprint!("{}", inert(&format!("{question} [y/N] ")));
    let _ = io::stderr().flush();
    let mut answer = String::new();
    io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| failed(format!("cannot read the answer: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// Deletes a file, a symlink (not its target) or a whole tree, first
/// making directories writable so read-only ones do not stop it.
pub(super) fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    make_writable(path);
    std::fs::remove_dir_all(path)
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o700));
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        make_writable(&entry.path());
    }
}
