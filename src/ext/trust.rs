//! Workspace trust (docs/PROTOCOL.md#trust): a project's own extensions
//! (`.zot/extensions/*`) start only once the user has trusted them, and
//! only while what was trusted is unchanged.
//!
//! Trust is recorded per project directory and per extension directory
//! in `$ZOT_HOME/trust.json`. It binds the directory the extension
//! resolves to and the resolved path and contents of its manifest, of
//! the program its `exec` resolves to, of every file its `args` name and
//! (with the `bundles` feature) of the skills and theme it hands over,
//! wherever they lie in the project or the extension directory; one
//! elsewhere (and not in a `$PATH` directory) cannot be trusted. It is
//! checked at discovery and again at every start ([`check_start`]), so a
//! program changed under a running host is not restarted. Contents
//! are compared byte for byte with copies taken when it was trusted
//! (`$ZOT_HOME/trust/<id>/<n>`, `n` the file's place in the entry), so no
//! hash function is involved. Every file is read with the manifest's
//! guarded reader: regular files of bounded size only.

use crate::ext::manifest::{self, Manifest, MANIFEST_FILE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The record, in `$ZOT_HOME`.
pub(crate) const RECORD_FILE: &str = "trust.json";
/// The copies of trusted files, in `$ZOT_HOME`.
const COPIES_DIR: &str = "trust";
/// Held (flock) while the record is read, changed and written.
const LOCK_FILE: &str = "trust.lock";
/// Largest file trust binds: an extension's compiled program included.
pub(crate) const MAX_BOUND_BYTES: u64 = 64 << 20;
/// Largest record read: an entry is a few hundred bytes.
const MAX_RECORD_BYTES: u64 = 16 << 20;
const RECORD_VERSION: u64 = 1;

/// Why a project extension is not started.
#[derive(Debug, Clone, PartialEq)]
pub enum Untrusted {
    /// Never trusted in this project, or its trust was removed.
    New,
    /// Trusted once; what changed since.
    Changed(String),
    /// The record cannot be used, so nothing is trusted: why (the same
    /// for every extension).
    Record(String),
    /// What it would run cannot be bound: a program or file outside the
    /// project (and not in a `$PATH` directory). Trusting it is refused too.
    Unbindable(String),
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Untrusted::New => write!(f, "not trusted"),
            Untrusted::Changed(what) => write!(f, "trust lapsed: {what}"),
            Untrusted::Record(_) => write!(f, "not trusted: the trust record is unusable"),
            Untrusted::Unbindable(why) => write!(f, "cannot be trusted: {why}"),
        }
    }
}

/// What trust in one extension is bound to.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The directory the extension resolves to (symlinks followed).
    pub dir: PathBuf,
    /// The resolved files bound: its manifest first, then each file its
    /// `exec` and `args` name inside the directory, in that order.
    pub files: Vec<PathBuf>,
}

impl Binding {
    /// The binding of the extension in `dir` of the project `project`
    /// with `manifest`, as the files are now; an error names the program
    /// or file it cannot bind.
    pub(crate) fn of(project: &Path, dir: &Path, manifest: &Manifest) -> Result<Binding, String> {
        let resolve = |p: &Path| {
            p.canonicalize()
                .map_err(|e| format!("cannot resolve {}: {e}", p.display()))
        };
        let real = resolve(dir)?;
        let places = Places {
            dir: real.clone(),
            project: resolve(project)?,
        };
        let mut files = vec![resolve(&dir.join(MANIFEST_FILE))?];
        let mut bind = |file: Option<PathBuf>| match file {
            Some(file) if !files.contains(&file) => files.push(file),
            _ => {}
        };
        // The program as a start resolves it: a bare name on $PATH too.
        if let Ok(exec) = manifest.resolve_exec(dir) {
            let named = manifest.exec.as_deref().unwrap_or_default();
            bind(places.bound("`exec`", named, &dir.join(exec))?);
        }
        for arg in &manifest.args {
            bind(places.bound("`args` entry", arg, &dir.join(arg))?);
        }
        // What a bundle hands the embedder to load counts as what it runs
        // (always inside the directory: `bundle.rs` refuses the rest). A
        // build without bundles hands over no skill or theme and reads
        // none, so it binds what it runs: the manifest, `exec` and `args`.
        #[cfg(feature = "bundles")]
        let provides = &manifest.provides;
        #[cfg(feature = "bundles")]
        for file in provides.skills.iter().chain(&provides.theme) {
            bind(places.bound("skill or theme", &file.to_string_lossy(), file)?);
        }
        Ok(Binding { dir: real, files })
    }

