//! One extension process: spawned in its own process group, with a
//! named reader thread (stdout lines -> frames -> the host's inbound
//! channel), a named writer thread (outbox channel -> stdin) and a
//! named log thread (stderr -> the extension's log, which rotates while
//! the extension runs).
//!
//! The process dies with the host (`PR_SET_PDEATHSIG`, plus the
//! watchdog in `watchdog.rs` for its process group). Its three threads
//! wait on their pipe and on a stop socket at once, so they end when the
//! process is done with even if an escaped (`setsid`) grandchild keeps
//! the pipes open: nothing leaks per reload.

use crate::log::ExtLog;
use crate::mcp_client::{self, Adapter, McpOptions};
use crate::protocol::{parse_ext_frame, ExtFrame, Line, LineReader, MAX_LINE};
use crate::watchdog;
use crossbeam_channel::{Receiver, Sender};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Stack of a reader thread. serde_json parses, converts and drops a
/// frame recursively; a frame at the depth limit (`MAX_DEPTH`, 64) needs
/// about 200 KiB in a debug build (measured), much less in release.
/// Only touched pages cost memory.
const READER_STACK: usize = 512 * 1024;

/// Longest wait for the stderr pump when an extension is done with.
/// What the pump has left is bounded (`DRAIN_READS` reads that never
/// block), so the wait only runs long on a machine that starves the
/// thread of CPU, where a 200 ms bound could lose the last lines.
const LOG_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Reads the log thread may still do after the stop, to save what the
/// extension wrote just before it exited (bounded: an escaped grandchild
/// may write forever).
const DRAIN_READS: usize = 64;

/// What an extension's threads report to the host loop.
// Nearly every message is a frame, so boxing it would only add an
// allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A parsed frame from stdout.
    Frame(ExtFrame),
    /// stdout reached end of file (or failed); no more frames come.
    Eof,
    /// Writing to stdin failed; the outbox is closed.
    WriteFailed(String),
    /// The extension cannot start, for the reason given (an MCP server
    /// refused the handshake); stdout is read no further.
    Failed(String),
}

/// An [`Inbound`] tagged with the extension's unique key.
#[derive(Debug)]
pub(crate) struct InboundMsg {
    /// Which extension (unique across reloads).
    pub key: u64,
    /// What happened.
    pub msg: Inbound,
}

/// Bytes queued for an extension's stdin: one or more whole lines.
pub(crate) type OutChunk = Vec<u8>;

/// A running extension process and its I/O threads.
///
/// Single writer: only the host loop, which owns it, calls `send`. The
/// direct write below is in order only because nobody else can write
/// between its check that nothing is queued and the write itself. It
/// pays: without it `make bench` measured 25 us instead of 16 us per
/// round trip and 27 instead of 17 us of CPU.
pub(crate) struct ExtProcess {
    /// Process id, also the process group id.
    pub pid: u32,
    child: Child,
    outbox: Option<Sender<OutChunk>>,
    /// A second, non-blocking handle on the same stdin pipe. While the
    /// writer thread is idle the loop writes through it directly, which
    /// saves a thread hand-off per request; whatever does not fit goes
    /// to the writer thread. `None` where it cannot be opened.
    direct: Option<File>,
    queued: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
    /// The stderr pump, joined (briefly) on the way out so the log holds
    /// everything the process wrote once it is done with.
    log_thread: Option<JoinHandle<()>>,
    /// For an MCP server: the translator every frame goes through.
    mcp: Option<Arc<Adapter>>,
    /// Dropping it (EOF on the threads' end) tells the I/O threads to end.
    stop: Option<UnixStream>,
}

impl ExtProcess {
    /// Starts `exe args` in `dir` as the leader of a new process group.
    ///
    /// The child is killed when the host dies. Linux sends that signal
    /// when the *thread* that forked the child ends, so call this from a
    /// thread that lives as long as the extension may: the host loop
    /// thread starts (and restarts) extensions and ends only after it
    /// has stopped them all.
    pub fn spawn(
        key: u64,
        name: &str,
        exe: &Path,
        args: &[String],
        dir: &Path,
        log: &ExtLog,
        inbound: Sender<InboundMsg>,
    ) -> io::Result<ExtProcess> {
        Self::spawn_speaking(key, name, exe, args, dir, log, inbound, None)
    }

