//! Confining an extension with Landlock: what it may write, read and
//! connect to, from its manifest's `permissions`.
//!
//! **Resolved once per host.** A [`Confiner`] resolves an extension's
//! permissions the first time it starts in the host's life: variables
//! expanded, symbolic links resolved, a declared path that is itself a
//! link (or, below `$EXT` or `$CWD`, passes through one) refused, and
//! every directory's device and inode noted. Each later start of the
//! same extension directory (a restart by supervision, a reload) builds
//! its ruleset from those directories, each checked to be the very one
//! noted, so nothing the extension changes on disk (a declared directory
//! swapped for a link to `/`) widens what it gets. A manifest whose
//! permissions changed since does not start until the host is started
//! again.
//!
//! **Never its own manifest.** The writable places are the extension's
//! data directory ([`data_dir`], outside its directory, the `data_dir`
//! of its `hello_ack`), its private `TMPDIR` and the declared `write`
//! paths; `$EXT` is readable only. A declared `write` path that holds
//! the manifest, or overlaps `$ZOT_HOME` (trust record, logs, other
//! extensions and their data), is refused.
//!
//! The host builds the ruleset (opening every allowed path) before it
//! spawns; the child only calls `prctl(PR_SET_NO_NEW_PRIVS)` and
//! `landlock_restrict_self(2)` between fork and exec, two system calls
//! that allocate nothing. So the same path serves the `zot` binary and any
//! embedder of the library, and unconfined extensions keep `posix_spawn`
//! (no pre-exec hook is set for them).
//!
//! Fails closed: a rule the kernel cannot enforce is an error naming the
//! ABI it needs and the one the kernel has, never a silent downgrade.

use crate::ext::manifest::{Manifest, Permissions, MANIFEST_FILE};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Test-only: the Landlock ABI zot takes the kernel to have, lowered to
/// this number (never raised), so the refusal on an old kernel can be
/// tested on a new one.
pub(crate) const ABI_OVERRIDE_VAR: &str = "ZOT_LANDLOCK_ABI_OVERRIDE";

/// Landlock ABI for the filesystem rules: 3 (Linux 6.2) is the first that
/// also denies truncating a file outside the allowed paths.
pub(crate) const FS_ABI: u32 = 3;
/// Landlock ABI that can deny TCP connect and bind (Linux 6.7).
pub const NET_ABI: u32 = 4;
/// Landlock ABI that scopes signals and abstract UNIX sockets (Linux 6.12).
pub(crate) const SCOPE_ABI: u32 = 6;

/// Directories every confined program may read and execute from when its
/// manifest restricts `read`: where the system keeps programs, libraries
/// and configuration.
const SYSTEM_DIRS: [&str; 12] = [
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/dev",
    "/proc", "/sys",
];

/// Devices any program may write to, even though they live outside the
/// allowed paths: a shell's `> /dev/null` opens one for writing.
const WRITABLE_DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// Where the data directories are, in `$ZOT_HOME`.
const DATA_DIR: &str = "data";

/// The Landlock ABI of this kernel as zot sees it (0: none), lowered by
/// `ABI_OVERRIDE_VAR` when that is set.
pub fn kernel_abi() -> u32 {
    let real = real_abi();
    let lowered = std::env::var(ABI_OVERRIDE_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok());
    lowered.map_or(real, |n| n.min(real))
}

#[cfg(target_os = "linux")]
fn real_abi() -> u32 {
    crate::sys::landlock_abi()
}

#[cfg(not(target_os = "linux"))]
fn real_abi() -> u32 {
    0
}

/// The ABI the rules of `perms` need, and the rule that needs it.
pub(crate) fn required_abi(perms: &Permissions) -> (u32, &'static str) {
    if perms.network {
        (FS_ABI, "the filesystem rules")
    } else {
        (NET_ABI, "denying TCP (or declare \"network\": true)")
    }
}

