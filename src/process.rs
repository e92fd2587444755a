//! One extension process in its own process group. Its stdout is read
//! by the thread that runs the loop, when poll(2) says it has something
//! (non-blocking, so a read never waits), and parsed there; its stdin is
//! written there too while the pipe has room. What would make the loop
//! wait is done elsewhere: its stderr goes to its rotating log through
//! the host's one log thread (`logpump.rs`), and a named writer thread
//! takes its outbox to stdin (started only when the loop's direct write
//! finds the pipe full).
//!
//! Why the loop reads stdout itself: a reader thread between the pipe and
//! the loop is one more thread woken per frame. Pinned to one CPU a call
//! then crossed caller -> extension -> reader -> caller, 3.6-3.8 context
//! switches with wake-up preemption; read by the caller it is caller ->
//! extension -> caller, as with a bare pipe. Nothing reads stdout while
//! no thread runs the loop: the extension's writes wait in the pipe (and
//! then it waits in its write) until one does.
//!
//! The process and its group die with the host (`watchdog.rs`, or
//! `PR_SET_PDEATHSIG` for the process alone when the watchdog cannot
//! run). The writer and the log thread wait on its pipe and on its stop
//! socket at once, so they let go of it when the process is done with
//! even if an escaped (`setsid`) grandchild keeps the pipes open:
//! nothing leaks per reload.

use crate::confine::{Confinement, PrivateTmp};
use crate::doorbell::BellSender;
use crate::log::ExtLog;
use crate::logpump::{Pipe, Pumping};
use crate::protocol::{frame_head, parse_ext_frame, ExtFrame, Filled, LineReader, MAX_LINE};
use crate::watchdog;
use crossbeam_channel::{Receiver, SendTimeoutError, Sender};
use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::thread;
use std::time::Duration;

/// Longest wait for the log thread to copy what is left of stderr (this
/// long only on a CPU-starved machine).
const LOG_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// The room of the stdout line buffer kept from one line to the next.
const KEPT_LINE: usize = 64 * 1024;

/// Most stdout lines read in one go: the loop then looks at the rest of
/// its inputs before it reads on.
const LINES_PER_READ: usize = 256;

/// What an extension's stdout and its writer thread report to the host loop.
// Nearly every message is a frame: boxing it would cost an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Inbound {
    Frame(ExtFrame),
    /// stdout reached end of file (or failed); no more frames come.
    Eof,
    /// Writing to stdin failed; the outbox is closed.
    WriteFailed(String),
    /// A stdout line as it came, when the process is read as [`Reading::Lines`].
    Line(Vec<u8>),
    /// A line too long to keep ([`Reading::Lines`]): its length and first bytes.
    LineTooLong {
        len: usize,
        head: Vec<u8>,
    },
}

/// How the loop takes what the process writes to stdout.
#[derive(Clone, Copy)]
pub(crate) enum Reading {
    /// As zot frames (SPEC 2).
    Frames,
    /// As lines, for the loop to make sense of; not read while more than
    /// `pause_over` bytes wait for its stdin (what it writes may want
    /// answers, which would wait without bound). The minimal build
    /// reads every extension as frames.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    Lines { pause_over: usize },
}

