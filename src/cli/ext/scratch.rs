//! Scratch directories in `$ZOT_HOME/extensions`: where `install` and
//! `remove` do their work before one rename, and the cleanup of those
//! left behind by a `zot` that was killed (SIGKILL, power loss).
//!
//! A scratch name is `.<kind>-<pid>-<n>`, or `.old-<pid>-<n>-<name>` for
//! the previous copy of `<name>` moved aside by `install --force`. Dot
//! names are skipped by discovery, so a half-done operation is never
//! mistaken for an extension; the pid tells whether its owner still runs.

use super::common::remove_tree;
use std::fs;
use std::path::{Path, PathBuf};
use zot_host::internal::manifest::valid_name;
use zot_host::internal::sys::process_exists;

/// What a scratch directory was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A copy or clone being installed.
    Install,
    /// An extension being deleted.
    Remove,
    /// The previous copy, moved aside while its replacement goes in.
    Old,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Install => "install",
            Kind::Remove => "remove",
            Kind::Old => "old",
        }
    }
}

/// A scratch path in `root` that does not exist yet, owned by this
/// process. `name` (for [`Kind::Old`]) is where it belongs.
pub(super) fn path(root: &Path, kind: Kind, name: Option<&str>) -> PathBuf {
    let pid = std::process::id();
    let tail = name.map(|n| format!("-{n}")).unwrap_or_default();
    let kind = kind.as_str();
    (0u32..)
        .map(|n| root.join(format!(".{kind}-{pid}-{n}{tail}")))
        .find(|p| fs::symlink_metadata(p).is_err())
        .unwrap_or_else(|| root.join(format!(".{kind}-{pid}{tail}")))
}

/// A parsed scratch name.
#[derive(Debug, PartialEq)]
struct Parsed<'a> {
    kind: Kind,
    pid: i32,
    name: Option<&'a str>,
}

/// Parses `.<kind>-<pid>-<n>[-<name>]`; None for any other name.
fn parse(file_name: &str) -> Option<Parsed<'_>> {
    let rest = file_name.strip_prefix('.')?;
    let (kind, rest) = rest.split_once('-')?;
    let kind = [Kind::Install, Kind::Remove, Kind::Old]
        .into_iter()
        .find(|k| k.as_str() == kind)?;
    let (pid, rest) = rest.split_once('-')?;
    // Never 0 or negative: kill(2) would address process groups.
    let pid: i32 = pid.parse().ok().filter(|&p| p > 0)?;
    let (n, name) = match rest.split_once('-') {
        Some((n, name)) => (n, Some(name)),
        None => (rest, None),
    };
    n.parse::<u32>().ok()?;
    Some(Parsed { kind, pid, name })
}

/// Removes the scratch directories in `root` whose process is gone. An
/// old copy moved aside is put back when its place is still empty (the
/// install that replaced it died before finishing), so nothing the user
/// installed is lost. Each action is reported on stderr.
pub(super) fn clean_stale(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(scratch) = file_name.to_str().and_then(parse) else {
            continue;
        };
        if u32::try_from(scratch.pid) == Ok(me) || process_exists(scratch.pid) {
            continue;
        }
        let path = entry.path();
        let whose = format!("left by process {}, which no longer runs", scratch.pid);
        if let (Kind::Old, Some(name)) = (scratch.kind, scratch.name) {
            let home = root.join(name);
            if valid_name(name) && fs::symlink_metadata(&home).is_err() {
                match fs::rename(&path, &home) {
                    Ok(()) => eprintln!(
                        "zot: restored {} from {} ({whose})",
                        home.display(),
                        path.display()
                    ),
                    Err(e) => eprintln!(
                        "zot: cannot restore {} to {}: {e}",
                        path.display(),
                        home.display()
                    ),
                }
                continue;
            }
        }
        match remove_tree(&path) {
            Ok(()) => eprintln!("zot: removed stale {} ({whose})", path.display()),
            Err(e) => eprintln!("zot: cannot remove stale {} ({whose}): {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let p = |kind, pid, name| Some(Parsed { kind, pid, name });
        assert_eq!(parse(".install-42-0"), p(Kind::Install, 42, None));
        assert_eq!(parse(".remove-7-3"), p(Kind::Remove, 7, None));
        assert_eq!(parse(".old-9-1-my-ext"), p(Kind::Old, 9, Some("my-ext")));
        for other in [
            ".install-0-0",
            ".install--1-0",
            ".install-x-0",
            ".install-42",
            ".git",
            "install-42-0",
            ".cache-1-0",
            ".install-99999999999-0",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }
}