    /// How `file` is shown: relative to the directory when inside it.
    pub fn show(&self, file: &Path) -> String {
        file.strip_prefix(&self.dir)
            .unwrap_or(file)
            .display()
            .to_string()
    }
}

/// Where bound files may lie: the extension's directory and its project,
/// both resolved.
struct Places {
    dir: PathBuf,
    project: PathBuf,
}

impl Places {
    /// The regular file at `path` (what `named`, the manifest's `what`,
    /// refers to) resolved, to be bound when it is in the extension's
    /// directory or its project; `None` when it is no regular file (an
    /// option, a directory, a device: nothing to bind) or lies in a
    /// `$PATH` directory (the user's own programs). Anywhere else it is
    /// an error: a stranger's program outside the project cannot be
    /// bound by what the project holds.
    fn bound(&self, what: &str, named: &str, path: &Path) -> Result<Option<PathBuf>, String> {
        let Ok(resolved) = path.canonicalize() else {
            return Ok(None);
        };
        if !resolved.is_file() {
            return Ok(None);
        }
        if resolved.starts_with(&self.dir) || resolved.starts_with(&self.project) {
            return Ok(Some(resolved));
        }
        if in_path_dir(path) || in_path_dir(&resolved) {
            return Ok(None);
        }
        Err(format!(
            "{what} {named:?} is {}, outside the project {} and not in a $PATH directory",
            resolved.display(),
            self.project.display()
        ))
    }
}

/// Whether `file` is directly in one of `$PATH`'s absolute directories
/// (compared resolved).
fn in_path_dir(file: &Path) -> bool {
    let Some(parent) = file.parent().and_then(|p| p.canonicalize().ok()) else {
        return false;
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|p| p.is_absolute())
        .any(|p| p.canonicalize().is_ok_and(|p| p == parent))
}

/// One trusted extension in the record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// Its manifest name when trusted.
    pub name: String,
    /// [`Binding::dir`].
    pub dir: PathBuf,
    /// [`Binding::files`].
    pub files: Vec<PathBuf>,
    /// The directory below `$ZOT_HOME/trust` holding the copies.
    copies: String,
}

/// `trust.json`: project directory -> extension directory name -> entry.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RecordFile {
    version: u64,
    projects: BTreeMap<PathBuf, BTreeMap<String, Entry>>,
}

/// The trust record of one `$ZOT_HOME`, as read.
#[derive(Debug)]
pub struct Record {
    home: PathBuf,
    file: RecordFile,
    /// Copies of entries replaced or removed, deleted once the record is written.
    obsolete: Vec<String>,
}

/// The key of a project: its directory, resolved (so `dir/`, `./dir`
/// and a symlink to it are one project).
fn project_key(cwd: &Path) -> Option<PathBuf> {
    cwd.canonicalize().ok()
}

