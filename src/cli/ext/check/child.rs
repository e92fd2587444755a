//! The extension under check, started the way the host starts it: in a
//! process group of its own, stdout read line by line with the host's
//! frame parser, stderr into its log. A reader and a writer thread keep
//! the check from blocking on a stuck pipe; the group is killed when the
//! check is done with it, or dies with the check (the library's
//! `spawn_group`), so nothing the extension started is left.

use crossbeam_channel::{Receiver, Sender};
use std::fs::File;
use std::io::{self, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use zot_host::process::{group_alive, release_group, signal_group, spawn_group};
use zot_host::protocol::{parse_ext_frame, ExtFrame, Line, LineReader, MAX_LINE};

/// What the reader and writer threads saw. Nearly always a frame, so
/// boxing it would only add an allocation per frame.
#[allow(clippy::large_enum_variant)]
pub(super) enum Seen {
    Frame(ExtFrame),
    /// A stdout line that is not a frame, and why.
    Dropped(String),
    /// stdout ended.
    Eof,
    WriteFailed(String),
}

/// The group of the extension under check (0: none), for the signal
/// handler: the group does not get the terminal's Ctrl-C, and a check
/// killed by a signal would not run `Drop`.
static RUNNING: AtomicU32 = AtomicU32::new(0);

/// Kills the group of the extension under check, if there is one.
pub(super) fn kill_running() {
    let pid = RUNNING.swap(0, Ordering::SeqCst);
    if pid != 0 {
        signal_group(pid, libc::SIGKILL);
    }
}

pub(super) struct Child {
    /// Process id, also the process group id.
    pub pid: u32,
    child: std::process::Child,
    stdin: Option<Sender<Vec<u8>>>,
    pub seen: Receiver<Seen>,
}

impl Child {
    /// Starts `exe args` in `dir`, its stderr going to the file `log`.
    pub fn spawn(exe: &Path, args: &[String], dir: &Path, log: &Path) -> io::Result<Child> {
        let stderr = File::create(log).map_or_else(|_| Stdio::inherit(), Stdio::from);
        // Its own group, which dies with the check however the check
        // dies (even by SIGKILL), as extensions die with the host.
        let mut child = spawn_group(
            Command::new(exe)
                .args(args)
                .current_dir(dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(stderr),
        )?;
        let pipes = (child.stdin.take(), child.stdout.take());
        let (tx, seen) = crossbeam_channel::unbounded();
        let (to_stdin, outbox) = crossbeam_channel::unbounded::<Vec<u8>>();
        // From here on, dropping it (or a signal) kills the group.
        RUNNING.store(child.id(), Ordering::SeqCst);
        let checked = Child {
            pid: child.id(),
            child,
            stdin: Some(to_stdin),
            seen,
        };
        let (Some(mut stdin), Some(stdout)) = pipes else {
            return Err(io::Error::other("child pipes missing"));
        };
        let failed = tx.clone();
        thread::Builder::new()
            .name("zot-check-write".into())
            .spawn(move || {
                for chunk in outbox {
                    if let Err(e) = stdin.write_all(&chunk) {
                        let _ = failed.send(Seen::WriteFailed(e.to_string()));
                        return;
                    }
                }
            })?;
        thread::Builder::new()
            .name("zot-check-read".into())
            .spawn(move || read(stdout, &tx))?;
        Ok(checked)
    }

    /// Queues `line` for stdin; false once stdin is closed.
    pub fn send(&self, line: Vec<u8>) -> bool {
        self.stdin.as_ref().is_some_and(|s| s.send(line).is_ok())
    }

    /// Closes stdin once every queued line is written.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The exit status, once the process has exited (reaps it).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn signal_group(&self, signal: i32) {
        signal_group(self.pid, signal);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        RUNNING.store(0, Ordering::SeqCst);
        if group_alive(self.pid) {
            signal_group(self.pid, libc::SIGKILL);
            let _ = self.child.try_wait();
        }
        release_group(self.pid);
    }
}

fn read(stdout: ChildStdout, seen: &Sender<Seen>) {
    let mut lines = LineReader::new(BufReader::new(stdout), MAX_LINE);
    loop {
        let next = match lines.next_line() {
            Ok(Some(Line::Text(line))) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Some(Line::Text(line))) => match parse_ext_frame(&line) {
                Ok(frame) => Seen::Frame(frame),
                Err(why) => Seen::Dropped(why),
            },
            Ok(Some(Line::TooLong(len))) => Seen::Dropped(format!(
                "dropped a {len}-byte line: longer than {MAX_LINE} bytes"
            )),
            Ok(None) | Err(_) => break,
        };
        if seen.send(next).is_err() {
            return;
        }
    }
    let _ = seen.send(Seen::Eof);
}
