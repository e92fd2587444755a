//! SIGINT (Ctrl-C), SIGTERM and SIGHUP for every CLI surface: one
//! handler, installed once per process, writes the signal's number to a
//! pipe (about the only thing a signal handler may safely do); a thread
//! reads it and calls the surface's callback, on an ordinary thread.
//!
//! What a signal means is the surface's business: the session cancels
//! on SIGINT and leaves on SIGTERM, `zot rpc` and `zot mcp` shut down
//! ([`stop_on_signal`]), `zot ext install` stops copying.

use super::CliError;
use std::io::{self, Write};
use std::sync::atomic::{AtomicI32, Ordering};
use zot_host::{HostHandle, Request};

/// What arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    /// SIGINT: Ctrl-C at a terminal.
    Interrupt,
    /// SIGTERM or SIGHUP: asked to end.
    Terminate,
    /// SIGWINCH: the terminal changed size (only with [`install_with_resize`]).
    Resize,
}

/// Write end of the pipe the handler writes to (-1: none yet).
static PIPE: AtomicI32 = AtomicI32::new(-1);

#[cfg(any(target_os = "linux", target_os = "android"))]
use libc::__errno_location as errno_location;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
use libc::__error as errno_location;

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE.load(Ordering::Relaxed);
    // Signal numbers we handle fit a byte.
    let byte = sig as u8;
    // SAFETY: write(2) is async-signal-safe; the buffer outlives the call.
    // errno is this thread's, read and restored around the write, so the
    // interrupted code never sees the handler's errno.
    unsafe {
        let errno = *errno_location();
        libc::write(fd, (&byte as *const u8).cast(), 1);
        *errno_location() = errno;
    }
}

/// Calls `f` for every SIGINT, SIGTERM and SIGHUP from now on, one at a
/// time on the signal thread. Call it once per process.
pub fn install(f: impl FnMut(Signal) + Send + 'static) -> Result<(), CliError> {
    install_for(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP], f)
}

/// [`install`], and SIGWINCH as [`Signal::Resize`] (the session's panels).
pub fn install_with_resize(f: impl FnMut(Signal) + Send + 'static) -> Result<(), CliError> {
    install_for(
        &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGWINCH],
        f,
    )
}

fn install_for(
    signals: &[libc::c_int],
    mut f: impl FnMut(Signal) + Send + 'static,
) -> Result<(), CliError> {
    let failed = |what: &str| {
        let e = io::Error::last_os_error();
        CliError::Failed(format!("cannot install the signal handler: {what}: {e}"))
    };
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(failed("pipe"));
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    // SAFETY: fcntl on descriptors we own; the write end must not block
    // inside the handler, and neither end leaks into children.
    unsafe {
        libc::fcntl(write_fd, libc::F_SETFL, libc::O_NONBLOCK);
        libc::fcntl(read_fd, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(write_fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    PIPE.store(write_fd, Ordering::Relaxed);
    std::thread::Builder::new()
        .name("zot-signals".into())
        .spawn(move || loop {
            let mut byte = 0u8;
            // SAFETY: reads at most one byte into `byte`.
            let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
            if n == 1 {
                f(match libc::c_int::from(byte) {
                    libc::SIGINT => Signal::Interrupt,
                    libc::SIGWINCH => Signal::Resize,
                    _ => Signal::Terminate,
                });
            } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        })
        .map_err(|e| CliError::Failed(format!("cannot start the signal thread: {e}")))?;
    for &sig in signals {
        // SAFETY: a zeroed sigaction is valid; we set handler, mask and
        // flags. SA_RESTART: no read or write elsewhere fails with EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(failed("sigaction"));
            }
        }
    }
    Ok(())
}

/// Signals for `zot rpc` and `zot mcp` (SPEC 7, 9), whichever signal it
/// is: the first hands `graceful` a shutdown (requests already read are
/// answered first), the second asks `host` to stop now (they are not
/// waited for), a third exits at once, as only a stdout nobody reads
/// can still hold us up. Each step is said on stderr after `who`.
pub fn stop_on_signal(
    who: &'static str,
    graceful: impl Fn(Request) + Send + 'static,
    host: HostHandle,
) -> Result<(), CliError> {
    let mut seen = 0;
    install(move |_| {
        seen += 1;
        let say = |what: &str| {
            let _ = writeln!(io::stderr(), "{who}: {what}");
        };
        match seen {
            1 => {
                say("signal received, shutting down (again to skip waiting for requests)");
                graceful(Request::Shutdown {
                    reply: Box::new(|_| {}),
                });
            }
            2 => {
                say("signal received again, stopping now");
                host.submit(Request::ShutdownNow {
                    reply: Box::new(|_| {}),
                });
            }
            _ => std::process::exit(1),
        }
    })
}

/// The terminal's size in columns and rows: stdout's, else stdin's, else
/// `$COLUMNS` / `$LINES`, else 80 x 24 (a pipe has no size).
pub fn terminal_size() -> (u32, u32) {
    for fd in [libc::STDOUT_FILENO, libc::STDIN_FILENO] {
        // SAFETY: a zeroed winsize is valid; TIOCGWINSZ fills it or fails
        // (on a pipe), and only reads the descriptor.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
            return (u32::from(ws.ws_col), u32::from(ws.ws_row));
        }
    }
    let env = |var: &str, default: u32| {
        let value = std::env::var(var).ok().and_then(|v| v.trim().parse().ok());
        value.filter(|n| *n > 0).unwrap_or(default)
    };
    (env("COLUMNS", 80), env("LINES", 24))
}
