//! One extension process in its own process group, with the threads that
//! do its I/O, in the shape of lsp-server's `stdio.rs`. Each is named
//! after the extension, started with the process and joined when the
//! process is done with ([`ExtProcess::finish`], or its drop):
//!
//! - its reader (`zot-read-<name>`) reads stdout with blocking reads,
//!   holds each line to the 16 MiB limit, parses it into a frame (or
//!   keeps it as a line, [`Reading::Lines`]) and sends it on the
//!   extension's bounded channel, which the host loop selects on; the
//!   end of stdout is [`Inbound::Eof`], after which the thread ends;
//! - its writer (`zot-write-<name>`) takes whole lines from a channel
//!   and writes them to stdin, blocking while the extension does not
//!   read; a failed write is reported on the same bounded channel
//!   ([`Inbound::WriteFailed`]); once the channel closes so does stdin.
//!   Every line goes through it ([`ExtProcess::send`]);
//! - its stderr thread (`zot-err-<name>`) copies stderr into its log,
//!   which rotates as it grows (`src/log.rs`); without a log file stderr is
//!   the host's own and no thread is needed;
//! - its waiter (`zot-wait-<name>`) blocks until the process exits and
//!   sends [`Inbound::Exited`] on the same channel, so the loop learns of
//!   an exit as it learns of a frame, even while a grandchild holds
//!   stdout open; first it lets the stderr thread copy what the process
//!   left in the socket and end, so the log has the process's last
//!   stderr before the host's line about its exit. It does not reap the
//!   process (waitid(2) with `WNOWAIT`, in `sys.rs`): until the loop
//!   reaps it ([`ExtProcess::try_wait`], which then returns at once) its
//!   pid, also its group's id, cannot be reused, so signalling the group
//!   never reaches a stranger. It ends once it has sent that message
//!   (at once when something else reaped the process first).
//!
//! The three streams are socket pairs rather than pipes, and that is how
//! the threads are joined even when an escaped (`setsid`) grandchild
//! keeps the child's ends open: a pipe's reader blocked in read(2) wakes
//! only when every writer has closed, and only poll(2) or non-blocking
//! reads could make it let go earlier. A socket's blocked read or write
//! wakes when the host shuts the socket down from another thread
//! (shutdown(2)): reads then return what is already buffered and then
//! the end of the stream, a blocked write fails, and the grandchild's own
//! writes fail from then on. So the host keeps a handle on its end of
//! each socket, and dropping the process kills what is left of its group,
//! shuts the sockets down, closes its channels and joins the threads;
//! nothing waits for the grandchild and nothing leaks per reload. For the
//! extension a socket reads and writes like a pipe.
//!
//! The process and its group die with the host (`watchdog.rs`, or
//! `PR_SET_PDEATHSIG` for the process alone when the watchdog cannot
//! run, set in `sys.rs`).

// With the author tools but not the `confine` feature, a stand-in that
// refuses to confine (they ask for it by name); the minimal build has
// neither.
#[cfg(any(feature = "confine", feature = "author"))]
#[cfg_attr(not(feature = "confine"), path = "no_confine.rs")]
pub(crate) mod confine;
pub(crate) mod spawner;
pub(crate) mod watchdog;

use crate::log::ExtLog;
#[cfg(feature = "confine")]
use crate::process::confine::{Confinement, PrivateTmp};
use crate::sys;
use crate::wire::protocol::{
    dropped_frame, frame_head, read_ext_frame, ExtFrame, Filled, LineReader, MAX_LINE,
};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
#[cfg(feature = "mcp")]
use std::sync::{Condvar, Mutex};
use std::thread::{self, JoinHandle};

/// The room of the stdout line buffer kept from one line to the next.
const KEPT_LINE: usize = 64 * 1024;

/// Messages an extension's reader may send ahead of the loop: past
/// them it waits for the loop to take one, and the extension's writes
/// wait in the socket.
const INBOUND_BOUND: usize = 64;

/// The reader parses frames nested up to 64 levels: about 200 KiB of
/// stack in a debug build.
const READER_STACK: usize = 512 * 1024;