/// Why an extension cannot be confined on this kernel, if it cannot.
pub(crate) fn refusal(perms: &Permissions) -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("confinement needs Linux Landlock, which this system does not have".into());
    }
    let (need, rule) = required_abi(perms);
    let have = kernel_abi();
    (have < need).then(|| {
        let has = match have {
            0 => "no Landlock (ABI 0)".to_string(),
            n => format!("Landlock ABI {n}"),
        };
        format!("cannot confine: {rule} needs Landlock ABI {need}, this kernel has {has}")
    })
}

/// The data directory of the extension in `ext`: `root` (the host's is
/// `$ZOT_HOME/data`) followed by the resolved path of `ext`, with `~`
/// after its last component (and `%`, `~` in any component written
/// `%25`, `%7E`). So every extension directory has its own, and none
/// lies inside another's: a non-last component never ends in a bare `~`.
pub fn data_dir(root: &Path, ext: &Path) -> PathBuf {
    let real = real(ext);
    let mut dir = root.to_path_buf();
    let mut names = real
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .peekable();
    while let Some(name) = names.next() {
        let mut bytes = Vec::with_capacity(name.len() + 1);
        for &b in name.as_bytes() {
            match b {
                b'%' => bytes.extend_from_slice(b"%25"),
                b'~' => bytes.extend_from_slice(b"%7E"),
                b => bytes.push(b),
            }
        }
        if names.peek().is_none() {
            bytes.push(b'~');
        }
        dir.push(OsString::from_vec(bytes));
    }
    dir
}

/// `path` with its symbolic links resolved, or as it is when it cannot be.
fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// What a `$VAR` in a permission path stands for.
#[derive(Debug, Clone)]
pub struct Places {
    /// `$EXT`: the extension's directory.
    pub ext: PathBuf,
    /// `$CWD`: the project directory.
    pub cwd: PathBuf,
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// `$TMP`: the host's temporary directory (not the extension's own).
    pub tmp: PathBuf,
    /// `$ZOT_HOME`: never writable.
    pub zot_home: PathBuf,
    /// Where the data directories are: `$ZOT_HOME/data` (a scratch
    /// directory for `zot ext check`).
    pub data: PathBuf,
}

impl Places {
    /// `$EXT` is `ext`, `$CWD` is `cwd`; `$HOME` and `$TMP` the host's.
    pub fn new(ext: &Path, cwd: &Path, zot_home: &Path) -> Places {
        Places {
            ext: ext.to_path_buf(),
            cwd: cwd.to_path_buf(),
            home: dirs::home_dir(),
            tmp: std::env::temp_dir(),
            zot_home: zot_home.to_path_buf(),
            data: zot_home.join(DATA_DIR),
        }
    }

    /// `path` with its variable replaced; `None` for `$HOME` without a home.
    #[cfg(test)]
    fn expand(&self, path: &str) -> Option<PathBuf> {
        let (base, rest, _) = self.split(path)?;
        Some(if rest.is_empty() {
            base
        } else {
            base.join(rest)
        })
    }

    /// `path`'s base (its variable's value, or `/`), the rest, and whether
    /// the base is a directory a project or an extension ships (`$EXT`,
    /// `$CWD`), below which no symbolic link is followed.
    fn split<'a>(&self, path: &'a str) -> Option<(PathBuf, &'a str, bool)> {
        let (var, rest) = match path.find('/') {
            Some(i) if path.starts_with('$') => (&path[..i], &path[i + 1..]),
            _ if path.starts_with('$') => (path, ""),
            _ => return Some((PathBuf::from("/"), path.trim_start_matches('/'), false)),
        };
        let rest = rest.trim_end_matches('/');
        match var {
            "$EXT" => Some((self.ext.clone(), rest, true)),
            "$CWD" => Some((self.cwd.clone(), rest, true)),
            "$HOME" => Some((self.home.clone()?, rest, false)),
            "$TMP" => Some((self.tmp.clone(), rest, false)),
            _ => None, // the manifest check refuses any other
        }
    }

    /// `$HOME` and `$ZOT_HOME`, each as given and resolved: what the
    /// directories a program needs to start never hold.
    fn shielded(&self) -> Shielded {
        let both = |p: &Path| {
            let mut v = vec![p.to_path_buf()];
            let r = real(p);
            if r != p {
                v.push(r);
            }
            v
        };
        Shielded {
            homes: self.home.as_deref().map(both).unwrap_or_default(),
            zot_homes: both(&self.zot_home),
        }
    }
}

