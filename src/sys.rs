//! Every raw libc call of the crate, each a small safe function, where
//! std has no safe equivalent: a signal to a whole process group
//! (kill(2) with a negative pid), whether any process has a pid, a wait
//! for a child's exit that does not reap it (waitid(2) with `WNOWAIT`),
//! what a child does between fork and exec (the parent-death signal,
//! Landlock's self-restriction: one hook), a terminal's size
//! (ioctl(2)), and with the `confine`
//! feature Landlock's ABI query. Everything else about a process (its
//! sockets, its threads, its reaping) is std. This is the crate's one
//! module with `unsafe`.

use std::io;
use std::process::Command;

/// kill(2) of `pid` (a process; negative: a process group) with
/// `signal`: whether it was sent, or the error. Never 0 or -1 (every
/// process of the caller's group, or every process).
fn kill(pid: i32, signal: i32) -> io::Result<()> {
    if pid == 0 || pid == -1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill(2) touches no memory. std's `Child::kill` reaches its
    // own child alone, and only with SIGKILL.
    match unsafe { libc::kill(pid, signal) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// kill(2) to the process group led by `pgid`: whether it was sent (for
/// signal 0, which sends nothing: whether a process of the group lives).
pub(crate) fn kill_group(pgid: u32, signal: i32) -> bool {
    i32::try_from(pgid).is_ok_and(|pgid| pgid > 0 && kill(-pgid, signal).is_ok())
}

/// Whether a process with id `pid` exists, whoever owns it (false for
/// a pid that is not positive, which would name a group). Signal 0
/// sends nothing; std can ask only about its own children.
pub fn process_exists(pid: i32) -> bool {
    pid > 0
        && match kill(pid, 0) {
            Ok(()) => true,
            Err(e) => e.raw_os_error() == Some(libc::EPERM),
        }
}

/// Waits until the child `pid` has exited, and leaves it unreaped
/// (waitid(2) with `WNOWAIT`): its pid, which is also its process
/// group's id, cannot be reused until std's `Child::try_wait` or `wait`
/// reaps it, which then returns at once. Fails with `ECHILD` when it was
/// reaped already (or is not a child of this process).
pub(crate) fn wait_exited(pid: u32) -> io::Result<()> {
    let flags = libc::WEXITED | libc::WNOWAIT;
    let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
    loop {
        // SAFETY: waitid(2) only fills `info`, which lives across the
        // call and is never read here; std waits only to reap.
        let waited = unsafe { libc::waitid(libc::P_PID, pid, info.as_mut_ptr(), flags) };
        if waited == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The size of the terminal on descriptor `fd` in columns and rows, or
/// None when it is not a terminal (a pipe has no size).
pub fn terminal_size(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u16, u16)> {
    use std::os::fd::AsRawFd;
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ only fills `ws`, which lives across the call,
    // or fails (on a pipe); std has no call for a terminal's size.
    let ok = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row))
}

/// The Landlock ABI version this kernel supports, 0 when none.
#[cfg(all(feature = "confine", target_os = "linux"))]
pub(crate) fn landlock_abi() -> u32 {
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

/// Has the child `command` starts do this between fork and exec, in
/// one hook (which makes std fork instead of using posix_spawn, for this
/// command only): with `die_with_host`, the pid of this process, get
/// SIGKILL when the thread that forked it ends (`PR_SET_PDEATHSIG`),
/// failing the start when this process died between the fork and the
/// prctl (the signal would never come); with `landlock`, a ruleset's
/// descriptor (only the `confine` feature has one), set no-new-privileges
/// and enter its Landlock domain, confined for good. The descriptor must
/// stay open until `command` is spawned.
#[cfg(target_os = "linux")]
pub(crate) fn before_exec(
    command: &mut Command,
    die_with_host: Option<u32>,
    landlock: Option<std::os::fd::RawFd>,
) {
    use std::os::unix::process::CommandExt;
    let signal = libc::SIGKILL as libc::c_ulong;
    // SAFETY: the hook runs in the forked child before exec and calls
    // only prctl(2), getppid(2) (`parent_id`) and
    // landlock_restrict_self(2), which take integers, are
    // async-signal-safe and allocate nothing; a ruleset's descriptor
    // stays open in the parent (so in the child) until the spawn
    // returns. std has no parent-death signal and no Landlock, and the
    // landlock crate's restrict_self is not made for a child between
    // fork and exec.
    unsafe {
        command.pre_exec(move || {
            if let Some(host) = die_with_host {
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if std::os::unix::process::parent_id() != host {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
            // No new privileges (Landlock requires it without
            // CAP_SYS_ADMIN), then the ruleset's domain for good.
            if let Some(fd) = landlock {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn wait_exited_leaves_the_child_for_try_wait_and_then_says_echild() {
        let mut child = Command::new("/bin/sh")
            .args(["-c", "exit 3"])
            .spawn()
            .expect("/bin/sh starts");
        wait_exited(child.id()).expect("it exits");
        // Not reaped: its status is still there, at once.
        let status = child.try_wait().expect("try_wait").expect("exited");
        assert_eq!(status.code(), Some(3));
        // Reaped now: nothing more to wait for.
        let again = wait_exited(child.id()).expect_err("reaped");
        assert_eq!(again.raw_os_error(), Some(libc::ECHILD));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_child_that_dies_with_the_host_is_killed_when_its_spawning_thread_ends() {
        let spawned = std::thread::spawn(|| {
            let mut command = Command::new("/bin/sh");
            command.args(["-c", "exec sleep 60"]);
            before_exec(&mut command, Some(std::process::id()), None);
            command.spawn()
        });
        let mut child = (spawned.join())
            .expect("the spawning thread")
            .expect("/bin/sh starts");
        // Its spawning thread has ended: the parent-death signal came
        // (without it, this waits out the sleep and sees exit code 0).
        let status = child.wait().expect("wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    }
}
