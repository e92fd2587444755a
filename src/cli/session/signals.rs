//! Signals for the session: Ctrl-C (SIGINT) cancels, SIGTERM and SIGHUP
//! end the session at once. Both end up as messages on one channel so
//! the session loop can `select!` on them.
//!
//! `ctrlc` (with its `termination` feature) cannot tell SIGINT from
//! SIGTERM, so after installing it we take SIGTERM and SIGHUP back with
//! a handler of our own that writes a byte to a pipe (the only thing a
//! signal handler may safely do); a thread turns that byte into
//! [`Signal::Terminate`].

use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::{AtomicI32, Ordering};

/// What arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    /// Ctrl-C: cancel what is waiting; the second one exits.
    Interrupt,
    /// SIGTERM or SIGHUP: shut down now.
    Terminate,
}

/// Write end of the pipe the SIGTERM handler writes to (-1: none).
static TERM_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_terminate(_: libc::c_int) {
    let fd = TERM_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) is async-signal-safe; the buffer outlives the call.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// Installs the handlers; signals arrive on the returned channel.
pub fn install() -> Result<Receiver<Signal>, String> {
    let (tx, rx) = crossbeam_channel::bounded(16);
    let on_int = tx.clone();
    ctrlc::set_handler(move || {
        let _ = on_int.try_send(Signal::Interrupt);
    })
    .map_err(|e| format!("cannot install the signal handler: {e}"))?;
    // Without the pipe SIGTERM still arrives, through ctrlc, as an
    // interrupt: degraded but safe, so a failure here is not fatal.
    let _ = install_terminate(tx);
    Ok(rx)
}

fn install_terminate(tx: Sender<Signal>) -> Result<(), ()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(());
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    // SAFETY: fcntl on descriptors we own; the write end must not block
    // inside the handler, and neither end leaks into children.
    unsafe {
        libc::fcntl(write_fd, libc::F_SETFL, libc::O_NONBLOCK);
        libc::fcntl(read_fd, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(write_fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    TERM_PIPE.store(write_fd, Ordering::Relaxed);
    std::thread::Builder::new()
        .name("zot-session-signals".into())
        .spawn(move || {
            let mut byte = 0u8;
            loop {
                // SAFETY: reads at most one byte into `byte`.
                let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
                if n == 1 {
                    let _ = tx.try_send(Signal::Terminate);
                } else if n == 0
                    || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                {
                    break;
                }
            }
        })
        .map_err(|_| ())?;
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid; we set handler, mask and flags.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_terminate as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(());
            }
        }
    }
    Ok(())
}
