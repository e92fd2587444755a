//! `zot ext remove`, `enable` and `disable`.

use super::{check_name, failed, find, out, remove_tree, scratch_path, CliError, Ctx};
use serde_json::Value;
use std::fs;
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use zot_host::manifest::MANIFEST_FILE;

/// Runs `zot ext remove <name> [--yes]`: only global extensions; a
/// project copy belongs to the project and is left to the user.
pub(super) fn remove(ctx: &Ctx, name: &str, yes: bool) -> Result<i32, CliError> {
    check_name(name)?;
    let root = ctx.global();
    let Some(dir) = find(&root, name)? else {
        return Err(not_installed(ctx, name));
    };
    if !yes && !confirm(name, &dir)? {
        return Err(failed(format!("{name} was not removed")));
    }
    delete(&root, &dir)?;
    out(&format!("removed {name} ({})\n", dir.display()))?;
    Ok(0)
}

fn not_installed(ctx: &Ctx, name: &str) -> CliError {
    let root = ctx.global();
    match find(&ctx.project(), name) {
        Ok(Some(dir)) => failed(format!(
            "{name} is not installed in {}; the copy in {} belongs to this project, \
             delete that directory yourself if you mean to",
            root.display(),
            dir.display()
        )),
        _ => failed(format!(
            "no extension named {name} in {} (see zot ext list)",
            root.display()
        )),
    }
}

/// Asks on the terminal; without one, refuses rather than guess.
fn confirm(name: &str, dir: &Path) -> Result<bool, CliError> {
    if !io::stdin().is_terminal() {
        return Err(failed(format!(
            "refusing to remove {name} ({}) without confirmation: stdin is not a terminal; \
             pass --yes to remove it",
            dir.display()
        )));
    }
    eprint!("remove {name} ({})? [y/N] ", dir.display());
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

/// Removes an extension directory: a symlink alone (its target is not
/// ours), a directory by first renaming it aside so it vanishes from
/// discovery at once, even if deleting its contents then fails.
fn delete(root: &Path, dir: &Path) -> Result<(), CliError> {
    let is_link = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        return fs::remove_file(dir)
            .map_err(|e| failed(format!("cannot remove {}: {e}", dir.display())));
    }
    let aside = scratch_path(root, "remove");
    fs::rename(dir, &aside).map_err(|e| failed(format!("cannot remove {}: {e}", dir.display())))?;
    remove_tree(&aside).map_err(|e| {
        failed(format!(
            "{} is uninstalled but {} could not be deleted: {e}; delete it yourself",
            dir.display(),
            aside.display()
        ))
    })
}

/// Runs `zot ext enable|disable <name>`: the global copy, or the project
/// copy when there is no global one.
pub(super) fn set_enabled(ctx: &Ctx, name: &str, enabled: bool) -> Result<i32, CliError> {
    check_name(name)?;
    let word = if enabled { "enabled" } else { "disabled" };
    let (dir, global) = match find(&ctx.global(), name)? {
        Some(dir) => (dir, true),
        None => match find(&ctx.project(), name)? {
            Some(dir) => (dir, false),
            None => {
                return Err(failed(format!(
                    "no extension named {name} in {} or {} (see zot ext list)",
                    ctx.global().display(),
                    ctx.project().display()
                )));
            }
        },
    };
    let path = dir.join(MANIFEST_FILE);
    if rewrite_enabled(&path, enabled)? {
        out(&format!("{word} {name} ({})\n", path.display()))?;
    } else {
        out(&format!("{name} is already {word} ({})\n", path.display()))?;
    }
    if global {
        warn_if_shadowed(ctx, name);
    }
    Ok(0)
}

/// A project copy wins over the global one, so editing the global one
/// changes nothing in this project: say so.
fn warn_if_shadowed(ctx: &Ctx, name: &str) {
    if let Ok(Some(dir)) = find(&ctx.project(), name) {
        eprintln!(
            "zot: note: the project copy {} takes precedence in {}; its own manifest decides there",
            dir.display(),
            ctx.cwd.display()
        );
    }
}

/// Sets `enabled` in the manifest at `path`, keeping every other field
/// and the key order. Returns false when it already had that value.
fn rewrite_enabled(path: &Path, enabled: bool) -> Result<bool, CliError> {
    // Write beside the real file, so a symlinked manifest stays a symlink.
    let real = fs::canonicalize(path)
        .map_err(|e| failed(format!("cannot read {}: {e}", path.display())))?;
    let text =
        fs::read(&real).map_err(|e| failed(format!("cannot read {}: {e}", path.display())))?;
    let mut value: Value = serde_json::from_slice(&text).map_err(|e| {
        failed(format!(
            "{} is not valid JSON ({e}); fix it by hand",
            path.display()
        ))
    })?;
    let Value::Object(map) = &mut value else {
        return Err(failed(format!(
            "{} is not a JSON object; fix it by hand",
            path.display()
        )));
    };
    let current = map.get("enabled");
    let unchanged = current == Some(&Value::Bool(enabled)) || (current.is_none() && enabled);
    if unchanged {
        return Ok(false);
    }
    // An existing key keeps its place (preserve_order); a new one goes last.
    map.insert("enabled".into(), Value::Bool(enabled));
    let mut text = serde_json::to_string_pretty(&value)
        .map_err(|e| failed(format!("cannot encode {}: {e}", path.display())))?;
    text.push('\n');
    write_atomic(&real, text.as_bytes())
        .map_err(|e| failed(format!("cannot write {}: {e}", path.display())))?;
    Ok(true)
}

/// Replaces `path` by a temporary file in the same directory, so a
/// reader sees the old or the new manifest, never half of one.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp: PathBuf = dir.join(format!(".{file_name}.zot-{}.tmp", std::process::id()));
    let result = (|| {
        let permissions = fs::metadata(path)?.permissions();
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.set_permissions(permissions)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