impl Reading {
    /// A line-read process's pause limit, when more than it waits for
    /// its stdin (`unwritten` bytes): its stdout is not read meanwhile.
    fn over_pause(self, unwritten: &AtomicUsize) -> Option<usize> {
        match self {
            Reading::Lines { pause_over } if unwritten.load(Ordering::Relaxed) > pause_over => {
                Some(pause_over)
            }
            _ => None,
        }
    }
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
/// [`ExtProcess::finish`]) kills what is left of its group, once.
///
/// Single writer: only the loop's driver (`engine/driver.rs`), which owns
/// it, calls `send`. The
/// direct write is in order only because nobody else can write between
/// its check that nothing is queued and the write itself. It pays: without
/// it `make bench` measured 25 instead of 16 us per call, and 27
/// instead of 17 us of CPU.
pub(crate) struct ExtProcess {
    /// Process id, also the process group id.
    pub pid: u32,
    child: Child,
    outbox: Option<Sender<OutChunk>>,
    /// stdin, written directly while the writer thread is idle.
    direct: Option<File>,
    /// Bytes handed to the writer thread and not yet written.
    queued: Arc<AtomicUsize>,
    /// Dropping it tells the writer thread to end and the log thread to
    /// let go of its stderr.
    stop: Option<UnixStream>,
    /// Disconnects when the log thread is done with its stderr.
    log_done: Option<Receiver<()>>,
    /// Tags what it reads.
    key: u64,
    /// Read by the loop (`None` only while it starts).
    stdout: Option<Stdout>,
    reading: Reading,
    log: ExtLog,
    /// Starts the writer thread at the first write the pipe refuses:
    /// most extensions never fill it.
    writer: Cell<Option<Box<dyn FnOnce() + Send>>>,
    /// A confined extension's `TMPDIR`, removed once its group is killed.
    _tmp: Option<PrivateTmp>,
}

/// What the I/O threads share: where they report, and the stop socket.
#[derive(Clone)]
struct Io {
    key: u64,
    log: ExtLog,
    inbound: BellSender<InboundMsg>,
    stop: Arc<UnixStream>,
}

/// Stdout's read end, non-blocking, with the line read so far.
struct Stdout {
    lines: LineReader<BufReader<File>>,
    line: Vec<u8>,
    /// End of file came, or a read failed: no more frames.
    ended: bool,
    /// A line-read process's pause was written to its log.
    pause_logged: bool,
}

impl Stdout {
    fn fd(&self) -> RawFd {
        self.lines.get_ref().get_ref().as_raw_fd()
    }
}

/// Whether the loop waits for an extension's stdout.
pub(crate) enum Watch {
    /// For this descriptor to be readable.
    Fd(RawFd),
    /// Not now: too much waits for its stdin ([`Reading::Lines`]); the
    /// loop looks again soon.
    Paused,
    /// No more: it ended.
    Ended,
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
    pub inbound: BellSender<InboundMsg>,
    /// How its stdout is handed over.
    pub reading: Reading,
    /// Its ruleset and `TMPDIR` when it starts confined (SPEC 16).
    pub confine: Option<Confinement>,
}

impl ExtProcess {
    /// Starts the extension `s` as the leader of a new process group, its
    /// stdout read as `s.reading` says, its stderr copied to its log by
    /// `logs` (without one, it is the host's stderr). Call it from a
    /// thread that outlives every extension it starts (see
    /// [`spawn_group`]), holding [`untold_groups`], and hand its pid to
    /// [`watch_groups`] before anything can end it: `spawner.rs` does.
    /// A confined one's `TMPDIR` lives as long as the process.
    pub(crate) fn spawn(s: Spawn, logs: Option<&Pumping>) -> io::Result<ExtProcess> {
        let Spawn {
            key,
            name,
            exe,
            args,
            dir,
            log,
            inbound,
            reading,
            confine,
        } = s;
        let mut command = Command::new(&exe);
        command
            .args(&args)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match logs {
                Some(_) => log.child_stderr(),
                None => Stdio::inherit(),
            });
        if let Some(confine) = &confine {
            confine.apply_to(&mut command);
        }
        let child = start_group(&mut command).map_err(|e| explain_spawn_error(&exe, &dir, e))?;
        let mut proc = ExtProcess {
            pid: child.id(),
            child,
            outbox: None,
            direct: None,
            queued: Arc::new(AtomicUsize::new(0)),
            stop: None,
            log_done: None,
            key,
            stdout: None,
            reading,
            log,
            writer: Cell::new(None),
            _tmp: confine.map(|c| c.tmp),
        };
        if let Err(e) = proc.start_io(&name, inbound, logs) {
            // Reaped here; dropping it then ends what is left of the group.
            let _ = proc.child.kill();
            let _ = proc.child.wait();
            return Err(e);
        }
        Ok(proc)
    }