/// The key of an extension within its project: its directory's name in
/// `.zot/extensions`.
pub fn entry_key(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Record {
    /// Reads `$ZOT_HOME/trust.json` (none yet: nothing trusted). A record
    /// that is not a regular file of its owner's alone (a symlink, a
    /// directory, writable by others) or is corrupt is refused: the error
    /// says so, naming the file.
    pub fn load(home: &Path) -> Result<Record, String> {
        let path = home.join(RECORD_FILE);
        let refused = |what: String| {
            format!(
                "trust record {} {what}; nothing is trusted until it is fixed or removed",
                path.display()
            )
        };
        let empty = Record {
            home: home.to_path_buf(),
            file: RecordFile {
                version: RECORD_VERSION,
                ..RecordFile::default()
            },
            obsolete: Vec::new(),
        };
        check_copies_dir(home).map_err(|e| refused(format!("cannot be used: {e}")))?;
        let meta = match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(empty),
            Err(e) => return Err(refused(format!("cannot be read ({e})"))),
            Ok(meta) => meta,
        };
        if meta.file_type().is_symlink() {
            return Err(refused("is a symlink (it must be a regular file)".into()));
        }
        let file = manifest::open_regular(&path, MAX_RECORD_BYTES, true)
            .map_err(|e| refused(format!("cannot be used: {e}")))?;
        let mode = file.metadata().map_err(|e| refused(e.to_string()))?.mode();
        if mode & 0o022 != 0 {
            return Err(refused(format!(
                "is writable by other users (mode {:o}; zot writes it 600)",
                mode & 0o7777
            )));
        }
        let mut text = Vec::new();
        file.take(MAX_RECORD_BYTES)
            .read_to_end(&mut text)
            .map_err(|e| refused(format!("cannot be read ({e})")))?;
        let file: RecordFile =
            serde_json::from_slice(&text).map_err(|e| refused(format!("is corrupt ({e})")))?;
        if file.version != RECORD_VERSION {
            let v = file.version;
            return Err(refused(format!("has version {v}, not {RECORD_VERSION}")));
        }
        Ok(Record { file, ..empty })
    }

    /// Whether the extension in `dir` (in the project `cwd`), whose
    /// manifest read as `text` and parsed as `manifest`, is trusted as it
    /// is now.
    pub fn check(
        &self,
        cwd: &Path,
        dir: &Path,
        text: &[u8],
        manifest: &Manifest,
    ) -> Result<(), Untrusted> {
        // What cannot be bound is said first: trusting it would not help.
        let now = Binding::of(cwd, dir, manifest).map_err(Untrusted::Unbindable)?;
        let entry = project_key(cwd)
            .and_then(|key| self.file.projects.get(&key))
            .and_then(|p| p.get(&entry_key(dir)))
            .ok_or(Untrusted::New)?;
        if now.dir != entry.dir {
            return Err(Untrusted::Changed(format!(
                "its directory now resolves to {} (trusted: {})",
                now.dir.display(),
                entry.dir.display()
            )));
        }
        if now.files != entry.files {
            let show = |files: &[PathBuf]| {
                let shown: Vec<String> = files.iter().map(|f| now.show(f)).collect();
                shown.join(", ")
            };
            return Err(Untrusted::Changed(format!(
                "the files it runs are now {} (trusted: {})",
                show(&now.files),
                show(&entry.files)
            )));
        }
        let copies = self.home.join(COPIES_DIR).join(&entry.copies);
        if !copies.is_dir() {
            return Err(Untrusted::Changed(format!(
                "the copies it was trusted with are gone ({} is missing)",
                copies.display()
            )));
        }
        let changed = |file: &Path| Untrusted::Changed(format!("{} changed", now.show(file)));
        // The manifest as parsed, not read again: what runs is what is compared.
        if read_copy(&copies.join("0")).as_deref() != Some(text) {
            return Err(changed(&now.files[0]));
        }
        for (n, file) in now.files.iter().enumerate().skip(1) {
            if !same_contents(file, &copies.join(n.to_string())) {
                return Err(changed(file));
            }
        }
        Ok(())
    }

    /// Records `snapshot` as trusted in the project `cwd`, replacing what
    /// was recorded for its directory.
    pub fn trust(&mut self, cwd: &Path, mut snapshot: Snapshot) -> Result<(), String> {
        let key = project_key(cwd).ok_or_else(|| format!("cannot resolve {}", cwd.display()))?;
        let entry = Entry {
            name: snapshot.manifest.name.clone(),
            dir: snapshot.binding.dir.clone(),
            files: snapshot.binding.files.clone(),
            copies: snapshot.copies.clone(),
        };
        let project = self.file.projects.entry(key).or_default();
        if let Some(old) = project.insert(snapshot.key.clone(), entry) {
            self.obsolete.push(old.copies);
        }
        // Recorded: the copies are the record's now.
        snapshot.recorded = true;
        Ok(())
    }

    /// Removes the entries of project `cwd` whose directory name or
    /// manifest name is in `names` (all of them when `names` is empty);
    /// returns what was removed.
    pub fn untrust(&mut self, cwd: &Path, names: &[String]) -> Vec<(String, Entry)> {
        let Some(key) = project_key(cwd) else {
            return Vec::new();
        };
        let Some(project) = self.file.projects.get_mut(&key) else {
            return Vec::new();
        };
        let wanted = |dir: &String, e: &Entry| {
            names.is_empty() || names.iter().any(|n| n == dir || *n == e.name)
        };
        let keys: Vec<String> = project
            .iter()
            .filter(|(dir, e)| wanted(dir, e))
            .map(|(dir, _)| dir.clone())
            .collect();
        let removed: Vec<(String, Entry)> = keys
            .into_iter()
            .filter_map(|k| project.remove(&k).map(|e| (k, e)))
            .collect();
        if project.is_empty() {
            self.file.projects.remove(&key);
        }
        self.obsolete
            .extend(removed.iter().map(|(_, e)| e.copies.clone()));
        removed
    }

    /// Writes the record atomically (a temporary file renamed over it),
    /// mode 600, then deletes the copies nothing refers to any more.
    fn write(&mut self) -> Result<(), String> {
        let path = self.home.join(RECORD_FILE);
        let tmp = self
            .home
            .join(format!(".{RECORD_FILE}.{}.tmp", std::process::id()));
        let text = serde_json::to_vec_pretty(&self.file).map_err(|e| e.to_string())?;
        let cannot = |e: io::Error| format!("cannot write {}: {e}", path.display());
        let _ = fs::remove_file(&tmp);
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(&text)?;
                f.write_all(b"\n")?;
                f.sync_all()
            })
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(cannot(e));
        }
        for copies in self.obsolete.drain(..) {
            let _ = fs::remove_dir_all(self.home.join(COPIES_DIR).join(copies));
        }
        Ok(())
    }
}

