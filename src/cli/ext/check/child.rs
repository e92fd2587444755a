//! The extension under check, started the way the host starts it: in a
//! process group of its own, stdout read with the host's line reader
//! (`process::read_lines`) and frame parser, stderr into its log. A
//! reader and a writer thread keep the check from blocking on a stuck
//! pipe; the group is killed when the check is done with it, or dies
//! with the check (`process::spawn_group`), so nothing it started is left.

use crossbeam_channel::{Receiver, Sender};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::thread;
use zot_host::internal::confine::Confinement;
use zot_host::internal::process::{end_group, read_lines, signal_group, spawn_group};
use zot_host::internal::protocol::{frame_head, parse_ext_frame, ExtFrame};

/// What the reader and writer threads saw. Nearly always a frame, so
/// boxing it would only add an allocation per frame.
#[allow(clippy::large_enum_variant)]
pub(super) enum Seen {
    Frame(ExtFrame),
    /// A stdout line that is not a frame, and why; true when its start
    /// says it is a `hello` (the host fails the handshake on it).
    Dropped(String, bool),
    /// stdout ended.
    Eof,
    WriteFailed(String),
}

pub(super) struct Child {
    /// Process id, also the process group id.
    pub pid: u32,
    child: std::process::Child,
    stdin: Option<Sender<Vec<u8>>>,
    pub seen: Receiver<Seen>,
}

impl Child {
    /// Starts `exe args` in `dir`, its stderr going to the file `log`;
    /// confined by `confine` when given (docs/PROTOCOL.md#confinement).
    pub fn spawn(
        exe: &Path,
        args: &[String],
        dir: &Path,
        log: &Path,
        confine: Option<&Confinement>,
    ) -> io::Result<Child> {
        let stderr = File::create(log).map_or_else(|_| Stdio::inherit(), Stdio::from);
        let mut command = Command::new(exe);
        command
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        if let Some(confine) = confine {
            confine.apply_to(&mut command);
        }
        // Its own group, which dies with the check however the check
        // dies (even by SIGKILL), as extensions die with the host.
        let mut child = spawn_group(&mut command)?;
        let pipes = (child.stdin.take(), child.stdout.take());
        let (tx, seen) = crossbeam_channel::unbounded();
        let (to_stdin, outbox) = crossbeam_channel::unbounded::<Vec<u8>>();
        // From here on, dropping it kills the group.
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
        end_group(&mut self.child);
    }
}

/// Whether a line the host cannot read starts like a `hello`.
fn hello(head: &[u8]) -> bool {
    frame_head(head).is_some_and(|(kind, _)| kind == "hello")
}

fn read(stdout: ChildStdout, seen: &Sender<Seen>) {
    let _ = read_lines(
        stdout,
        |m, _, head| {
            let _ = seen.send(Seen::Dropped(m, hello(head)));
        },
        |line| {
            let next = match parse_ext_frame(line) {
                Ok(frame) => Seen::Frame(frame),
                Err(why) => Seen::Dropped(why, hello(line)),
            };
            seen.send(next).is_ok()
        },
    );
    let _ = seen.send(Seen::Eof);
}