/// The writer and the stderr thread only copy bytes; the waiter only
/// waits and sends one message.
const COPIER_STACK: usize = 64 * 1024;

/// What an extension's reader, writer and waiter threads report to the
/// host loop.
// Nearly every message is a frame: boxing it would cost an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Inbound {
    Frame(ExtFrame),
    /// stdout reached end of file (or failed); no more frames come.
    Eof,
    /// Writing to stdin failed; the outbox is closed.
    WriteFailed(String),
    /// The process has exited, and is not reaped yet: [`ExtProcess::try_wait`]
    /// returns its status at once (or it was reaped already, by whoever
    /// holds its status). Frames it wrote before may still be in the socket.
    Exited,
    /// A stdout line as it came, when the process is read as [`Reading::Lines`].
    #[cfg(feature = "mcp")]
    Line(Vec<u8>),
    /// A line too long to keep ([`Reading::Lines`]): its length and first bytes.
    #[cfg(feature = "mcp")]
    LineTooLong {
        len: usize,
        head: Vec<u8>,
    },
}

/// How the reader hands over what the process writes to stdout.
#[derive(Clone, Copy)]
pub(crate) enum Reading {
    /// As zot frames (docs/PROTOCOL.md#wire-format).
    Frames,
    /// As lines, for the loop to make sense of; not read while more than
    /// `pause_over` bytes wait for its stdin (what it writes may want
    /// answers, which would wait without bound). Only MCP servers are
    /// read so; the minimal build reads every extension as frames.
    #[cfg(feature = "mcp")]
    Lines { pause_over: usize },
}

/// An [`Inbound`] tagged with the extension's key (unique across reloads).
#[derive(Debug)]
pub(crate) struct InboundMsg {
    pub key: u64,
    pub msg: Inbound,
}

/// Bytes queued for an extension's stdin: one or more whole lines.
pub(crate) type OutChunk = Vec<u8>;

/// A running extension process and its I/O threads. Dropping it (or
/// [`ExtProcess::finish`]) kills what is left of its group and joins
/// its threads.
pub(crate) struct ExtProcess {
    /// Process id, also the process group id.
    pub pid: u32,
    child: Child,
    /// Tags what it reads.
    key: u64,
    /// What its reader, writer and waiter send; `None` once all have ended.
    inbound: Option<Receiver<Inbound>>,
    /// Lines for its writer; `None` once stdin is to be closed.
    outbox: Option<Sender<OutChunk>>,
    /// Bytes handed to the writer and not yet written.
    backlog: Arc<Backlog>,
    /// The host's own handles on its end of stdin, stdout and stderr.
    ends: Option<Ends>,
    threads: Vec<JoinHandle<()>>,
    /// A confined extension's `TMPDIR`, removed once its group is killed.
    #[cfg(feature = "confine")]
    _tmp: Option<PrivateTmp>,
}

/// The host's own handles on its end of each socket, besides the
/// threads': shut down to wake the threads blocked on them, and, for
/// stdout, written to (no bytes) to learn whether anything still holds
/// the other end.
struct Ends {
    stdin: UnixStream,
    stdout: UnixStream,
    stderr: Option<UnixStream>,
}

/// The bytes waiting for an extension's stdin, which the writer counts
/// down as it writes. A reader of [`Reading::Lines`] waits on it while
/// they are over its limit.
#[derive(Default)]
struct Backlog {
    bytes: Arc<AtomicUsize>,
    /// True once the process is done with: a paused reader ends.
    #[cfg(feature = "mcp")]
    stopped: Mutex<bool>,
    /// Signalled after each write and at the stop.
    #[cfg(feature = "mcp")]
    drained: Condvar,
}

impl Backlog {
    /// `len` more bytes were written.
    fn written(&self, len: usize) {
        self.bytes.fetch_sub(len, Ordering::Release);
        #[cfg(feature = "mcp")]
        {
            let _stopped = self.lock();
            self.drained.notify_all();
        }
    }