/// `$HOME` and `$ZOT_HOME` as given and resolved.
struct Shielded {
    homes: Vec<PathBuf>,
    zot_homes: Vec<PathBuf>,
}

impl Shielded {
    /// Whether `dir` is `$HOME` or `$ZOT_HOME` or holds one of them:
    /// never granted for what a program needs to start.
    fn holds_private(&self, dir: &Path) -> bool {
        let real = real(dir);
        (self.homes.iter().chain(&self.zot_homes))
            .any(|h| h.starts_with(dir) || h.starts_with(&real))
    }

    /// How many levels below `$HOME` `dir` is (`None`: not below it).
    fn depth_in_home(&self, dir: &Path) -> Option<usize> {
        let real = real(dir);
        self.homes.iter().find_map(|h| {
            [dir, &real]
                .iter()
                .find_map(|d| d.strip_prefix(h).ok())
                .map(|rest| rest.components().count())
        })
    }

    /// The root of the toolchain whose `bin`, `sbin` or `shims` is `dir`,
    /// when it may be read: outside `$HOME`. Under `$HOME`: a version
    /// manager's root beside its `shims` (it has `versions` or
    /// `installs`: `~/.pyenv`, `~/.asdf`), what its shims run; and for
    /// the interpreter a program resolves to, its installation two levels
    /// or more down (`~/.pyenv/versions/3.12`). Never a `bin`'s parent
    /// right in `$HOME` (`~/.local`, `~/.cargo`), nor one that holds
    /// `$HOME` or `$ZOT_HOME`.
    fn toolchain_root(&self, dir: &Path, interpreter: bool) -> Option<PathBuf> {
        let name = dir.file_name()?;
        let shims = name == "shims";
        let parent = dir
            .parent()
            .filter(|_| shims || name == "bin" || name == "sbin")?;
        if self.holds_private(parent) {
            return None;
        }
        let manager = || {
            ["versions", "installs"]
                .iter()
                .any(|d| parent.join(d).is_dir())
        };
        match self.depth_in_home(parent) {
            None => Some(parent.to_path_buf()),
            Some(depth) if interpreter && depth >= 2 => Some(parent.to_path_buf()),
            Some(_) if shims && manager() => Some(parent.to_path_buf()),
            Some(_) => None,
        }
    }
}

/// The extension's private temporary directory: its `TMPDIR`, created
/// for one start and removed with everything in it when dropped.
#[derive(Debug)]
pub(crate) struct PrivateTmp(PathBuf);

impl PrivateTmp {
    /// `$TMP/zot-<name>-<host pid>-<key>`, mode 0700.
    fn create(name: &str, key: u64) -> io::Result<PrivateTmp> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!("zot-{name}-{}-{key}", std::process::id()));
        let make = || std::fs::DirBuilder::new().mode(0o700).create(&dir);
        if let Err(e) = make() {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
            // Left by an earlier host of the same pid that was killed.
            // remove_dir_all never follows a symlink out of it.
            std::fs::remove_dir_all(&dir)?;
            make()?;
        }
        Ok(PrivateTmp(dir))
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One path a ruleset grants, as resolved when the extension first
/// started: its resolved path, and the device and inode it was then.
#[derive(Debug, Clone, PartialEq)]
struct Grant {
    path: PathBuf,
    id: (u64, u64),
}

