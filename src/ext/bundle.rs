//! What an extension ships besides a process (docs/PROTOCOL.md#bundles): skill files
//! named by its manifest's `skills`, and a theme (`theme.json` or
//! `themes/theme.json`). A manifest without `exec` that ships either is a
//! bundle: valid, listed, never started. Only in a build with the
//! `bundles` feature; without it a manifest needs `exec` and its
//! `skills` are not looked at.
//!
//! Everything found must be inside the extension directory, symlinks
//! resolved: a cloned project's manifest must not point the embedder at
//! `~/.ssh` as "skills". Only file types are looked at, no file is read,
//! and a scan is bounded, so a hostile tree cannot hang discovery.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The file a skill is, in a `skills` directory (found at any depth).
pub(crate) const SKILL_FILE: &str = "SKILL.md";

/// Where a theme is looked for, in order, relative to the extension directory.
pub(crate) const THEME_FILES: [&str; 2] = ["theme.json", "themes/theme.json"];

/// Most `skills` entries and directory entries the scan of one
/// manifest's skills looks at; the rest is skipped, and said.
const MAX_LOOKED_AT: usize = 10_000;

/// Most skill files one manifest provides; the rest is skipped, and said.
const MAX_SKILLS: usize = 1_000;

/// Deepest directory level scanned below a `skills` entry.
const MAX_DEPTH: usize = 16;

/// What an extension directory provides besides a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provides {
    /// Absolute paths of its `SKILL.md` files, sorted, each once.
    pub skills: Vec<PathBuf>,
    /// Absolute path of its theme file.
    pub theme: Option<PathBuf>,
    /// The scan of its skills stopped at its bound: more may be there.
    pub skipped: bool,
}

impl Provides {
    /// `2 skills, theme`, or `` when it provides neither; a scan that
    /// stopped at its bound says so.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        match self.skills.len() {
            0 => {}
            1 => parts.push("1 skill".to_string()),
            n => parts.push(format!("{n} skills")),
        }
        if self.skipped {
            parts.push(format!(
                "the rest skipped (at most {MAX_SKILLS} skills and {MAX_LOOKED_AT} entries \
                 looked at)"
            ));
        }
        if self.theme.is_some() {
            parts.push("theme".into());
        }
        parts.join(", ")
    }
}

/// What the extension whose manifest is at `path`, with `skills`,
/// provides besides a process; a bundle (a manifest without `exec`) must
/// provide something. The error is the reason alone.
pub(crate) fn of_manifest(
    path: &Path,
    skills: &[String],
    bundle: bool,
) -> Result<Provides, String> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let provides = resolve(dir, skills)?;
    if bundle && provides == Provides::default() {
        return Err(format!(
            "provides nothing: no `exec` to run, no {SKILL_FILE} under `skills` and no {} or {}",
            THEME_FILES[0], THEME_FILES[1]
        ));
    }
    Ok(provides)
}

/// Resolves `skills` entries (as written in the manifest) and finds the
/// theme of the extension in `dir`. The error is the reason alone, naming
/// the entry. An entry that resolves to one already scanned counts once;
/// past [`MAX_LOOKED_AT`] entries looked at or [`MAX_SKILLS`] skills the
/// rest is skipped ([`Provides::skipped`]).
pub(crate) fn resolve(dir: &Path, skills: &[String]) -> Result<Provides, String> {
    // Most extensions ship neither: no walk of the directory's path.
    let no_theme = || {
        THEME_FILES
            .iter()
            .all(|n| fs::symlink_metadata(dir.join(n)).is_err())
    };
    if skills.is_empty() && no_theme() {
        return Ok(Provides::default());
    }
    let root = fs::canonicalize(dir)
        .map_err(|e| format!("cannot read the extension directory {}: {e}", dir.display()))?;
    let mut scan = Scan {
        root: &root,
        entry: "",
        seen: HashSet::new(),
        looked_at: 0,
        found: BTreeSet::new(),
        skipped: false,
    };
    for entry in skills {
        if !scan.look() {
            break;
        }
        scan.entry = entry;
        scan.skill_entry(entry)?;
    }
    Ok(Provides {
        skills: scan.found.into_iter().collect(),
        theme: theme(&root)?,
        skipped: scan.skipped,
    })
}

/// The scan of one manifest's `skills`, bounded in total.
struct Scan<'a> {
    root: &'a Path,
    /// The entry being scanned, as written.
    entry: &'a str,
    /// Entries and directories already scanned (canonical): a duplicate
    /// entry, an entry inside another and a symlink loop end here.
    seen: HashSet<PathBuf>,
    looked_at: usize,
    found: BTreeSet<PathBuf>,
    /// A bound was reached: the rest is skipped.
    skipped: bool,
}