    fn start_io(
        &mut self,
        name: &str,
        inbound: BellSender<InboundMsg>,
        logs: Option<&Pumping>,
    ) -> io::Result<()> {
        let pipes = (self.child.stdin.take(), self.child.stdout.take());
        let (Some(stdin), Some(stdout)) = pipes else {
            return Err(io::Error::other("child pipes missing"));
        };
        let stdout = File::from(OwnedFd::from(stdout));
        // The loop reads it when poll(2) says so; a read must never wait.
        if !set_nonblocking(stdout.as_raw_fd()) {
            return Err(io::Error::other("cannot make its stdout non-blocking"));
        }
        self.stdout = Some(Stdout {
            lines: LineReader::new(BufReader::with_capacity(8 * 1024, stdout), MAX_LINE),
            line: Vec::new(),
            ended: false,
            pause_logged: false,
        });
        let (stop, stop_rx) = UnixStream::pair()?;
        self.stop = Some(stop);
        let (tx, rx) = crossbeam_channel::unbounded();
        self.outbox = Some(tx.clone());
        let stdin = File::from(OwnedFd::from(stdin));
        // Non-blocking, so a full pipe pins neither the writer thread past
        // the stop nor the loop; if that fails, the loop never writes.
        let nonblocking = set_nonblocking(stdin.as_raw_fd());
        let io = Io {
            key: self.key,
            log: self.log.clone(),
            inbound,
            stop: Arc::new(stop_rx),
        };
        if nonblocking {
            self.direct = stdin.try_clone().ok();
        }
        let queued = self.queued.clone();
        if let (Some(stderr), Some(logs)) = (self.child.stderr.take(), logs) {
            let (done, log_done) = crossbeam_channel::bounded::<()>(0);
            self.log_done = Some(log_done);
            logs.add(Pipe {
                stderr,
                log: self.log.clone(),
                stop: io.stop.clone(),
                _done: done,
            })?;
        }
        let name = name.to_owned();
        let writer = move || {
            let run = move |io: &Io| write_lines(io, stdin, rx, &queued);
            if let Err(e) = io.start("write", &name, 64 * 1024, run) {
                // Like an extension that stops reading: bounded by the
                // loop's backlog limits.
                io.log.line(&format!("cannot start the writer thread: {e}"));
            }
        };
        self.writer.set(Some(Box::new(writer)));
        Ok(())
    }

    /// Writes whole lines to stdin: directly when the pipe has room and
    /// nothing is queued, the rest through the writer thread. Never
    /// blocks. False when stdin is closed.
    pub(crate) fn send(&self, mut chunk: OutChunk) -> bool {
        let Some(outbox) = &self.outbox else {
            return false;
        };
        // Acquire pairs with the writer's Release: zero means every
        // earlier byte is in the pipe, so writing now keeps the order.
        if let (Some(direct), 0) = (&self.direct, self.queued.load(Ordering::Acquire)) {
            let written = write_some(direct, &chunk).unwrap_or(0);
            if written == chunk.len() {
                return true;
            }
            chunk.drain(..written);
        }
        let len = chunk.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if outbox.send(chunk).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        if let Some(start) = self.writer.take() {
            start();
        }
        true
    }

    /// The count of bytes queued but not yet written to stdin, as the
    /// writer thread updates it.
    pub(crate) fn backlog(&self) -> Arc<AtomicUsize> {
        self.queued.clone()
    }

    /// Closes stdin once every queued line is written.
    pub(crate) fn close_stdin(&mut self) {
        self.outbox = None;
        self.direct = None;
        self.writer = Cell::new(None); // never started: nothing is queued
    }

    /// Whether something may still write to its stdout (when it has
    /// exited: a grandchild, perhaps escaped). When nothing can, the end
    /// of file follows whatever the pipe still holds.
    pub(crate) fn stdout_held(&self) -> bool {
        let Some(stdout) = &self.stdout else {
            return true;
        };
        let mut fds = [pollfd(stdout.fd(), 0)];
        !poll(&mut fds, 0) || fds[0].revents & libc::POLLHUP == 0
    }

    /// Whether, and for what, the loop waits on its stdout. A line-read
    /// process is not read while more than `pause_over` bytes wait for
    /// its stdin: what it writes may want answers, which would wait
    /// without bound.
    pub(crate) fn stdout_watch(&mut self) -> Watch {
        let Some(stdout) = self.stdout.as_mut().filter(|s| !s.ended) else {
            return Watch::Ended;
        };
        if let Some(pause_over) = self.reading.over_pause(&self.queued) {
            if !std::mem::replace(&mut stdout.pause_logged, true) {
                let limit = pause_over >> 20;
                self.log.line(&format!("not reading its stdin: its stdout is not read while more than {limit} MiB wait for it"));
            }
            return Watch::Paused;
        }
        Watch::Fd(stdout.fd())
    }

    /// Whether lines read from stdout wait in its buffer (the last read
    /// stopped at [`LINES_PER_READ`]): the loop must not sleep on them.
    pub(crate) fn stdout_buffered(&self) -> bool {
        (self.stdout.as_ref()).is_some_and(|s| !s.ended && s.lines.buffered() > 0)
    }