    /// Like [`ExtProcess::spawn`], for an MCP server (SPEC 11): an
    /// [`Adapter`] sits between its pipes and the frames the host sees.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_mcp(
        key: u64,
        name: &str,
        exe: &Path,
        args: &[String],
        dir: &Path,
        log: &ExtLog,
        inbound: Sender<InboundMsg>,
        mcp: McpOptions,
    ) -> io::Result<ExtProcess> {
        Self::spawn_speaking(key, name, exe, args, dir, log, inbound, Some(mcp))
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn_speaking(
        key: u64,
        name: &str,
        exe: &Path,
        args: &[String],
        dir: &Path,
        log: &ExtLog,
        inbound: Sender<InboundMsg>,
        mcp: Option<McpOptions>,
    ) -> io::Result<ExtProcess> {
        let (stop, stop_rx) = UnixStream::pair()?;
        let host_pid = std::process::id();
        let mut command = Command::new(exe);
        command
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.child_stderr())
            // Its own group, so shutdown can signal grandchildren too.
            .process_group(0);
        // SAFETY: the closure runs in the forked child before exec; it
        // calls only prctl(2) and getppid(2), which are async-signal-safe,
        // and allocates nothing.
        unsafe {
            command.pre_exec(move || die_with_host(host_pid));
        }
        let mut child = command.spawn()?;
        let pid = child.id();
        watchdog::guard(pid);
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => return Err(io::Error::other("child pipes missing")),
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let queued = Arc::new(AtomicUsize::new(0));
        let adapter = match mcp {
            Some(opts) => {
                let (log, inbound, tx, queued) =
                    (log.clone(), inbound.clone(), tx.clone(), queued.clone());
                let started = mcp_client::start(key, opts, log, inbound, tx, queued);
                match started {
                    Ok(a) => Some(a),
                    Err(e) => {
                        signal_group(pid, libc::SIGKILL);
                        let _ = child.wait();
                        watchdog::release(pid);
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        // Frames for an MCP server are translated first, so none is
        // written straight to its pipe.
        let direct = match adapter {
            Some(_) => None,
            None => reopen_nonblocking(&stdin),
        };
        let stop_rx = Arc::new(stop_rx);
        let mut spawned = Vec::new();
        spawned.push({
            let (log, inbound, adapter) = (log.clone(), inbound.clone(), adapter.clone());
            let stop = stop_rx.clone();
            thread::Builder::new()
                .name(format!("zot-read-{name}"))
                .stack_size(READER_STACK)
                .spawn(move || {
                    let stdout = StopRead {
                        pipe: stdout,
                        stop: &stop,
                    };
                    // False: stop reading (the host is gone, or the MCP
                    // handshake failed).
                    let handle = |line: &[u8]| match &adapter {
                        Some(a) => a.from_server(line),
                        None => match parse_ext_frame(line) {
                            Ok(frame) => {
                                let msg = Inbound::Frame(frame);
                                inbound.send(InboundMsg { key, msg }).is_ok()
                            }
                            Err(why) => {
                                log.line(&why);
                                true
                            }
                        },
                    };
                    read_lines(key, stdout, &log, &inbound, handle);
                })
        });
        spawned.push({
            let (queued, stop) = (queued.clone(), stop_rx.clone());
            thread::Builder::new()
                .name(format!("zot-write-{name}"))
                .stack_size(64 * 1024)
                .spawn(move || write_lines(key, stdin, &rx, &queued, &inbound, &stop))
        });
        let has_log_thread = child.stderr.is_some();
        if let Some(stderr) = child.stderr.take() {
            let log = log.clone();
            spawned.push(
                thread::Builder::new()
                    .name(format!("zot-log-{name}"))
                    .stack_size(64 * 1024)
                    .spawn(move || pump_stderr(stderr, &log, &stop_rx)),
            );
        }
        let mut threads = Vec::new();
        for t in spawned {
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    signal_group(pid, libc::SIGKILL);
                    let _ = child.wait();
                    watchdog::release(pid);
                    return Err(e);
                }
            }
        }
        let log_thread = if has_log_thread { threads.pop() } else { None };
        Ok(ExtProcess {
            pid,
            child,
            outbox: Some(tx),
            direct,
            mcp: adapter,
            queued,
            threads,
            log_thread,
            stop: Some(stop),
        })
    }

    /// Writes whole lines to stdin: directly when the pipe has room and
    /// nothing is queued, the rest through the writer thread. Never
    /// blocks. False when stdin is closed.
    pub fn send(&self, mut chunk: OutChunk) -> bool {
        let Some(outbox) = &self.outbox else {
            return false;
        };
        if let Some(mcp) = &self.mcp {
            mcp.from_host(&chunk);
            return true;
        }
        // Acquire pairs with the writer's Release: zero means every
        // earlier byte is in the pipe, so writing now keeps the order.
        if let (Some(direct), 0) = (&self.direct, self.queued.load(Ordering::Acquire)) {
            let written = write_nonblocking(direct, &chunk);
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
        true
    }

    /// Bytes queued but not yet written to stdin.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Whether stdin still accepts lines.
    pub fn writable(&self) -> bool {
        self.outbox.is_some()
    }

    /// Closes stdin once every queued line is written.
    pub fn close_stdin(&mut self) {
        self.outbox = None;
        self.direct = None;
        if let Some(mcp) = &self.mcp {
            mcp.close_stdin();
        }
    }

    /// The exit status, once the process has exited (reaps it).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` to the whole process group.
    pub fn signal_group(&self, signal: i32) {
        signal_group(self.pid, signal);
    }

    /// Stops the I/O threads and joins those that have finished; the
    /// others end on their own within moments (a pipe held open by an
    /// escaped grandchild must not hang the host, nor keep the threads).
    pub fn join_finished(mut self) {
        self.close_stdin();
        self.stop = None;
        for t in self.threads.drain(..) {
            if t.is_finished() {
                let _ = t.join();
            }
        }
        // What the process wrote to stderr is in the pipe by now; the
        // pump copies it (bounded) and ends, so the log is complete for
        // whoever reads it next. Waiting is bounded all the same.
        if let Some(t) = self.log_thread.take() {
            let end = Instant::now() + LOG_FLUSH_WAIT;
            while !t.is_finished() && Instant::now() < end {
                thread::sleep(Duration::from_micros(200));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for ExtProcess {
    fn drop(&mut self) {
        self.stop = None;
        // Normally the group is gone by now; if not, it goes with us.
        if group_alive(self.pid) {
            signal_group(self.pid, libc::SIGKILL);
            let _ = self.child.try_wait();
        }
        watchdog::release(self.pid);
    }
}

/// In the child before exec: be killed when the host dies.
#[cfg(target_os = "linux")]
fn die_with_host(host_pid: u32) -> io::Result<()> {
    let signal = libc::SIGKILL as libc::c_ulong;
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes integers only and touches no
    // memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid(2) has no preconditions.
    let parent = unsafe { libc::getppid() };
    // The host died between fork and prctl: the signal will never come.
    if u32::try_from(parent).ok() != Some(host_pid) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Elsewhere only the watchdog covers the host's death.
#[cfg(not(target_os = "linux"))]
fn die_with_host(_host_pid: u32) -> io::Result<()> {
    Ok(())
}

/// What [`wait_fd`] saw.
struct Readiness {
    /// The pipe is ready (or has an error or hang-up to report).
    ready: bool,
    /// The stop socket reached end of file: the process is done with.
    stopped: bool,
}

/// Waits until `fd` is ready for `events` or `stop` is closed; without
/// waiting when `block` is false.
fn wait_fd(fd: RawFd, events: libc::c_short, stop: &UnixStream, block: bool) -> Readiness {
    let mut fds = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a live array of two pollfd structs for the
        // whole call, and 2 is its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, if block { -1 } else { 0 }) };
        if n >= 0 {
            break;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // Let the read or write itself meet and report the problem.
            return Readiness {
                ready: true,
                stopped: false,
            };
        }
    }
    Readiness {
        ready: fds[0].revents != 0,
        stopped: fds[1].revents != 0,
    }
}

/// Switches the writer's own description of the stdin pipe to
/// non-blocking, so a full pipe never pins the writer thread; on failure
/// it stays blocking (and may then outlive a stuck extension).
fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl(2) on a descriptor we own, with integer arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// The stdout pipe, read only while the stop socket is open: a stop
/// reads as end of file.
struct StopRead<'a> {
    pipe: ChildStdout,
    stop: &'a UnixStream,
}

impl Read for StopRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if wait_fd(self.pipe.as_raw_fd(), libc::POLLIN, self.stop, true).stopped {
            return Ok(0);
        }
        self.pipe.read(buf)
    }
}

/// Copies the child's stderr into its log until EOF or the stop; after
/// the stop, only what is already in the pipe (bounded).
fn pump_stderr(mut stderr: ChildStderr, log: &ExtLog, stop: &UnixStream) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut drain_left = None;
    loop {
        let seen = wait_fd(stderr.as_raw_fd(), libc::POLLIN, stop, drain_left.is_none());
        if seen.stopped && drain_left.is_none() {
            drain_left = Some(DRAIN_READS);
        }
        match &mut drain_left {
            Some(0) => return,
            Some(n) => *n -= 1,
            None => {}
        }
        if !seen.ready {
            return; // stopped, and nothing more waits in the pipe
        }
        match stderr.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => log.append(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Opens a second, non-blocking description of the `stdin` pipe through
/// `/proc/self/fd` (Linux; elsewhere `None` and every write goes through
/// the writer thread). A separate description keeps the writer thread's
/// own writes blocking.
fn reopen_nonblocking(stdin: &ChildStdin) -> Option<File> {
    let path = format!("/proc/self/fd/{}", stdin.as_raw_fd());
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()
}

/// Writes as much of `bytes` as the pipe takes without blocking; a
/// failure other than a full pipe is left for the writer thread to meet
/// and report.
fn write_nonblocking(mut pipe: &File, bytes: &[u8]) -> usize {
    let mut written = 0;
    while written < bytes.len() {
        match pipe.write(&bytes[written..]) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    written
}

/// Sends `signal` to the process group led by `pid`.
pub fn signal_group(pid: u32, signal: i32) {
    let Ok(pgid) = i32::try_from(pid) else { return };
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid
    // addresses the process group this host created with process_group(0).
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Whether any process of the group led by `pid` is still alive.
pub fn group_alive(pid: u32) -> bool {
    let Ok(pgid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks for existence; no memory is touched.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

/// `exit code 3`, `signal 9`: how an extension ended.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => status.to_string(),
    }
}

/// Hands each stdout line to `handle` until it returns false or stdout
/// ends (lines too long to keep are logged and skipped), then says so.
fn read_lines(
    key: u64,
    stdout: impl Read,
    log: &ExtLog,
    inbound: &Sender<InboundMsg>,
    mut handle: impl FnMut(&[u8]) -> bool,
) {
    let mut lines = LineReader::new(BufReader::with_capacity(8 * 1024, stdout), MAX_LINE);
    loop {
        let line = match lines.next_line() {
            Ok(Some(Line::Text(line))) => line,
            Ok(Some(Line::TooLong(len))) => {
                let why = format!("dropped a {len}-byte line: longer than {MAX_LINE} bytes");
                log.line(&why);
                continue;
            }
            Ok(None) => break,
            Err(e) => {
                log.line(&format!("reading stdout failed: {e}"));
                break;
            }
        };
        if !line.iter().all(u8::is_ascii_whitespace) && !handle(&line) {
            break;
        }
    }
    let _ = inbound.send(InboundMsg {
        key,
        msg: Inbound::Eof,
    });
}

fn write_lines(
    key: u64,
    mut stdin: ChildStdin,
    outbox: &Receiver<OutChunk>,
    queued: &AtomicUsize,
    inbound: &Sender<InboundMsg>,
    stop: &UnixStream,
) {
    set_nonblocking(stdin.as_raw_fd());
    // Chunks are already batched by the host loop, so each is written
    // with one call and no extra buffer. A closed outbox (all senders
    // dropped) closes stdin.
    while let Ok(chunk) = outbox.recv() {
        let result = write_until_stop(&mut stdin, &chunk, stop);
        queued.fetch_sub(chunk.len(), Ordering::Release);
        match result {
            Ok(true) => {}
            Ok(false) => return, // the process is done with
            Err(e) => {
                let _ = inbound.send(InboundMsg {
                    key,
                    msg: Inbound::WriteFailed(e.to_string()),
                });
                return;
            }
        }
    }
}

/// Writes all of `bytes`, waiting while the pipe is full; false when the
/// stop came first.
fn write_until_stop(
    pipe: &mut ChildStdin,
    mut bytes: &[u8],
    stop: &UnixStream,
) -> io::Result<bool> {
    while !bytes.is_empty() {
        match pipe.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if wait_fd(pipe.as_raw_fd(), libc::POLLOUT, stop, true).stopped {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