impl Grant {
    /// `path` resolved, if it exists.
    fn of(path: &Path) -> Result<Option<Grant>, String> {
        let real = match std::fs::canonicalize(path) {
            Ok(real) => real,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot resolve {}: {e}", path.display())),
        };
        match std::fs::metadata(&real) {
            Ok(m) => Ok(Some(Grant {
                path: real,
                id: (m.dev(), m.ino()),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot resolve {}: {e}", path.display())),
        }
    }

    /// Opens it (`O_PATH`) for a rule, and whether it is a directory;
    /// `None` when it is no longer the file it was (removed, replaced,
    /// or swapped for a symbolic link).
    #[cfg(target_os = "linux")]
    fn open(&self) -> Option<(std::fs::File, bool)> {
        let (file, meta) = open_path(&self.path).ok()?;
        ((meta.dev(), meta.ino()) == self.id).then(|| (file, meta.is_dir()))
    }
}

/// `path` opened with `O_PATH` (for a rule: nothing can be read through
/// it), and what it is.
#[cfg(target_os = "linux")]
fn open_path(path: &Path) -> io::Result<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// An extension's permissions as resolved at its first start.
#[derive(Debug)]
struct Resolved {
    /// As its manifest declared them then.
    declared: Permissions,
    data_dir: PathBuf,
    /// Read and write beneath these (the data directory first).
    write: Vec<Grant>,
    /// Read and execute beneath these (`$EXT`, the system, `$PATH` and
    /// the declared ones); `None`: everything.
    read: Option<Vec<Grant>>,
    /// The directories each program it was started with needs.
    programs: HashMap<PathBuf, Vec<Grant>>,
    /// Declared paths that did not exist: denied for the host's life.
    missing: Vec<String>,
}

impl Resolved {
    fn new(perms: &Permissions, places: &Places) -> Result<Resolved, String> {
        if !places.zot_home.is_absolute() || !places.data.is_absolute() {
            let home = places.zot_home.display();
            return Err(format!(
                "cannot confine: $ZOT_HOME {home:?} is not an absolute path"
            ));
        }
        let ext = real(&places.ext);
        let manifest = [places.ext.join(MANIFEST_FILE), ext.join(MANIFEST_FILE)];
        let shielded = places.shielded();
        let data_dir = data_dir(&places.data, &ext);
        let mut missing = Vec::new();
        let mut write = vec![make_data_dir(&data_dir)?];
        for path in &perms.write {
            let Some(grant) = declared(places, "write", path)? else {
                missing.push(path.clone());
                continue;
            };
            if manifest.iter().any(|m| m.starts_with(&grant.path)) {
                return Err(format!(
                    "permissions.write {path:?} holds the extension's own manifest ({}): \
                     a confined extension may never change its permissions; \
                     declare the directories it writes instead",
                    manifest[1].display()
                ));
            }
            let zot_home = shielded.zot_homes.iter();
            if let Some(zh) = zot_home
                .into_iter()
                .find(|zh| zh.starts_with(&grant.path) || grant.path.starts_with(zh))
            {
                return Err(format!(
                    "permissions.write {path:?} overlaps $ZOT_HOME ({}: the trust record, \
                     the logs, the extensions and their data), which a confined extension \
                     may never write",
                    zh.display()
                ));
            }
            write.push(grant);
        }
        let read = match &perms.read {
            None => None,
            Some(list) => {
                let mut read = Vec::new();
                read.extend(Grant::of(&ext)?);
                for dir in SYSTEM_DIRS {
                    read.extend(Grant::of(Path::new(dir))?);
                }
                let path = std::env::var_os("PATH").unwrap_or_default();
                for entry in std::env::split_paths(&path).filter(|p| p.is_absolute()) {
                    if !shielded.holds_private(&entry) {
                        read.extend(Grant::of(&entry)?);
                    }
                    if let Some(root) = shielded.toolchain_root(&entry, false) {
                        read.extend(Grant::of(&root)?);
                    }
                }
                for path in list {
                    match declared(places, "read", path)? {
                        Some(grant) => read.push(grant),
                        None => missing.push(path.clone()),
                    }
                }
                Some(read)
            }
        };
        Ok(Resolved {
            declared: perms.clone(),
            data_dir,
            write,
            read,
            programs: HashMap::new(),
            missing,
        })
    }

    /// The directories `exe` needs (resolved at its first start with it).
    fn program(&mut self, exe: &Path, places: &Places) -> Result<&[Grant], String> {
        if self.read.is_none() {
            return Ok(&[]);
        }
        if !self.programs.contains_key(exe) {
            let shielded = places.shielded();
            let mut dirs = Vec::new();
            for program in std::iter::once(exe.to_path_buf()).chain(interpreter(exe)) {
                for dir in program_dirs(&program, &shielded) {
                    dirs.extend(Grant::of(&dir)?);
                }
            }
            self.programs.insert(exe.to_path_buf(), dirs);
        }
        Ok(self.programs.get(exe).map_or(&[], Vec::as_slice))
    }

    /// One line for the extension's log and `zot ext check`.
    fn summary(&self, network: bool, scoped: bool) -> String {
        let perms = &self.declared;
        let mut text = format!(
            "write its data directory ({}), its TMPDIR",
            self.data_dir.display()
        );
        for p in &perms.write {
            text.push_str(", ");
            text.push_str(p);
        }
        match &perms.read {
            None => text.push_str("; read all"),
            Some(list) => {
                text.push_str("; read $EXT");
                for p in list.iter().filter(|p| *p != "$EXT") {
                    text.push_str(", ");
                    text.push_str(p);
                }
                text.push_str(", what it needs to start and what it may write");
            }
        }
        if !self.missing.is_empty() {
            text.push_str("; not found, so denied: ");
            text.push_str(&self.missing.join(", "));
        }
        text.push_str(if network { "; TCP allowed" } else { "; no TCP" });
        text.push_str(if scoped {
            "; signals and abstract UNIX sockets scoped"
        } else {
            "; signals and abstract UNIX sockets not scoped (needs Landlock ABI 6)"
        });
        text.push_str(&format!(" (Landlock ABI {})", kernel_abi()));
        text
    }
}

/// Creates the data directory (mode 0700) when missing; a data
/// directory that is not a directory of its own (a symbolic link) is
/// refused.
fn make_data_dir(dir: &Path) -> Result<Grant, String> {
    use std::os::unix::fs::DirBuilderExt;
    let cannot = |e: io::Error| format!("cannot create its data directory {}: {e}", dir.display());
    (std::fs::DirBuilder::new().recursive(true).mode(0o700))
        .create(dir)
        .map_err(cannot)?;
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(Grant {
            path: dir.to_path_buf(),
            id: (m.dev(), m.ino()),
        }),
        Ok(_) => Err(format!(
            "its data directory {} is not a directory (a symbolic link?)",
            dir.display()
        )),
        Err(e) => Err(cannot(e)),
    }
}

/// The declared permission `path` of `field`, resolved; `None` when it
/// does not exist. A path that is itself a symbolic link is refused, and
/// so is one that passes through a link below `$EXT` or `$CWD` (what a
/// repository ships): what the user reviewed is what it grants.
fn declared(places: &Places, field: &str, path: &str) -> Result<Option<Grant>, String> {
    let Some((base, rest, shipped)) = places.split(path) else {
        return Ok(None); // $HOME without a home
    };
    let link = |at: &Path| {
        let to = std::fs::read_link(at).map_or_else(|_| "?".into(), |t| t.display().to_string());
        (at.display().to_string(), to)
    };
    let full = if rest.is_empty() {
        base.clone()
    } else {
        base.join(rest)
    };
    match std::fs::symlink_metadata(&full) {
        Ok(m) if m.file_type().is_symlink() => {
            let (_, to) = link(&full);
            return Err(format!(
                "permissions.{field} {path:?} is a symbolic link (to {to}): \
                 declare the directory itself"
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("permissions.{field} {path:?}: {e}")),
    }
    if shipped {
        let mut at = base;
        for part in Path::new(rest).components() {
            at.push(part);
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                let (at, to) = link(&at);
                return Err(format!(
                    "permissions.{field} {path:?} passes through the symbolic link \
                     {at} (to {to}): declare the directory itself"
                ));
            }
        }
    }
    Grant::of(&full).map_err(|e| format!("permissions.{field} {path:?}: {e}"))
}

/// Resolves extensions' permissions once per host, and builds each
/// start's confinement from what was resolved.
#[derive(Debug, Default)]
pub struct Confiner {
    /// By resolved extension directory.
    resolved: Mutex<HashMap<PathBuf, Resolved>>,
}

impl Confiner {
    /// The confinement of `m` (its program resolved to `exe`) in
    /// `places`, for its start number `key`; an error when this kernel
    /// cannot enforce it, when its permissions changed since this
    /// confiner first resolved them, or when what was resolved changed
    /// on disk.
    pub fn confinement(
        &self,
        m: &Manifest,
        exe: &Path,
        places: &Places,
        key: u64,
    ) -> Result<Confinement, String> {
        let perms = m.permissions.clone().unwrap_or_default();
        if let Some(why) = refusal(&perms) {
            return Err(why);
        }
        let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match resolved.entry(real(&places.ext)) {
            std::collections::hash_map::Entry::Occupied(entry) => {
                if entry.get().declared != perms {
                    return Err("its permissions changed since this host first started it: \
                         they take effect once the host is started again"
                        .into());
                }
                entry.into_mut()
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(Resolved::new(&perms, places)?)
            }
        };
        let program = entry.program(exe, places)?.to_vec();
        let tmp = PrivateTmp::create(&m.name, key)
            .map_err(|e| format!("cannot create its temporary directory: {e}"))?;
        let scoped = kernel_abi() >= SCOPE_ABI;
        let mut summary = entry.summary(perms.network, scoped);
        let data_dir = entry.data_dir.clone();
        #[cfg(target_os = "linux")]
        {
            let rules = Rules {
                resolved: entry,
                program: &program,
                tmp: tmp.path(),
                network: perms.network,
                scoped,
            };
            let (ruleset, changed) = rules.build()?;
            if !changed.is_empty() {
                let changed: Vec<_> = changed.iter().map(|p| p.display().to_string()).collect();
                summary.push_str("; changed since its first start, so denied: ");
                summary.push_str(&changed.join(", "));
            }
            Ok(Confinement {
                ruleset,
                tmp,
                summary,
                data_dir,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (program, summary, tmp, data_dir, scoped);
            Err("confinement needs Linux Landlock, which this system does not have".into())
        }
    }
}

/// A ruleset ready to be applied to one child, and its private `TMPDIR`.
#[derive(Debug)]
pub struct Confinement {
    #[cfg(target_os = "linux")]
    ruleset: std::os::fd::OwnedFd,
    /// The child's `TMPDIR`; dropping it removes it, so keep it until the
    /// child has exited.
    pub(crate) tmp: PrivateTmp,
    /// What it may do, in one line for its log.
    pub summary: String,
    /// Its data directory: the `data_dir` of its `hello_ack`.
    pub data_dir: PathBuf,
}

impl Confinement {
    /// The confinement of `m` for one start, resolved afresh (for a
    /// single run, as `zot ext check` does).
    pub fn new(m: &Manifest, exe: &Path, places: &Places, key: u64) -> Result<Confinement, String> {
        Confiner::default().confinement(m, exe, places, key)
    }

    /// Makes `command` start confined: `TMPDIR` set, and the ruleset
    /// applied in the child between fork and exec (so std forks instead
    /// of using posix_spawn, for this command only). Keep `self` alive
    /// until `command` is spawned.
    pub fn apply_to(&self, command: &mut Command) {
        command.env("TMPDIR", self.tmp.path());
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            crate::sys::before_exec(command, None, Some(self.ruleset.as_raw_fd()));
        }
    }
}

/// What one start's ruleset is built from.
#[cfg(target_os = "linux")]
struct Rules<'a> {
    resolved: &'a Resolved,
    program: &'a [Grant],
    tmp: &'a Path,
    network: bool,
    scoped: bool,
}

#[cfg(target_os = "linux")]
impl Rules<'_> {
    /// Creates the ruleset and adds a rule per path resolved at the first
    /// start and the `TMPDIR`. A path that is no longer the file it was
    /// gets no rule (it is denied) and is returned; so is nothing else.
    fn build(&self) -> Result<(std::os::fd::OwnedFd, Vec<PathBuf>), String> {
        use landlock::{
            Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset,
            RulesetAttr, RulesetCreatedAttr, Scope, ABI,
        };
        let fail = |e: landlock::RulesetError| format!("cannot confine: {e}");
        let fs_abi = ABI::V3;
        let write = AccessFs::from_write(fs_abi);
        let read = AccessFs::from_read(fs_abi);
        let handled = match self.resolved.read {
            None => write,
            Some(_) => write | read,
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(handled)
            .map_err(fail)?;
        if !self.network {
            ruleset = (ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp))
                .map_err(fail)?;
        }
        if self.scoped {
            ruleset = ruleset.scope(Scope::from_all(ABI::V6)).map_err(fail)?;
        }
        let mut created = ruleset.create().map_err(fail)?;
        let resolved = self.resolved;
        let data_dir = resolved.write.first().map(|d| &d.path);
        let mut rules: Vec<(std::fs::File, bool, landlock::BitFlags<AccessFs>)> = Vec::new();
        let mut changed = Vec::new();
        let grants = (resolved.write.iter().map(|g| (g, write | read)))
            .chain(resolved.read.iter().flatten().map(|g| (g, read)))
            .chain(self.program.iter().map(|g| (g, read)));
        for (grant, access) in grants {
            match grant.open() {
                Some((file, dir)) => rules.push((file, dir, access)),
                None if Some(&grant.path) == data_dir => {
                    return Err(format!(
                        "its data directory {} was replaced since this host first started it",
                        grant.path.display()
                    ))
                }
                None => changed.push(grant.path.clone()),
            }
        }
        // Made for this start, so not resolved before.
        let (file, meta) = open_path(self.tmp).map_err(|e| format!("cannot confine: {e}"))?;
        rules.push((file, meta.is_dir(), write | read));
        let device = AccessFs::WriteFile | AccessFs::Truncate | read;
        for path in WRITABLE_DEVICES {
            if let Ok((file, meta)) = open_path(Path::new(path)) {
                rules.push((file, meta.is_dir(), device));
            }
        }
        for (file, is_dir, access) in rules {
            let access = match is_dir {
                true => access,
                false => access & AccessFs::from_file(fs_abi),
            };
            created = (created.add_rule(PathBeneath::new(file, access & handled))).map_err(fail)?;
        }
        // No descriptor: the kernel has no Landlock (refused earlier).
        let none = landlock::CreateRulesetError::MissingHandledAccess;
        let ruleset = Option::<std::os::fd::OwnedFd>::from(created).ok_or(fail(none.into()))?;
        Ok((ruleset, changed))
    }
}

/// The program the first line of script `exe` names (`#!/usr/bin/env
/// python3`: `python3` found on `$PATH`), if it has one.
fn interpreter(exe: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let file = crate::ext::manifest::open_regular(exe, u64::MAX, false).ok()?;
    let mut head = Vec::with_capacity(256);
    file.take(256).read_to_end(&mut head).ok()?;
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        let path = std::env::var_os("PATH").unwrap_or_default();
        return std::env::split_paths(&path)
            .map(|p| p.join(name))
            .find(|p| p.is_file());
    }
    Some(first)
}

/// The directories `program` needs to start: its own, and, through
/// symbolic links, the real one (a virtualenv's `python` is a link into
/// the interpreter's installation), each with its toolchain's root when
/// that may be read ([`Shielded::toolchain_root`]); never `$HOME` or
/// `$ZOT_HOME` or a directory holding one.
fn program_dirs(program: &Path, shielded: &Shielded) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let real = std::fs::canonicalize(program).ok();
    for program in [Some(program.to_path_buf()), real].into_iter().flatten() {
        if let Some(dir) = program.parent() {
            if !shielded.holds_private(dir) {
                dirs.push(dir.to_path_buf());
            }
            dirs.extend(shielded.toolchain_root(dir, true));
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places() -> Places {
        Places {
            ext: "/e".into(),
            cwd: "/c".into(),
            home: Some("/h".into()),
            tmp: "/t".into(),
            zot_home: "/h/.local/state/zot".into(),
            data: "/h/.local/state/zot/data".into(),
        }
    }

    #[test]
    fn places_expand_variables() {
        let places = places();
        assert_eq!(places.expand("$EXT"), Some("/e".into()));
        assert_eq!(places.expand("$CWD/out"), Some("/c/out".into()));
        assert_eq!(places.expand("$HOME/.cache/x"), Some("/h/.cache/x".into()));
        assert_eq!(places.expand("$TMP/"), Some("/t".into()));
        assert_eq!(places.expand("/abs"), Some("/abs".into()));
        assert_eq!(places.expand("$NOPE"), None);
    }

    #[test]
    fn toolchain_roots_are_read_only_outside_home() {
        let s = places().shielded();
        let root = |dir: &str, interpreter| s.toolchain_root(Path::new(dir), interpreter);
        assert_eq!(root("/opt/py/bin", false), Some("/opt/py".into()));
        assert_eq!(root("/srv/tools", false), None);
        // $HOME/bin, ~/.local/bin, ~/.cargo/bin: never their parent.
        for dir in [
            "/h/bin",
            "/h/.local/bin",
            "/h/.cargo/bin",
            "/h/.pyenv/shims",
        ] {
            assert_eq!(root(dir, false), None, "{dir}");
            assert_eq!(root(dir, true), None, "{dir}");
        }
        // An interpreter's own installation deeper in $HOME.
        let py = "/h/.pyenv/versions/3.12/bin";
        assert_eq!(root(py, false), None);
        assert_eq!(root(py, true), Some("/h/.pyenv/versions/3.12".into()));
        // Never a directory holding $HOME.
        assert_eq!(root("/bin", false), None);
        assert_eq!(root("/sbin", true), None);
    }

    #[test]
    fn a_version_managers_shims_in_home_bring_its_root() {
        let home = std::env::temp_dir().join(format!("zot-shims-{}", std::process::id()));
        for dir in [".pyenv/shims", ".pyenv/versions", ".tool/shims"] {
            std::fs::create_dir_all(home.join(dir)).expect("create dir");
        }
        let mut places = places();
        places.home = Some(home.clone());
        let s = places.shielded();
        let pyenv = s.toolchain_root(&home.join(".pyenv/shims"), false);
        let other = s.toolchain_root(&home.join(".tool/shims"), false);
        let _ = std::fs::remove_dir_all(&home);
        assert_eq!(pyenv, Some(home.join(".pyenv")));
        assert_eq!(other, None, "shims without versions are no manager's");
    }

    #[test]
    fn data_dirs_are_distinct_and_never_nested() {
        let root = Path::new("/z/data");
        let d = |ext: &str| data_dir(root, Path::new(ext));
        assert_eq!(d("/nowhere/a"), PathBuf::from("/z/data/nowhere/a~"));
        assert_eq!(
            d("/nowhere/a~b%"),
            PathBuf::from("/z/data/nowhere/a%7Eb%25~")
        );
        let (outer, inner) = (d("/nowhere/a"), d("/nowhere/a/b"));
        assert!(!inner.starts_with(&outer), "{inner:?} in {outer:?}");
        // A directory named like a data directory still gets its own.
        let (a, named) = (d("/nowhere/a"), d("/nowhere/a~/b"));
        assert!(!named.starts_with(&a), "{named:?} in {a:?}");
        assert_ne!(d("/nowhere/a~"), d("/nowhere/a"));
    }

    #[test]
    fn tcp_needs_abi_4_unless_allowed() {
        let mut perms = Permissions::default();
        assert_eq!(required_abi(&perms).0, NET_ABI);
        perms.network = true;
        assert_eq!(required_abi(&perms).0, FS_ABI);
    }
}
