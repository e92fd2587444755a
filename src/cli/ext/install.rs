//! `zot ext install`: copy a directory or clone a git repository into
//! `$ZOT_HOME/extensions/<manifest name>`.
//!
//! Everything happens in a hidden scratch directory beside the
//! destination; only a valid extension is moved into place, with one
//! rename, so a failure (or Ctrl-C) leaves nothing behind. Git installs
//! keep their `.git` directory (a shallow clone); local copies take the
//! whole tree as it is.

use super::common::{failed, remove_tree, say, Ctx};
use super::scratch::{self, Kind};
use crate::cli::common::CliError;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use zot_host::internal::log::inert;
use zot_host::internal::manifest::{Manifest, MANIFEST_FILE};

/// Git transports allowed for installs; everything else (`ext::`,
/// `fd::`, `git://`, `http://`, ...) is refused.
const GIT_SCHEMES: &[&str] = &["https", "ssh", "file"];

/// Set by Ctrl-C / SIGTERM / SIGHUP so the copy stops and the scratch dir is removed.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Where the extension comes from.
enum Source {
    Local(PathBuf),
    Git(String),
    /// A bare repository on this machine (`~/repos/weather.git`), cloned
    /// like a URL; the path is absolute.
    BareRepo(PathBuf),
}

/// Runs `zot ext install <source> [--force]`.
pub(super) fn run(ctx: &Ctx, source: &OsStr, force: bool) -> Result<i32, CliError> {
    let shown = source.to_string_lossy().into_owned();
    let source = classify(source)?;
    let root = ctx.global();
    fs::create_dir_all(&root)
        .map_err(|e| failed(format!("cannot create {}: {e}", root.display())))?;
    // Without a handler a Ctrl-C would leave the scratch directory behind.
    let _ = crate::cli::common::on_signal(|| INTERRUPTED.store(true, Ordering::SeqCst));
    let scratch = Scratch::create(&root)?;
    match &source {
        Source::Local(dir) => copy_local(dir, &scratch.path)?,
        Source::Git(url) => clone(url.as_ref(), &scratch.path)?,
        Source::BareRepo(dir) => clone(dir.as_os_str(), &scratch.path)?,
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(failed("interrupted; nothing was installed".into()));
    }
    let manifest = Manifest::load(&scratch.path.join(MANIFEST_FILE)).map_err(|e| {
        failed(format!(
            "cannot install {shown}: {}: {}; nothing was installed",
            source_manifest(&source),
            e.reason
        ))
    })?;
    let dest = root.join(&manifest.name);
    let replaced = put_in_place(scratch, &dest, force, &manifest.name)?;
    let version = manifest
        .version
        .map(|v| format!(" {v}"))
        .unwrap_or_default();
    let verb = if replaced { "replaced" } else { "installed" };
    say(&format!(
        "{verb} {}{version} in {}",
        manifest.name,
        dest.display()
    ))?;
    Ok(0)
}

/// Which kind of source `arg` is. Only the allowed git transports ever
/// reach git; an existing directory is always a local install.
fn classify(arg: &OsStr) -> Result<Source, CliError> {
    let Some(text) = arg.to_str() else {
        return local(Path::new(arg));
    };
    if let Some(scheme) = url_scheme(text) {
        if GIT_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
            return Ok(Source::Git(text.to_string()));
        }
        return Err(refused(text, &format!("{scheme}://")));
    }
    if Path::new(text).is_dir() {
        return local(Path::new(text));
    }
    if let Some((transport, _)) = text.split_once("::") {
        return Err(refused(text, &format!("{transport}::")));
    }
    if (text.starts_with("git@") && text.contains(':')) || text.ends_with(".git") {
        return Ok(Source::Git(text.to_string()));
    }
    Err(failed(format!(
        "{text} is not a directory or a git URL; give an extension directory, or a git URL \
         (https://, ssh://, git@host:path, file://, or ending in .git)"
    )))
}

