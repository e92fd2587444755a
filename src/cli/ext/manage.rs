//! `zot ext remove`, `enable` and `disable`.

use super::common::{check_name, failed, lookup, remove_tree, say, Ctx, Installed};
use super::scratch::{self, Kind};
use crate::cli::common::CliError;
use serde_json::Value;
use std::fs;
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use zot_host::internal::log::inert;
use zot_host::internal::manifest::{self, Manifest, MANIFEST_FILE};
use zot_host::Scope;

/// Runs `zot ext remove <name> [--yes]`: the one project or global
/// installation `name` means (see [`lookup`]).
pub(super) fn remove(
    ctx: &Ctx,
    name: &str,
    only: Option<Scope>,
    yes: bool,
) -> Result<i32, CliError> {
    check_name(name)?;
    let Installed { scope, dir } = lookup(ctx, name, only)?;
    if !yes && !confirm(name, &dir)? {
        return Err(failed(format!("{name} was not removed")));
    }
    let root = match scope {
        Scope::Project => ctx.project(),
        _ => ctx.global(),
    };
    delete(&root, &dir)?;
    say(&format!("removed {name} ({})", dir.display()))?;
    Ok(0)
}

/// Asks whether to remove `name` from `dir`.
fn confirm(name: &str, dir: &Path) -> Result<bool, CliError> {
    super::common::confirm(
        &format!("remove {name} ({})?", dir.display()),
        format!(
            "refusing to remove {name} ({}) without confirmation: stdin is not a terminal; \
             pass --yes to remove it",
            dir.display()
        ),
    )
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
    let aside = scratch::path(root, Kind::Remove, None);
    fs::rename(dir, &aside).map_err(|e| failed(format!("cannot remove {}: {e}", dir.display())))?;
    remove_tree(&aside).map_err(|e| {
        failed(format!(
            "{} is uninstalled but {} could not be deleted: {e}; delete it yourself",
            dir.display(),
            aside.display()
        ))
    })
}

/// Runs `zot ext enable|disable <name>` on the one project or global
/// installation `name` means (see [`lookup`]).
pub(super) fn set_enabled(
    ctx: &Ctx,
    name: &str,
    only: Option<Scope>,
    enabled: bool,
) -> Result<i32, CliError> {
    check_name(name)?;
    let word = if enabled { "enabled" } else { "disabled" };
    let Installed { scope, dir } = lookup(ctx, name, only)?;
    let path = dir.join(MANIFEST_FILE);
    if rewrite_enabled(&dir, &path, enabled)? {
        say(&format!("{word} {name} ({})", path.display()))?;
    } else {
        say(&format!("{name} is already {word} ({})", path.display()))?;
    }
    if scope == Scope::Global {
        warn_if_shadowed(ctx, name);
    }
    Ok(0)
}

/// A project copy wins over the global one, so editing the global one
/// changes nothing in this project: say so.
fn warn_if_shadowed(ctx: &Ctx, name: &str) {
    if let Ok(Installed { dir, .. }) = lookup(ctx, name, Some(Scope::Project)) {
        let note = format!(
            "note: the project copy {} takes precedence in {}; its own manifest decides there",
            dir.display(),
            ctx.cwd.display()
        );
        eprintln!("zot: {}", inert(&note));
    }
}

