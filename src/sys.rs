//! The host's raw libc calls for extension processes, where std has no
//! safe equivalent: a signal to a whole process group (kill(2) with a
//! negative pid), the parent-death signal (prctl(2) between fork and
//! exec) and one send(2) that does not wait. Everything else about a
//! process (its sockets, its threads, its reaping) is std.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::process::Command;

/// Writes what of `buf` fits into the socket `fd` now, without waiting:
/// how many bytes went (`WouldBlock` when none fit). Only this one call
/// does not wait; the socket stays blocking for its writer thread.
pub(crate) fn send_now(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    // SAFETY: `buf` is valid for `buf.len()` bytes and `fd` is an open
    // socket for the call; std has no per-call MSG_DONTWAIT.
    let sent = unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
    usize::try_from(sent).map_err(|_| io::Error::last_os_error())
}

/// kill(2) to the process group led by `pgid`: whether it was sent (for
/// signal 0, which sends nothing: whether a process of the group lives).
pub(crate) fn kill_group(pgid: u32, signal: i32) -> bool {
    // SAFETY: kill(2) touches no memory; the negative pid addresses the
    // group (never 0 or -1: `pgid` is positive). std's `Child::kill`
    // reaches the leader alone, and only with SIGKILL.
    i32::try_from(pgid).is_ok_and(|pgid| pgid > 0 && unsafe { libc::kill(-pgid, signal) } == 0)
}

/// Has the child `command` starts get SIGKILL when the thread that forked
/// it ends (`PR_SET_PDEATHSIG`). It takes a pre-exec hook, so std forks
/// instead of using posix_spawn. Fails the start when this process (pid
/// `host`) died between the fork and the prctl: the signal would never come.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_host(command: &mut Command, host: u32) {
    use std::os::unix::process::CommandExt;
    let signal = libc::SIGKILL as libc::c_ulong;
    // SAFETY: the hook runs in the forked child before exec and calls
    // only prctl(2) and getppid(2) (`parent_id`), which are
    // async-signal-safe, and allocates nothing; std has no
    // parent-death signal.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if std::os::unix::process::parent_id() != host {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}