    /// Reads what its stdout holds now, without waiting: frames or lines
    /// (as [`Reading`] says), then [`Inbound::Eof`] at its end, into `out`.
    /// Call it when poll(2) found it readable or [`Self::stdout_buffered`].
    pub(crate) fn read_stdout(&mut self, out: &mut Vec<InboundMsg>) {
        let (key, reading, log) = (self.key, self.reading, &self.log);
        let Some(s) = self.stdout.as_mut().filter(|s| !s.ended) else {
            return;
        };
        let mut push = |msg| out.push(InboundMsg { key, msg });
        for _ in 0..LINES_PER_READ {
            match s.lines.read_into(&mut s.line) {
                Ok(Some(Filled::Line)) => {
                    let line = &s.line;
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        match reading {
                            Reading::Frames => match parse_ext_frame(line) {
                                Ok(frame) => push(Inbound::Frame(frame)),
                                Err(why) => log.line(&why),
                            },
                            Reading::Lines { .. } => push(Inbound::Line(line.to_vec())),
                        }
                    }
                    // One buffer for every line; a long one's room is not kept.
                    if s.line.capacity() > KEPT_LINE {
                        s.line = Vec::new();
                    }
                    if reading.over_pause(&self.queued).is_some() {
                        return;
                    }
                }
                // A frame too long to read: the request it answers fails at once.
                Ok(Some(Filled::TooLong(len))) => {
                    log.line(&format!(
                        "dropped a {len}-byte line: longer than {MAX_LINE} bytes"
                    ));
                    let head = s.lines.discarded_head();
                    match reading {
                        Reading::Lines { .. } => push(Inbound::LineTooLong {
                            len,
                            head: head.to_vec(),
                        }),
                        Reading::Frames => {
                            if let Some((kind, id)) = frame_head(head) {
                                push(Inbound::Frame(ExtFrame::TooLong { kind, id, len }));
                            }
                        }
                    }
                }
                Ok(None) => {
                    s.ended = true;
                    push(Inbound::Eof);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log.line(&format!("reading stdout failed: {e}"));
                    s.ended = true;
                    push(Inbound::Eof);
                    return;
                }
            }
            // What is left waits in the pipe, and poll(2) says so: no
            // read just to be told it would block.
            if s.lines.buffered() == 0 {
                return;
            }
        }
    }

    /// The exit status, once the process has exited (reaps it).
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub(crate) fn signal_group(&self, signal: i32) {
        signal_group(self.pid, signal);
    }

    /// Drops it, then gives the log thread a bounded moment to copy what is
    /// left of stderr, so the log is complete for whoever reads it next.
    pub(crate) fn finish(mut self) {
        let log_done = self.log_done.take();
        drop(self);
        if let Some(done) = log_done {
            let _ = done.recv_timeout(LOG_FLUSH_WAIT);
        }
    }
}

impl Drop for ExtProcess {
    /// Kills what is left of the group and stops the I/O threads (a pipe
    /// held open by an escaped grandchild must not keep them).
    fn drop(&mut self) {
        end_group(&mut self.child);
        self.close_stdin();
        self.stop = None;
    }
}

impl Io {
    /// Runs `run` on a named thread of its own.
    fn start(
        &self,
        role: &str,
        name: &str,
        stack: usize,
        run: impl FnOnce(&Io) + Send + 'static,
    ) -> io::Result<()> {
        let io = self.clone();
        let builder = thread::Builder::new().name(format!("zot-{role}-{name}"));
        builder.stack_size(stack).spawn(move || run(&io)).map(drop)
    }

    /// Hands `msg` to the loop. While the loop's channel is full it looks
    /// at the stop now and then: a process done with (whose frames the
    /// loop drops) must not keep its writer thread, nor `finish`, waiting.
    fn report(&self, msg: Inbound) -> bool {
        let mut msg = InboundMsg { key: self.key, msg };
        loop {
            match self.inbound.send_timeout(msg, Duration::from_millis(10)) {
                Ok(()) => return true,
                Err(SendTimeoutError::Timeout(m)) => msg = m,
                Err(SendTimeoutError::Disconnected(_)) => return false,
            }
            if self.stopped(-1, 0, false) {
                return false;
            }
        }
    }