/// Reads the record of `home`, lets `change` edit it, and writes it
/// back, all under an exclusive lock, so concurrent `zot ext trust` and
/// `untrust` runs lose nothing. An unusable record is not overwritten.
pub fn update<T>(
    home: &Path,
    change: impl FnOnce(&mut Record) -> Result<T, String>,
) -> Result<T, String> {
    make_private_dir(home)?;
    let _lock = Lock::take(&home.join(LOCK_FILE))?;
    let mut record = Record::load(home)?;
    let done = change(&mut record)?;
    record.write()?;
    Ok(done)
}

/// Whether the project extension in `dir` of the project `project`,
/// about to start with `manifest` (as discovered), may start now: its
/// manifest on disk is still that one and the record of `home` trusts it
/// as its files are now. Called for every start of a project extension
/// (the first, after a reload, and each restart by supervision), so a
/// program changed under a running host never starts untrusted. The
/// error says why and how to trust it.
pub(crate) fn check_start(
    home: &Path,
    project: &Path,
    dir: &Path,
    manifest: &Manifest,
) -> Result<(), String> {
    let name = &manifest.name;
    let refused =
        |why: String| format!("untrusted ({why}); review it, then run 'zot ext trust {name}'");
    let (now, text) = Manifest::load_with_text(&dir.join(MANIFEST_FILE))
        .map_err(|e| refused(format!("its manifest cannot be used now: {e}")))?;
    if now != *manifest {
        let why = format!(
            "trust lapsed: {MANIFEST_FILE} or the skills and theme it provides changed \
             since it was loaded"
        );
        return Err(refused(why));
    }
    let record = Record::load(home).map_err(|why| refused(why.to_string()))?;
    record
        .check(project, dir, &text, &now)
        .map_err(|why| refused(why.to_string()))
}