    #[cfg(feature = "mcp")]
    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits while more than `limit` bytes wait; false once stopped.
    #[cfg(feature = "mcp")]
    fn wait_below(&self, limit: usize) -> bool {
        let mut stopped = self.lock();
        while !*stopped && self.bytes.load(Ordering::Relaxed) > limit {
            stopped = (self.drained.wait(stopped)).unwrap_or_else(PoisonError::into_inner);
        }
        !*stopped
    }

    #[cfg(feature = "mcp")]
    fn stop(&self) {
        *self.lock() = true;
        self.drained.notify_all();
    }
}

/// Everything needed to start one extension process: owned, so a
/// spawning thread of `spawner.rs` can take it.
pub(crate) struct Spawn {
    /// The extension's key (unique across reloads): tags its frames.
    pub key: u64,
    /// Its manifest's name, for its threads' names.
    pub name: String,
    /// `exec` resolved, and the manifest's `args`.
    pub exe: PathBuf,
    pub args: Vec<String>,
    /// Its directory: the child's working directory.
    pub dir: PathBuf,
    pub log: ExtLog,
    /// How its stdout is handed over.
    pub reading: Reading,
    /// Its ruleset and `TMPDIR` when it starts confined (docs/PROTOCOL.md#confinement).
    #[cfg(feature = "confine")]
    pub confine: Option<Confinement>,
}

impl ExtProcess {
    /// Starts the extension `s` as the leader of a new process group,
    /// with its reader, writer and stderr threads. Call it from a thread
    /// that outlives every extension it starts (see [`spawn_group`]),
    /// holding [`untold_groups`], and hand its pid to [`watch_groups`]
    /// before anything can end it: `spawner.rs` does. A confined one's
    /// `TMPDIR` lives as long as the process.
    pub(crate) fn spawn(s: Spawn) -> io::Result<ExtProcess> {
        let Spawn {
            key,
            name,
            exe,
            args,
            dir,
            log,
            reading,
            #[cfg(feature = "confine")]
            confine,
        } = s;
        let (stdin, child_stdin) = UnixStream::pair()?;
        let (stdout, child_stdout) = UnixStream::pair()?;
        let (stderr, child_stderr) = match log.has_file() {
            true => UnixStream::pair().map(|(ours, theirs)| (Some(ours), child_end(theirs)))?,
            false => (None, Stdio::inherit()),
        };
        let mut command = Command::new(&exe);
        command
            .args(&args)
            .current_dir(&dir)
            .stdin(child_end(child_stdin))
            .stdout(child_end(child_stdout))
            .stderr(child_stderr);
        #[cfg(feature = "confine")]
        if let Some(confine) = &confine {
            confine.apply_to(&mut command);
        }
        let started = start_group(&mut command);
        // The command holds the child's ends: closed here, so that only
        // the child (and what it starts) keeps them open.
        drop(command);
        let child = started.map_err(|e| explain_spawn_error(&exe, &dir, e))?;
        let (inbound_tx, inbound) = crossbeam_channel::bounded(INBOUND_BOUND);
        let (outbox, outbox_rx) = crossbeam_channel::unbounded();
        let io = Io {
            inbound: inbound_tx,
            outbox: outbox_rx,
            log,
            reading,
            backlog: Arc::default(),
        };
        let mut proc = ExtProcess {
            pid: child.id(),
            child,
            key,
            inbound: Some(inbound),
            outbox: Some(outbox),
            backlog: io.backlog.clone(),
            ends: None,
            threads: Vec::new(),
            #[cfg(feature = "confine")]
            _tmp: confine.map(|c| c.tmp),
        };
        let streams = (stdin, stdout, stderr);
        if let Err(e) = proc.start_threads(&name, streams, io) {
            // Reaped here; dropping it then joins the threads started.
            signal_group(proc.pid, libc::SIGKILL);
            let _ = proc.child.wait();
            return Err(e);
        }
        Ok(proc)
    }

