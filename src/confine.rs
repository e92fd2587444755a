//! Confining an extension with Landlock (SPEC 16): what it may write,
//! read and connect to, from its manifest's `permissions`.
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

use crate::manifest::{Manifest, Permissions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset(2) with a null attribute, size 0 and
    // the VERSION flag only returns the ABI number (or -1); it touches no
    // memory and creates no descriptor. Neither std nor the landlock
    // crate says which ABI the kernel has before a ruleset is applied.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).unwrap_or(0)
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
}

impl Places {
    /// `$EXT` is `ext`, `$CWD` is `cwd`; `$HOME` and `$TMP` the host's.
    pub fn new(ext: &Path, cwd: &Path) -> Places {
        Places {
            ext: ext.to_path_buf(),
            cwd: cwd.to_path_buf(),
            home: dirs::home_dir(),
            tmp: std::env::temp_dir(),
        }
    }

    /// `path` with its variable replaced; `None` for `$HOME` without a home.
    pub(crate) fn expand(&self, path: &str) -> Option<PathBuf> {
        let (var, rest) = match path.find('/') {
            Some(i) if path.starts_with('$') => (&path[..i], &path[i + 1..]),
            _ if path.starts_with('$') => (path, ""),
            _ => return Some(PathBuf::from(path)),
        };
        let base = match var {
            "$EXT" => self.ext.clone(),
            "$CWD" => self.cwd.clone(),
            "$HOME" => self.home.clone()?,
            "$TMP" => self.tmp.clone(),
            _ => return None, // the manifest check refuses any other
        };
        Some(if rest.is_empty() {
            base
        } else {
            base.join(rest)
        })
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
}

impl Confinement {
    /// The confinement of `m` (its program resolved to `exe`) in `places`,
    /// for its start number `key`; an error when this kernel cannot
    /// enforce it (SPEC 16.3).
    pub fn new(m: &Manifest, exe: &Path, places: &Places, key: u64) -> Result<Confinement, String> {
        let perms = m.permissions.clone().unwrap_or_default();
        if let Some(why) = refusal(&perms) {
            return Err(why);
        }
        let tmp = PrivateTmp::create(&m.name, key)
            .map_err(|e| format!("cannot create its temporary directory: {e}"))?;
        let plan = Plan::new(&perms, exe, places, tmp.path());
        let summary = plan.summary(&perms);
        #[cfg(target_os = "linux")]
        {
            let ruleset = plan.build().map_err(|e| format!("cannot confine: {e}"))?;
            Ok(Confinement {
                ruleset,
                tmp,
                summary,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (plan, summary, tmp);
            Err("confinement needs Linux Landlock, which this system does not have".into())
        }
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
            use std::os::unix::process::CommandExt;
            let fd = self.ruleset.as_raw_fd();
            // SAFETY: the hook runs in the forked child before exec and
            // calls only prctl(2) and landlock_restrict_self(2), which take
            // integers, are async-signal-safe and allocate nothing; `fd`
            // stays open in the parent (so in the child) until the spawn
            // returns. std has no Landlock, and the landlock crate's
            // restrict_self is not made for a child between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    // No new privileges (Landlock requires it without
                    // CAP_SYS_ADMIN), then the ruleset's domain for good.
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                        || libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
    }
}

/// The paths a ruleset allows, expanded.
struct Plan {
    /// Read and write beneath these.
    write: Vec<PathBuf>,
    /// Read and execute beneath these; `None`: everything.
    read: Option<Vec<PathBuf>>,
    network: bool,
    scoped: bool,
}

impl Plan {
    fn new(perms: &Permissions, exe: &Path, places: &Places, tmp: &Path) -> Plan {
        let mut write = vec![places.ext.clone(), tmp.to_path_buf()];
        write.extend(perms.write.iter().filter_map(|p| places.expand(p)));
        let read = perms.read.as_ref().map(|declared| {
            let mut read: Vec<PathBuf> = SYSTEM_DIRS.iter().map(PathBuf::from).collect();
            read.extend(program_dirs(exe));
            let path = std::env::var_os("PATH").unwrap_or_default();
            for entry in std::env::split_paths(&path).filter(|p| p.is_absolute()) {
                read.extend(with_toolchain(&entry));
            }
            read.extend(declared.iter().filter_map(|p| places.expand(p)));
            read
        });
        Plan {
            write,
            read,
            network: perms.network,
            scoped: kernel_abi() >= SCOPE_ABI,
        }
    }

    /// One line for the extension's log and `zot ext check`.
    fn summary(&self, perms: &Permissions) -> String {
        let mut text = String::from("write $EXT, its TMPDIR");
        for p in &perms.write {
            text.push_str(", ");
            text.push_str(p);
        }
        match &perms.read {
            None => text.push_str("; read all"),
            Some(list) if list.is_empty() => {
                text.push_str("; read only what it needs to start and what it may write")
            }
            Some(list) => {
                text.push_str("; read ");
                text.push_str(&list.join(", "));
                text.push_str(", what it needs to start and what it may write");
            }
        }
        text.push_str(if self.network {
            "; TCP allowed"
        } else {
            "; no TCP"
        });
        text.push_str(if self.scoped {
            "; signals and abstract UNIX sockets scoped"
        } else {
            "; signals and abstract UNIX sockets not scoped (needs Landlock ABI 6)"
        });
        text.push_str(&format!(" (Landlock ABI {})", kernel_abi()));
        text
    }

    /// Creates the ruleset and adds a rule per existing path; a path that
    /// does not exist stays denied.
    #[cfg(target_os = "linux")]
    fn build(&self) -> Result<std::os::fd::OwnedFd, landlock::RulesetError> {
        use landlock::{
            Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
            RulesetAttr, RulesetCreatedAttr, Scope, ABI,
        };
        let fs_abi = ABI::V3;
        let write = AccessFs::from_write(fs_abi);
        let read = AccessFs::from_read(fs_abi);
        let handled = match self.read {
            None => write,
            Some(_) => write | read,
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(handled)?;
        if !self.network {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        if self.scoped {
            ruleset = ruleset.scope(Scope::from_all(ABI::V6))?;
        }
        let mut rules = Vec::new();
        rules.extend(self.write.iter().map(|p| (p.as_path(), write | read)));
        let device = AccessFs::WriteFile | AccessFs::Truncate | read;
        rules.extend(WRITABLE_DEVICES.iter().map(|p| (Path::new(p), device)));
        rules.extend(self.read.iter().flatten().map(|p| (p.as_path(), read)));
        let mut created = ruleset.create()?;
        for (path, access) in rules {
            let Ok(fd) = PathFd::new(path) else {
                continue; // missing: stays denied
            };
            let access = match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => access,
                _ => access & AccessFs::from_file(fs_abi),
            };
            created = created.add_rule(PathBeneath::new(fd, access & handled))?;
        }
        // No descriptor: the kernel has no Landlock (refused earlier).
        let none = landlock::CreateRulesetError::MissingHandledAccess;
        Option::<std::os::fd::OwnedFd>::from(created).ok_or(none.into())
    }
}

/// The directories a program needs to start: its own, and, through
/// symbolic links, the real one (a virtualenv's `python` is a link into
/// the interpreter's installation), each with its toolchain.
fn program_dirs(exe: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let real = std::fs::canonicalize(exe).ok();
    for program in [Some(exe.to_path_buf()), real].into_iter().flatten() {
        if let Some(dir) = program.parent() {
            dirs.extend(with_toolchain(dir));
        }
    }
    dirs
}

/// `dir`, and its parent when `dir` is a toolchain's `bin`, `sbin` or
/// `shims` (a virtualenv, `~/.cargo`, `~/.pyenv`): what runs from there
/// reads the rest of its toolchain.
fn with_toolchain(dir: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![dir.to_path_buf()];
    let toolchain = dir
        .file_name()
        .is_some_and(|n| n == "bin" || n == "sbin" || n == "shims");
    if let Some(parent) = dir.parent().filter(|p| toolchain && *p != Path::new("/")) {
        dirs.push(parent.to_path_buf());
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_expand_variables() {
        let places = Places {
            ext: "/e".into(),
            cwd: "/c".into(),
            home: Some("/h".into()),
            tmp: "/t".into(),
        };
        assert_eq!(places.expand("$EXT"), Some("/e".into()));
        assert_eq!(places.expand("$CWD/out"), Some("/c/out".into()));
        assert_eq!(places.expand("$HOME/.cache/x"), Some("/h/.cache/x".into()));
        assert_eq!(places.expand("$TMP/"), Some("/t".into()));
        assert_eq!(places.expand("/abs"), Some("/abs".into()));
        assert_eq!(places.expand("$NOPE"), None);
    }

    #[test]
    fn toolchains_bring_their_root() {
        assert_eq!(
            with_toolchain(Path::new("/root/.pyenv/shims")),
            [PathBuf::from("/root/.pyenv/shims"), "/root/.pyenv".into()]
        );
        assert_eq!(with_toolchain(Path::new("/bin")), [PathBuf::from("/bin")]);
        assert_eq!(
            with_toolchain(Path::new("/srv/tools")),
            [PathBuf::from("/srv/tools")]
        );
    }

    #[test]
    fn tcp_needs_abi_4_unless_allowed() {
        let mut perms = Permissions::default();
        assert_eq!(required_abi(&perms).0, NET_ABI);
        perms.network = true;
        assert_eq!(required_abi(&perms).0, FS_ABI);
    }
}