/// An exclusive lock (`File::lock`, flock(2) here), released when dropped.
struct Lock(#[allow(dead_code)] File);

impl Lock {
    fn take(path: &Path) -> Result<Lock, String> {
        let cannot = |e: io::Error| format!("cannot lock {}: {e}", path.display());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(cannot)?;
        loop {
            match file.lock() {
                Ok(()) => return Ok(Lock(file)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(cannot(e)),
            }
        }
    }
}

/// The copies directory, when present, must be a directory only its
/// owner can write: else anyone could forge what trust compares with.
fn check_copies_dir(home: &Path) -> Result<(), String> {
    let dir = home.join(COPIES_DIR);
    match fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", dir.display())),
        Ok(m) if !m.is_dir() => Err(format!("{} is not a directory", dir.display())),
        Ok(m) if m.mode() & 0o022 != 0 => Err(format!(
            "{} is writable by other users (mode {:o})",
            dir.display(),
            m.mode() & 0o7777
        )),
        Ok(_) => Ok(()),
    }
}

fn make_private_dir(dir: &Path) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// A copy of a trusted manifest, or `None` when it cannot be read.
fn read_copy(path: &Path) -> Option<Vec<u8>> {
    let file = manifest::open_regular(path, MAX_BOUND_BYTES, true).ok()?;
    let mut text = Vec::new();
    file.take(MAX_BOUND_BYTES).read_to_end(&mut text).ok()?;
    Some(text)
}

/// Whether the file at `path` (an attacker's, perhaps) holds exactly
/// what the copy at `copy` does; false when either cannot be read.
fn same_contents(path: &Path, copy: &Path) -> bool {
    let open = |p: &Path, no_symlink| manifest::open_regular(p, MAX_BOUND_BYTES, no_symlink).ok();
    let (Some(a), Some(b)) = (open(path, false), open(copy, true)) else {
        return false;
    };
    let (mut a, mut b) = (a.take(MAX_BOUND_BYTES + 1), b.take(MAX_BOUND_BYTES + 1));
    let (mut buf_a, mut buf_b) = (vec![0; 64 * 1024], vec![0; 64 * 1024]);
    loop {
        match (fill(&mut a, &mut buf_a), fill(&mut b, &mut buf_b)) {
            (Ok(0), Ok(0)) => return true,
            (Ok(n), Ok(m)) if n == m && buf_a[..n] == buf_b[..m] => {}
            _ => return false,
        }
    }
}

/// Reads until `buf` is full or the end: two files then compare chunk by chunk.
fn fill(from: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match from.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// One project extension as it was when shown to the user: its manifest
/// and binding, and copies of the bound files taken before asking, so
/// what is trusted is exactly what was shown. Dropped unrecorded, the
/// copies are deleted.
#[derive(Debug)]
pub struct Snapshot {
    /// The extension's directory name in `.zot/extensions`.
    pub key: String,
    /// Its manifest, parsed from the copy.
    pub manifest: Manifest,
    /// What trust binds.
    pub binding: Binding,
    copies: String,
    copies_dir: PathBuf,
    recorded: bool,
}

impl Snapshot {
    /// Copies what trust in the extension in `dir` of the project
    /// `project` binds into `home`.
    pub fn take(home: &Path, project: &Path, dir: &Path) -> Result<Snapshot, String> {
        let (manifest, text) = Manifest::load_with_text(&dir.join(MANIFEST_FILE))
            .map_err(|e| format!("invalid manifest: {e}"))?;
        let binding = Binding::of(project, dir, &manifest)?;
        let root = home.join(COPIES_DIR);
        make_private_dir(&root)?;
        let copies = unique_name();
        let copies_dir = root.join(&copies);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&copies_dir)
            .map_err(|e| format!("cannot create {}: {e}", copies_dir.display()))?;
        let snapshot = Snapshot {
            key: entry_key(dir),
            manifest,
            binding,
            copies,
            copies_dir,
            recorded: false,
        };
        snapshot.write_copy(0, &mut &text[..])?;
        for (n, file) in snapshot.binding.files.iter().enumerate().skip(1) {
            let shown = file.display();
            let from = manifest::open_regular(file, MAX_BOUND_BYTES, false)
                .map_err(|e| format!("{shown}: {e}"))?;
            snapshot.write_copy(n, &mut from.take(MAX_BOUND_BYTES))?;
        }
        Ok(snapshot)
    }

    fn write_copy(&self, n: usize, from: &mut impl Read) -> Result<(), String> {
        let path = self.copies_dir.join(n.to_string());
        let cannot = |e: io::Error| format!("cannot copy to {}: {e}", path.display());
        let mut to = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(cannot)?;
        io::copy(from, &mut to).map_err(cannot)?;
        to.sync_all().map_err(cannot)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if !self.recorded {
            let _ = fs::remove_dir_all(&self.copies_dir);
        }
    }
}

/// A name no other run of any process picks: pid, time, counter.
fn unique_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64; // a u128 would link its own formatter
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos}-{n}", std::process::id())
}