    /// Starts the reader, the writer and (with a log file) the stderr
    /// thread on the host's ends of the three sockets, keeping a handle
    /// on each to shut it down, and the waiter.
    fn start_threads(
        &mut self,
        name: &str,
        (stdin, stdout, stderr): (UnixStream, UnixStream, Option<UnixStream>),
        io: Io,
    ) -> io::Result<()> {
        self.ends = Some(Ends {
            stdin: stdin.try_clone()?,
            stdout: stdout.try_clone()?,
            stderr: stderr.as_ref().map(UnixStream::try_clone).transpose()?,
        });
        let start = |role: &str, stack: usize, run: Box<dyn FnOnce() + Send>| {
            thread::Builder::new()
                .name(format!("zot-{role}-{name}"))
                .stack_size(stack)
                .spawn(run)
        };
        let Io {
            inbound,
            outbox,
            log,
            reading,
            backlog,
        } = io;
        let (log2, inbound2, backlog2) = (log.clone(), inbound.clone(), backlog.clone());
        let reader = move || read_stdout(stdout, reading, &log2, &inbound2, &backlog2);
        self.threads
            .push(start("read", READER_STACK, Box::new(reader))?);
        let (pid, inbound2) = (self.pid, inbound.clone());
        let writer = move || write_stdin(stdin, &outbox, &backlog, &inbound);
        self.threads
            .push(start("write", COPIER_STACK, Box::new(writer))?);
        // The waiter's handle on stderr, and the end of the stderr thread,
        // which it awaits: the copier's sender is dropped when it ends.
        let mut copied = None;
        if let Some(stderr) = stderr {
            let end = stderr.try_clone()?;
            let (done, ended) = crossbeam_channel::bounded::<()>(0);
            let copier = move || copy_stderr(stderr, &log, done);
            self.threads
                .push(start("err", COPIER_STACK, Box::new(copier))?);
            copied = Some((end, ended));
        }
        let waiter = move || wait_exit(pid, copied, &inbound2);
        self.threads
            .push(start("wait", COPIER_STACK, Box::new(waiter))?);
        Ok(())
    }