/// Sets `enabled` in the manifest at `path`, keeping every other field
/// and the key order. Returns false when it already had that value.
/// Only files inside the extension directory `dir` are ever written.
fn rewrite_enabled(dir: &Path, path: &Path, enabled: bool) -> Result<bool, CliError> {
    // Write beside the real file, so a symlinked manifest stays a symlink.
    let real = fs::canonicalize(path)
        .map_err(|e| failed(format!("cannot read {}: {e}", path.display())))?;
    // A manifest symlinked out of its directory would make us rewrite a
    // file we do not own (anything the user can write): refuse.
    let real_dir =
        fs::canonicalize(dir).map_err(|e| failed(format!("cannot read {}: {e}", dir.display())))?;
    if !real.starts_with(&real_dir) {
        return Err(failed(format!(
            "refusing to edit {}: it is a symlink to {}, outside the extension directory {}; \
             edit that file yourself, or replace the symlink by a copy",
            path.display(),
            real.display(),
            real_dir.display()
        )));
    }
    let file = manifest::read_file(&real)
        .map_err(|e| failed(format!("cannot read {}: {e}", path.display())))?;
    // A byte order mark is kept as it is, in front of the edited text.
    let text = manifest::strip_bom(&file);
    let bom = &file[..file.len() - text.len()];
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        failed(format!(
            "{} is not valid JSON ({e}); fix it by hand",
            path.display()
        ))
    })?;
    let Value::Object(map) = &value else {
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
    // Valid JSON is UTF-8, and an object, so the scan cannot fail; the
    // checks below catch a scanner bug before anything is written.
    let new = std::str::from_utf8(text)
        .ok()
        .and_then(|text| edit_enabled(text, enabled))
        .filter(|new| {
            let parsed = serde_json::from_str::<Value>(new).ok();
            parsed.as_ref().and_then(|v| v.get("enabled")) == Some(&Value::Bool(enabled))
                && (Manifest::parse(text).is_err() || Manifest::parse(new.as_bytes()).is_ok())
        })
        .ok_or_else(|| failed(format!("cannot edit {}; fix it by hand", path.display())))?;
    write_atomic(&real, &[bom, new.as_bytes()].concat())
        .map_err(|e| failed(format!("cannot write {}: {e}", path.display())))?;
    Ok(true)
}

// The manifest is edited as text rather than parsed and re-encoded:
// parsing and re-encoding with serde_json reformats the file and changes values
// (big integers become floats, `1.10` becomes `1.1`, `\u00e9` becomes
// `é`), and `zot ext enable` and `disable` promise to change only
// `enabled`.

/// One top-level member of a JSON object: byte ranges of its key
/// (quotes included) and of its value.
struct Member {
    key: Range<usize>,
    value: Range<usize>,
}

/// `text` (a valid JSON object) with every top-level `enabled` value
/// replaced by `enabled`, or, without one, `"enabled": <enabled>` added
/// after the last member in the style of the first one.
fn edit_enabled(text: &str, enabled: bool) -> Option<String> {
    let word = if enabled { "true" } else { "false" };
    let (open, members) = top_level_members(text.as_bytes())?;
    let is_enabled = |m: &Member| {
        serde_json::from_str::<String>(&text[m.key.clone()]).is_ok_and(|key| key == "enabled")
    };
    let hits: Vec<&Member> = members.iter().filter(|m| is_enabled(m)).collect();
    if !hits.is_empty() {
        let (mut out, mut at) = (String::new(), 0);
        for m in hits {
            out.push_str(&text[at..m.value.start]);
            out.push_str(word);
            at = m.value.end;
        }
        out.push_str(&text[at..]);
        return Some(out);
    }
    let (at, lead, colon) = match (members.first(), members.last()) {
        (Some(first), Some(last)) => (
            last.value.end,
            format!(",{}", &text[open + 1..first.key.start]),
            &text[first.key.end..first.value.start],
        ),
        _ => (open + 1, String::new(), ": "),
    };
    Some(format!(
        "{}{lead}\"enabled\"{colon}{word}{}",
        &text[..at],
        &text[at..]
    ))
}

/// The offset of the opening `{` of the object in `text` and its
/// members; None if `text` is not an object. Assumes valid JSON.
fn top_level_members(text: &[u8]) -> Option<(usize, Vec<Member>)> {
    let open = skip_space(text, 0);
    if text.get(open) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = open + 1;
    loop {
        i = skip_space(text, i);
        if *text.get(i)? == b'}' {
            return Some((open, members));
        }
        let key = i..string_end(text, i)?;
        let start = skip_space(text, skip_space(text, key.end) + 1); // past ':'
        let value = start..value_end(text, start)?;
        i = skip_space(text, value.end);
        members.push(Member { key, value });
        match *text.get(i)? {
            b',' => i += 1,
            _ => return Some((open, members)), // the closing '}'
        }
    }
}

fn skip_space(text: &[u8], mut i: usize) -> usize {
    while text.get(i).is_some_and(|b| b" \t\n\r".contains(b)) {
        i += 1;
    }
    i
}

/// The offset just past the string starting at the quote `text[start]`.
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        match *text.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The offset just past the value starting at `text[start]`: a string,
/// a balanced `{}`/`[]` (strings inside skipped whole), or a scalar.
fn value_end(text: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    loop {
        match *text.get(i)? {
            b'"' => {
                i = string_end(text, i)?;
                if depth == 0 {
                    return Some(i);
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Some(i),
            _ => {}
        }
        i += 1;
    }
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