    /// Waits until `fd` (-1: none) is ready for `events` (or has an error
    /// to report), or the stop socket is closed: whether it was stopped.
    /// Without waiting when `block` is false.
    fn stopped(&self, fd: RawFd, events: i16, block: bool) -> bool {
        let stop = self.stop.as_raw_fd();
        let mut fds = [pollfd(fd, events), pollfd(stop, libc::POLLIN)];
        // A failed poll: let the read or write itself meet the problem.
        poll(&mut fds, if block { -1 } else { 0 }) && fds[1].revents != 0
    }
}

pub(crate) fn pollfd(fd: RawFd, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// poll(2) on `fds`, waiting up to `timeout_ms` (-1: for ever), again
/// when interrupted; false when it failed.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> bool {
    let len = fds.len() as libc::nfds_t;
    // SAFETY: `fds` is a live slice of `len` pollfd structs for the call;
    // poll(2) skips negative fds. std cannot wait on several descriptors
    // at once (a pipe and the stop socket).
    while unsafe { libc::poll(fds.as_mut_ptr(), len, timeout_ms) } < 0 {
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
    true
}

/// Spawns `command` as the leader of a new process group that dies with
/// this process however it dies; [`end_group`] ends it. The watchdog
/// covers the whole group. Only without it is `PR_SET_PDEATHSIG` set: that
/// takes a pre-exec hook, so std forks the whole host instead of using
/// posix_spawn, which made starting 20 extensions several times slower
/// on a busy machine. Linux sends that signal when the *thread* that
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
    command.process_group(0);
    #[cfg(target_os = "linux")]
    if !watchdog::running() {
        let host = std::process::id();
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
                // The host died between fork and prctl: the signal will
                // never come.
                if std::os::unix::process::parent_id() != host {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
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

/// The writer thread. Chunks come batched by the host loop: one write
/// each, no buffer. A closed outbox closes stdin; a stop ends the thread.
fn write_lines(io: &Io, stdin: File, outbox: Receiver<OutChunk>, queued: &AtomicUsize) {
    for chunk in outbox {
        let mut written = 0;
        let failed = loop {
            match write_some(&stdin, &chunk[written..]) {
                Ok(n) => written += n,
                Err(e) => break Some(e),
            }
            // Done, or stopped: the process is done with.
            if written == chunk.len() || io.stopped(stdin.as_raw_fd(), libc::POLLOUT, true) {
                break None;
            }
        };
        queued.fetch_sub(chunk.len(), Ordering::Release);
        if let Some(e) = failed {
            io.report(Inbound::WriteFailed(e.to_string()));
        }
        if written < chunk.len() {
            return;
        }
    }
}

fn set_nonblocking(fd: RawFd) -> bool {
    // SAFETY: fcntl(2) on a descriptor we own, with integer arguments;
    // std can make a socket non-blocking, not a pipe.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0
    }
}

/// Writes as much of `bytes` as a non-blocking `pipe` takes now; an error
/// after some bytes is left for the next write.
fn write_some(mut pipe: impl Write, bytes: &[u8]) -> io::Result<usize> {
    let mut written = 0;
    while written < bytes.len() {
        match pipe.write(&bytes[written..]) {
            Ok(0) if written == 0 => return Err(io::ErrorKind::WriteZero.into()),
            Ok(0) => break,
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if written == 0 && e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            Err(_) => break,
        }
    }
    Ok(written)
}

/// Sends `signal` to the process group led by `pid`.
pub fn signal_group(pid: u32, signal: i32) {
    kill_group(pid, signal);
}

/// Whether any process of the group led by `pid` is still alive.
pub fn group_alive(pid: u32) -> bool {
    kill_group(pid, 0)
}

/// kill(2) to the process group led by `pid`: whether it was sent (for
/// signal 0, which sends nothing: whether a process of the group lives).
fn kill_group(pid: u32, signal: i32) -> bool {
    // SAFETY: kill(2) touches no memory; the negative pid addresses the
    // group (never 0 or -1: `pid` is positive). std's `Child::kill`
    // reaches the leader alone, and only with SIGKILL.
    i32::try_from(pid).is_ok_and(|pgid| pgid > 0 && unsafe { libc::kill(-pgid, signal) } == 0)
}

/// `exit code 3`, `signal 9`: how an extension ended.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => status.to_string(),
    }
}