    /// Queues whole lines for the writer thread, which writes them to
    /// stdin in order. False when stdin is closed.
    pub(crate) fn send(&self, chunk: OutChunk) -> bool {
        let Some(outbox) = &self.outbox else {
            return false;
        };
        let len = chunk.len();
        self.backlog.bytes.fetch_add(len, Ordering::Relaxed);
        if outbox.send(chunk).is_err() {
            self.backlog.bytes.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The count of bytes queued but not yet written to stdin, as the
    /// writer thread updates it.
    pub(crate) fn backlog(&self) -> Arc<AtomicUsize> {
        self.backlog.bytes.clone()
    }

    /// Closes stdin once every queued line is written.
    pub(crate) fn close_stdin(&mut self) {
        self.outbox = None;
    }

    /// Where its reader, writer and waiter report, for the loop to select
    /// on; `None` once all have ended.
    pub(crate) fn inbound(&self) -> Option<&Receiver<Inbound>> {
        self.inbound.as_ref()
    }

    /// The next message its threads sent, if one waits, tagged with its
    /// key; once all of them have ended, the channel is let go of.
    pub(crate) fn take_inbound(&mut self) -> Option<InboundMsg> {
        match self.inbound.as_ref()?.try_recv() {
            Ok(msg) => Some(InboundMsg { key: self.key, msg }),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.inbound = None;
                None
            }
        }
    }

    /// Whether something may still write to its stdout (when its process
    /// has exited: a child it left, perhaps escaped). When nothing can,
    /// its reader meets the end of stdout after what is still buffered.
    /// A write of no bytes to the host's own end of the socket says it:
    /// it fails (EPIPE) once every process has closed the other end.
    pub(crate) fn stdout_held(&self) -> bool {
        let Some(ends) = &self.ends else {
            return true;
        };
        (&ends.stdout).write(&[]).is_ok()
    }

    /// The exit status, once the process has exited (reaps it; after its
    /// [`Inbound::Exited`] this does not wait).
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub(crate) fn signal_group(&self, signal: i32) {
        signal_group(self.pid, signal);
    }

    /// Kills what is left of its group and joins its threads, once they
    /// have copied what its stderr still held into the log (the log is
    /// complete for whoever reads it next).
    pub(crate) fn finish(self) {
        drop(self)
    }
}

impl Drop for ExtProcess {
    /// Kills what is left of the group, then wakes and joins the threads:
    /// the sockets shut down (a grandchild holding them open must not
    /// keep them), the outbox and the inbound channel closed, a paused
    /// reader stopped, and the waiter back once the killed leader is
    /// gone; then reaps the leader if that was not done yet.
    fn drop(&mut self) {
        end_group(&mut self.child);
        // The leader too, should it have left its group: the waiter is
        // joined below. Its pid is still its own (not reaped), and std
        // sends nothing to a child it reaped.
        let _ = self.child.kill();
        self.outbox = None;
        self.inbound = None;
        #[cfg(feature = "mcp")]
        self.backlog.stop();
        if let Some(ends) = self.ends.take() {
            for end in [Some(ends.stdin), Some(ends.stdout), ends.stderr]
                .into_iter()
                .flatten()
            {
                let _ = end.shutdown(Shutdown::Both);
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        // The waiter returned: the leader has exited, this does not wait.
        let _ = self.child.try_wait();
    }
}

/// What the I/O threads are handed.
struct Io {
    inbound: Sender<Inbound>,
    outbox: Receiver<OutChunk>,
    log: ExtLog,
    reading: Reading,
    backlog: Arc<Backlog>,
}

/// The child's end of a socket pair, as its stdin, stdout or stderr.
fn child_end(end: UnixStream) -> Stdio {
    Stdio::from(OwnedFd::from(end))
}

/// The reader thread: stdout's lines, as frames or lines, to the loop;
/// then [`Inbound::Eof`]. Ends early once the loop has let go of the
/// channel (the process is done with).
// Only an MCP server's reader waits on `backlog`.
#[cfg_attr(not(feature = "mcp"), allow(unused_variables))]
fn read_stdout(
    stdout: UnixStream,
    reading: Reading,
    log: &ExtLog,
    inbound: &Sender<Inbound>,
    backlog: &Backlog,
) {
    #[cfg(feature = "mcp")]
    let mut paused = false;
    let dropped = |why: String, len: usize, head: &[u8]| {
        log.line(&why);
        let msg = match reading {
            #[cfg(feature = "mcp")]
            Reading::Lines { .. } => Some(Inbound::LineTooLong {
                len,
                head: head.to_vec(),
            }),
            Reading::Frames => unreadable(
                head,
                format!(
                    "was {len} bytes, over the {} MiB frame limit",
                    MAX_LINE >> 20
                ),
            ),
        };
        if let Some(msg) = msg {
            let _ = inbound.send(msg);
        }
    };
    let handle = |line: &[u8]| {
        let msg = match reading {
            Reading::Frames => match read_ext_frame(line) {
                Ok(frame) => Inbound::Frame(frame),
                Err(reason) => {
                    log.line(&dropped_frame(&reason, line));
                    let why = format!("could not be read ({reason})");
                    let Some(msg) = unreadable(line, why) else {
                        return true;
                    };
                    msg
                }
            },
            #[cfg(feature = "mcp")]
            Reading::Lines { .. } => Inbound::Line(line.to_vec()),
        };
        if inbound.send(msg).is_err() {
            return false;
        }
        #[cfg(feature = "mcp")]
        if let Reading::Lines { pause_over } = reading {
            if backlog.bytes.load(Ordering::Relaxed) > pause_over {
                if !std::mem::replace(&mut paused, true) {
                    let limit = pause_over >> 20;
                    log.line(&format!("not reading its stdin: its stdout is not read while more than {limit} MiB wait for it"));
                }
                return backlog.wait_below(pause_over);
            }
        }
        true
    };
    if let Err(e) = read_lines(stdout, dropped, handle) {
        log.line(&format!("reading stdout failed: {e}"));
    }
    let _ = inbound.send(Inbound::Eof);
}

/// A frame that could not be read, for the loop when its start (`head`)
/// names its type and id (see `frame_head`): the request it answers, or
/// the handshake for a `hello`, fails at once, `why`.
fn unreadable(head: &[u8], why: String) -> Option<Inbound> {
    let (kind, id) = frame_head(head)?;
    Some(Inbound::Frame(ExtFrame::Unreadable { kind, id, why }))
}

/// The writer thread. Chunks come batched by the host loop: one write
/// each, no buffer. A closed outbox closes stdin (shut down, as the host
/// holds another handle on it); a failed write ends the thread.
fn write_stdin(
    mut stdin: UnixStream,
    outbox: &Receiver<OutChunk>,
    backlog: &Backlog,
    inbound: &Sender<Inbound>,
) {
    for chunk in outbox {
        let written = stdin.write_all(&chunk);
        backlog.written(chunk.len());
        if let Err(e) = written {
            let _ = inbound.send(Inbound::WriteFailed(e.to_string()));
            return;
        }
    }
    let _ = stdin.shutdown(Shutdown::Write);
}

/// The waiter thread: waits for the exit of process `pid`, leaving it
/// unreaped, and says so. Ends without waiting when the process was
/// reaped already (`ECHILD`): whoever reaped it has its status, and the
/// message tells the loop to ask. No message goes once the loop has let
/// go of the channel (the process is done with).
///
/// With a stderr thread (`copied`: the host's end of stderr, and a
/// channel that disconnects when that thread ends), the message waits
/// until what the process wrote to stderr is in its log, so the host's
/// line about its exit comes after it: the end is shut down for reading
/// (the thread copies what the socket still buffers, then meets the end
/// of the stream; a child left behind can write there no more) and the
/// thread's end awaited, which the socket's bounded buffer bounds.
fn wait_exit(pid: u32, copied: Option<(UnixStream, Receiver<()>)>, inbound: &Sender<Inbound>) {
    // waitid(2) fails otherwise only for arguments that are never given.
    let _ = sys::wait_exited(pid);
    if let Some((end, ended)) = copied {
        let _ = end.shutdown(Shutdown::Read);
        let _ = ended.recv();
    }
    let _ = inbound.send(Inbound::Exited);
}

/// The stderr thread: copies what comes into the log until the end of
/// the stream, or until the host shuts the socket down and what it
/// still buffered is copied. `_done` is dropped when it ends.
fn copy_stderr(mut stderr: UnixStream, log: &ExtLog, _done: Sender<()>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => log.append(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Spawns `command` as the leader of a new process group that dies with
/// this process however it dies; [`end_group`] ends it. The watchdog
/// covers the whole group. Only without it is `PR_SET_PDEATHSIG` set: that
/// takes a pre-exec hook, so std forks the whole host instead of using
/// posix_spawn, which makes starting many extensions slower on a busy
/// machine. Linux sends that signal when the *thread* that
/// forked ends, so spawn from a thread that outlives the child.
pub fn spawn_group(command: &mut Command) -> io::Result<Child> {
    let _untold = untold_groups();
    let child = start_group(command)?;
    watch_groups([child.id()]);
    Ok(child)
}

/// Read-held from the first start of a spawn or a batch until the
/// watchdog has been told its groups (several hosts' batches at once),
/// so that [`exit`], which write-locks it, never ends the process in
/// between (an extension that ignores its stdin closing would outlive
/// it). Only a SIGKILL can still land there.
static UNTOLD: RwLock<()> = RwLock::new(());

/// Holds off [`exit`] until the guard is dropped: take it before the
/// first start of a batch, drop it after [`watch_groups`].
pub(crate) fn untold_groups() -> RwLockReadGuard<'static, ()> {
    UNTOLD.read().unwrap_or_else(PoisonError::into_inner)
}

/// Ends this process with `code` once every group started so far is
/// known to the watchdog: the exit of a signal handler, which may run
/// while a spawn or a batch is under way on another thread.
pub fn exit(code: i32) -> ! {
    let _told = UNTOLD.write().unwrap_or_else(PoisonError::into_inner);
    std::process::exit(code)
}

/// [`spawn_group`] without telling the watchdog: the caller holds
/// [`untold_groups`] and hands the group to [`watch_groups`], a batch of
/// starts at once, before anything can end it.
fn start_group(command: &mut Command) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    #[cfg(target_os = "linux")]
    if !watchdog::running() {
        sys::before_exec(command, Some(std::process::id()), None);
    }
    command.spawn()
}

/// Has the watchdog kill the groups led by `pids` if the host dies.
pub(crate) fn watch_groups(pids: impl IntoIterator<Item = u32>) {
    watchdog::tell('+', pids);
}

/// Ends a group started by [`spawn_group`]: SIGKILLs what is left of
/// it, reaps the leader if it can, and has the watchdog forget it.
pub fn end_group(leader: &mut Child) {
    let pgid = leader.id();
    if group_alive(pgid) {
        signal_group(pgid, libc::SIGKILL);
        let _ = leader.try_wait();
    }
    watchdog::tell('-', [pgid]);
}

/// exec(2)'s error in words: its errno is about the file even when the
/// trouble is the `#!` interpreter (ENOENT) or the file's kind (EACCES).
fn explain_spawn_error(exe: &Path, dir: &Path, e: io::Error) -> io::Error {
    use std::os::unix::fs::PermissionsExt;
    // The child runs in `dir`: a relative path is looked up from there.
    let seen = dir.join(exe);
    let Ok(meta) = std::fs::metadata(&seen) else {
        if exe.is_relative() && dir.is_dir() {
            let why = format!(
                "a relative path, and the extension runs in its directory {}, \
                 which holds no such file",
                dir.display()
            );
            return io::Error::new(e.kind(), why);
        }
        return e;
    };
    let why = match e.kind() {
        io::ErrorKind::NotFound if dir.is_dir() => match starts_with_shebang(&seen) {
            true => "the interpreter on its #! line was not found",
            // An ELF file names its dynamic loader: built for another libc?
            false => "its dynamic loader was not found (built for another system?)",
        },
        io::ErrorKind::PermissionDenied if meta.is_dir() => "it is a directory",
        io::ErrorKind::PermissionDenied if meta.permissions().mode() & 0o111 == 0 => {
            "it is not executable"
        }
        _ => return e,
    };
    io::Error::new(e.kind(), why)
}

fn starts_with_shebang(exe: &Path) -> bool {
    let mut start = [0u8; 2];
    let read = File::open(exe).and_then(|mut f| f.read_exact(&mut start));
    read.is_ok() && start == *b"#!"
}

/// Hands each non-blank stdout line to `handle` until it returns false
/// or stdout ends; a line too long to keep is skipped and described to
/// `dropped`, with its length and its first bytes. `zot ext check`
/// reads stdout with it too.
pub fn read_lines(
    stdout: impl Read,
    mut dropped: impl FnMut(String, usize, &[u8]),
    mut handle: impl FnMut(&[u8]) -> bool,
) -> io::Result<()> {
    let mut lines = LineReader::new(BufReader::with_capacity(8 * 1024, stdout), MAX_LINE);
    // One buffer for every line; a long one's room is not kept.
    let mut line = Vec::new();
    loop {
        if line.capacity() > KEPT_LINE {
            line = Vec::new();
        }
        match lines.read_into(&mut line)? {
            Some(Filled::Line) if line.iter().all(u8::is_ascii_whitespace) => {}
            Some(Filled::Line) if !handle(&line) => return Ok(()),
            Some(Filled::Line) => {}
            Some(Filled::TooLong(len)) => dropped(
                format!("dropped a {len}-byte line: longer than {MAX_LINE} bytes"),
                len,
                lines.discarded_head(),
            ),
            None => return Ok(()),
        }
    }
}

/// Sends `signal` to the process group led by `pid`.
pub fn signal_group(pid: u32, signal: i32) {
    sys::kill_group(pid, signal);
}

/// Whether any process of the group led by `pid` is still alive.
pub fn group_alive(pid: u32) -> bool {
    sys::kill_group(pid, 0)
}

/// `exit code 3`, `signal 9`: how an extension ended.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => status.to_string(),
    }
}