impl Scan<'_> {
    /// Counts one more entry looked at: false (and skipped set) once
    /// [`MAX_LOOKED_AT`] were.
    fn look(&mut self) -> bool {
        if self.skipped || self.looked_at >= MAX_LOOKED_AT {
            self.skipped = true;
            return false;
        }
        self.looked_at += 1;
        true
    }

    /// Whether [`MAX_SKILLS`] were found: what is left is skipped.
    fn full(&mut self) -> bool {
        if self.found.len() >= MAX_SKILLS {
            self.skipped = true;
        }
        self.skipped
    }

    /// Adds the skill files of one `skills` entry.
    fn skill_entry(&mut self, entry: &str) -> Result<(), String> {
        let named = |why: String| format!("`skills` entry {entry:?} {why}");
        if entry.trim().is_empty() || entry.contains('\0') {
            return Err(named("is empty or holds a NUL byte".into()));
        }
        let path = Path::new(entry);
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(named(
                "contains `..`: skills must be inside the extension directory".into(),
            ));
        }
        let joined = self.root.join(path);
        let real = fs::canonicalize(&joined)
            .map_err(|e| named(format!("cannot be read ({}: {e})", joined.display())))?;
        if !real.starts_with(self.root) {
            return Err(named(format!(
                "is outside the extension directory {} (it is {})",
                self.root.display(),
                real.display()
            )));
        }
        let meta = fs::metadata(&real).map_err(|e| named(format!("cannot be read: {e}")))?;
        // The same path listed again (or inside one scanned) counts once.
        if self.seen.contains(&real) || self.found.contains(&real) {
            return Ok(());
        }
        if meta.is_dir() {
            return self.dir(&real, 0);
        }
        if meta.is_file() && real.file_name().is_some_and(|n| n == SKILL_FILE) {
            if !self.full() {
                self.found.insert(real);
            }
            return Ok(());
        }
        Err(named(format!(
            "is neither a directory nor a {SKILL_FILE} file"
        )))
    }

    fn dir(&mut self, dir: &Path, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH || !self.seen.insert(dir.to_path_buf()) {
            return Ok(());
        }
        let entry = self.entry;
        let read = fs::read_dir(dir).map_err(|e| {
            format!(
                "`skills` entry {entry:?}: cannot read {}: {e}",
                dir.display()
            )
        })?;
        // No more of a huge directory is listed than may be looked at.
        let room = MAX_LOOKED_AT.saturating_sub(self.looked_at) + 1;
        let mut children: Vec<PathBuf> = read
            .take(room)
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        children.sort();
        for child in children {
            if self.full() || !self.look() {
                return Ok(());
            }
            // Hidden entries (`.git`, editor files) hold no skills.
            if child
                .file_name()
                .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
            {
                continue;
            }
            // A dangling symlink provides nothing and points nowhere.
            let Ok(real) = fs::canonicalize(&child) else {
                continue;
            };
            if !real.starts_with(self.root) {
                return Err(format!(
                    "`skills` entry {entry:?}: {} is a symlink out of the extension \
                     directory (to {})",
                    child.display(),
                    real.display()
                ));
            }
            let Ok(meta) = fs::metadata(&real) else {
                continue;
            };
            if meta.is_dir() {
                self.dir(&real, depth + 1)?;
            } else if meta.is_file() && child.file_name().is_some_and(|n| n == SKILL_FILE) {
                self.found.insert(real);
            }
        }
        Ok(())
    }
}

/// The first theme file present, which must be a regular file inside
/// the extension directory.
fn theme(root: &Path) -> Result<Option<PathBuf>, String> {
    for name in THEME_FILES {
        let path = root.join(name);
        if fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let real = fs::canonicalize(&path).map_err(|e| format!("{name}: cannot be read: {e}"))?;
        if !real.starts_with(root) {
            return Err(format!(
                "{name} is a symlink out of the extension directory (to {})",
                real.display()
            ));
        }
        if !fs::metadata(&real).is_ok_and(|m| m.is_file()) {
            return Err(format!("{name} is not a regular file"));
        }
        return Ok(Some(real));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_loop_inside_is_scanned_once_and_hidden_dirs_not_at_all() {
        let root = std::env::temp_dir().join(format!("zot-bundle-loop-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("skills/a/.git")).unwrap();
        fs::write(root.join("skills/a/SKILL.md"), "a").unwrap();
        fs::write(root.join("skills/a/.git/SKILL.md"), "not a skill").unwrap();
        std::os::unix::fs::symlink("..", root.join("skills/a/up")).unwrap();
        let found = resolve(&root, &["skills".into(), "skills/a/SKILL.md".into()]).unwrap();
        let real = fs::canonicalize(&root).unwrap();
        assert_eq!(found.skills, [real.join("skills/a/SKILL.md")]);
        assert_eq!(found.theme, None);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn summary_counts_what_is_provided() {
        let mut p = Provides::default();
        assert_eq!(p.summary(), "");
        p.skills = vec!["/a/SKILL.md".into()];
        assert_eq!(p.summary(), "1 skill");
        p.skills.push("/b/SKILL.md".into());
        p.theme = Some("/t.json".into());
        assert_eq!(p.summary(), "2 skills, theme");
    }
}