/// The scheme of `scheme://...`, when `text` has that form.
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    (first_ok && rest_ok).then_some(scheme)
}

fn refused(url: &str, transport: &str) -> CliError {
    failed(format!(
        "refusing to install {url}: the git transport `{transport}` is not allowed; \
         use https://, ssh://, git@host:path or file://"
    ))
}

/// An existing directory: an extension to copy, or a bare repository.
fn local(path: &Path) -> Result<Source, CliError> {
    let dir = fs::canonicalize(path)
        .map_err(|e| failed(format!("cannot install {}: {e}", path.display())))?;
    if !dir.is_dir() {
        return Err(failed(format!(
            "cannot install {}: not a directory (give the directory holding {MANIFEST_FILE})",
            path.display()
        )));
    }
    if is_bare_repo(&dir) {
        return Ok(Source::BareRepo(dir));
    }
    Ok(Source::Local(dir))
}

/// Whether `dir` is a bare git repository rather than an extension: no
/// manifest at its top, but git's own layout there.
fn is_bare_repo(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(MANIFEST_FILE)).is_err()
        && dir.join("HEAD").is_file()
        && dir.join("objects").is_dir()
        && dir.join("refs").is_dir()
}

/// The manifest path to name in errors: where the user put it.
fn source_manifest(source: &Source) -> String {
    match source {
        Source::Local(dir) => dir.join(MANIFEST_FILE).display().to_string(),
        Source::Git(url) => format!("{MANIFEST_FILE} at the top of {url}"),
        Source::BareRepo(dir) => format!("{MANIFEST_FILE} at the top of {}", dir.display()),
    }
}

/// The scratch directory; removed when dropped unless it was moved into place.
struct Scratch {
    path: PathBuf,
    placed: bool,
}

impl Scratch {
    fn create(root: &Path) -> Result<Scratch, CliError> {
        loop {
            let path = scratch::path(root, Kind::Install, None);
            match fs::create_dir(&path) {
                Ok(()) => {
                    return Ok(Scratch {
                        path,
                        placed: false,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(failed(format!("cannot create {}: {e}", path.display())));
                }
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.placed {
            if let Err(e) = remove_tree(&self.path) {
                eprintln!(
                    "zot: cannot delete {}: {e}; delete it yourself",
                    self.path.display()
                );
            }
        }
    }
}

fn copy_local(src: &Path, dst: &Path) -> Result<(), CliError> {
    let root = dst.parent().and_then(|r| fs::canonicalize(r).ok());
    // Copying a tree into itself would never end.
    if let Some(root) = root.filter(|r| r.starts_with(src)) {
        return Err(failed(format!(
            "cannot install {}: it contains {}, where extensions are installed",
            src.display(),
            root.display()
        )));
    }
    copy_tree(src, dst).map_err(|e| failed(format!("{e}; nothing was installed")))?;
    copy_mode(src, dst).map_err(|e| failed(format!("{e}; nothing was installed")))
}

/// Copies the contents of `src` into the existing directory `dst`:
/// files with their modes, symlinks as symlinks (never followed).
fn copy_tree(src: &Path, dst: &Path) -> Result<(), String> {
    let entries = fs::read_dir(src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    for entry in entries {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err("interrupted".into());
        }
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", src.display()))?;
        copy_entry(&entry.path(), &dst.join(entry.file_name()))?;
    }
    Ok(())
}

fn copy_entry(from: &Path, to: &Path) -> Result<(), String> {
    let err = |e: io::Error| format!("cannot copy {}: {e}", from.display());
    let kind = fs::symlink_metadata(from).map_err(err)?.file_type();
    if kind.is_symlink() {
        let target = fs::read_link(from).map_err(err)?;
        std::os::unix::fs::symlink(target, to).map_err(err)
    } else if kind.is_dir() {
        fs::create_dir(to).map_err(err)?;
        copy_tree(from, to)?;
        // Mode last: a read-only directory must still be filled first.
        copy_mode(from, to)
    } else if kind.is_file() {
        fs::copy(from, to).map(drop).map_err(err)
    } else {
        // Reading a FIFO would block forever; devices and sockets make no sense here.
        let skipped = format!(
            "skipping {}: not a file, directory or symlink",
            from.display()
        );
        eprintln!("zot: {}", inert(&skipped));
        Ok(())
    }
}

fn copy_mode(from: &Path, to: &Path) -> Result<(), String> {
    let mode = fs::metadata(from)
        .map_err(|e| format!("cannot read {}: {e}", from.display()))?
        .permissions()
        .mode();
    fs::set_permissions(to, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", to.display()))
}

/// `git clone --depth 1` into the (empty) scratch directory. The URL
/// was checked by [`classify`]; git is told the same allow-list so not
/// even a redirect or a submodule can use another transport. Nothing
/// runs in the checkout, which is not validated yet: no template
/// (`--template=` wins over `init.templateDir` and `$GIT_TEMPLATE_DIR`,
/// so no hook is copied in), no hooks path, no fsmonitor.
fn clone(source: &OsStr, dst: &Path) -> Result<(), CliError> {
    let url = source.to_string_lossy();
    let status = Command::new("git")
        .args([
            "-c",
            "protocol.ext.allow=never",
            "-c",
            "protocol.fd.allow=never",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ])
        // --no-local: a local path is fetched like a remote, so --depth
        // holds and nothing is hard-linked to the user's repository.
        .args([
            "clone",
            "--no-local",
            "--depth",
            "1",
            "--quiet",
            "--template=",
        ])
        .arg("--")
        .arg(source)
        .arg(dst)
        .env("GIT_ALLOW_PROTOCOL", GIT_SCHEMES.join(":"))
        .status()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => failed(format!(
                "git is not installed; it is needed to install {url}. Install git, or clone \
                 the repository yourself and run: zot ext install <directory>"
            )),
            _ => failed(format!("cannot run git: {e}")),
        })?;
    if !status.success() {
        return Err(failed(format!(
            "git clone {url} failed ({status}); see git's message above. Nothing was installed"
        )));
    }
    Ok(())
}

/// Moves the scratch directory to `dest`. With `force` an existing
/// `dest` is first renamed aside, so a failure can put it back. Returns
/// whether something was replaced.
fn put_in_place(
    mut scratch: Scratch,
    dest: &Path,
    force: bool,
    name: &str,
) -> Result<bool, CliError> {
    let exists = fs::symlink_metadata(dest).is_ok();
    if exists && !force {
        return Err(failed(format!(
            "{name} is already installed in {}; pass --force to replace it, or run \
             zot ext remove {name} first",
            dest.display()
        )));
    }
    let move_in = |scratch: &Scratch| {
        fs::rename(&scratch.path, dest).map_err(|e| {
            failed(format!(
                "cannot move the extension to {}: {e}",
                dest.display()
            ))
        })
    };
    if !exists {
        move_in(&scratch)?;
        scratch.placed = true;
        return Ok(false);
    }
    let root = dest.parent().unwrap_or(Path::new("."));
    let aside = scratch::path(root, Kind::Old, Some(name));
    fs::rename(dest, &aside)
        .map_err(|e| failed(format!("cannot move the old {} aside: {e}", dest.display())))?;
    if let Err(e) = move_in(&scratch) {
        if let Err(back) = fs::rename(&aside, dest) {
            eprintln!(
                "zot: cannot put the old copy back from {} to {}: {back}",
                aside.display(),
                dest.display()
            );
        }
        return Err(e);
    }
    scratch.placed = true;
    if let Err(e) = remove_tree(&aside) {
        eprintln!(
            "zot: cannot delete the old copy {}: {e}; delete it yourself",
            aside.display()
        );
    }
    Ok(true)
}
