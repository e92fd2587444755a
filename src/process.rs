//! One extension process: spawned in its own process group, with a
//! named reader thread (stdout lines -> frames -> the host's inbound
//! channel) and a named writer thread (outbox channel -> stdin).
//! stderr goes straight to the extension's log file.

use crate::log::ExtLog;
use crate::mcp_client::{self, Adapter, McpOptions};
use crate::protocol::{parse_ext_frame, ExtFrame, Line, LineReader, MAX_LINE};
use crossbeam_channel::{Receiver, Sender};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

/// Stack of a reader thread. serde_json parses, converts and drops a
/// frame recursively; a frame at the depth limit (`MAX_DEPTH`, 64) needs
/// about 200 KiB in a debug build (measured), much less in release.
/// Only touched pages cost memory.
const READER_STACK: usize = 512 * 1024;

/// What an extension's threads report to the host loop.
// Nearly every message is a frame, so boxing it would only add an
// allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Inbound {
    /// A parsed frame from stdout.
    Frame(ExtFrame),
    /// A stdout line that is not a frame (or is too long); it was
    /// dropped and logged. Carries the logged reason, which quotes the
    /// line's start. The host ignores it; `zot ext check` reports it.
    Unparsed(String),
    /// stdout reached end of file (or failed); no more frames come.
    Eof,
    /// Writing to stdin failed; the outbox is closed.
    WriteFailed(String),
}

/// An [`Inbound`] tagged with the extension's unique key.
#[derive(Debug)]
pub struct InboundMsg {
    /// Which extension (unique across reloads).
    pub key: u64,
    /// What happened.
    pub msg: Inbound,
}

/// Bytes queued for an extension's stdin: one or more whole lines.
pub type OutChunk = Vec<u8>;

/// A running extension process and its I/O threads.
pub struct ExtProcess {
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
    /// For an MCP server: the translator every frame goes through.
    mcp: Option<Arc<Adapter>>,
}

impl ExtProcess {
    /// Starts `exe args` in `dir` as the leader of a new process group.
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
        let mut child = Command::new(exe)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.child_stderr())
            // Its own group, so shutdown can signal grandchildren too.
            .process_group(0)
            .spawn()?;
        let pid = child.id();
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
                        let _ = child.kill();
                        let _ = child.wait();
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
        let reader = {
            let (log, inbound, adapter) = (log.clone(), inbound.clone(), adapter.clone());
            thread::Builder::new()
                .name(format!("zot-read-{name}"))
                .stack_size(READER_STACK)
                .spawn(move || match adapter {
                    Some(a) => mcp_client::read(&a, stdout),
                    None => read_frames(key, stdout, &log, &inbound),
                })
        };
        let writer = {
            let queued = queued.clone();
            thread::Builder::new()
                .name(format!("zot-write-{name}"))
                .stack_size(64 * 1024)
                .spawn(move || write_lines(key, stdin, &rx, &queued, &inbound))
        };
        let threads = match (reader, writer) {
            (Ok(r), Ok(w)) => vec![r, w],
            (r, w) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(r
                    .err()
                    .or(w.err())
                    .unwrap_or_else(|| io::Error::other("thread spawn")));
            }
        };
        Ok(ExtProcess {
            pid,
            child,
            outbox: Some(tx),
            direct,
            mcp: adapter,
            queued,
            threads,
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
            return mcp.from_host(&chunk);
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

    /// Joins the I/O threads that have finished; others are left to end
    /// on their own (a pipe held open by an escaped grandchild must not
    /// hang the host).
    pub fn join_finished(mut self) {
        self.close_stdin();
        for t in self.threads.drain(..) {
            if t.is_finished() {
                let _ = t.join();
            }
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

fn read_frames(key: u64, stdout: ChildStdout, log: &ExtLog, inbound: &Sender<InboundMsg>) {
    let mut lines = LineReader::new(BufReader::with_capacity(8 * 1024, stdout), MAX_LINE);
    loop {
        let line = match lines.next_line() {
            Ok(Some(Line::Text(line))) => line,
            Ok(Some(Line::TooLong(len))) => {
                let why = format!("dropped a {len}-byte line: longer than {MAX_LINE} bytes");
                log.line(&why);
                if inbound.send(unparsed(key, why)).is_err() {
                    return;
                }
                continue;
            }
            Ok(None) => break,
            Err(e) => {
                log.line(&format!("reading stdout failed: {e}"));
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_ext_frame(&line) {
            Ok(frame) => {
                let msg = InboundMsg {
                    key,
                    msg: Inbound::Frame(frame),
                };
                if inbound.send(msg).is_err() {
                    return; // the host is gone
                }
            }
            Err(why) => {
                log.line(&why);
                if inbound.send(unparsed(key, why)).is_err() {
                    return;
                }
            }
        }
    }
    let _ = inbound.send(InboundMsg {
        key,
        msg: Inbound::Eof,
    });
}

fn unparsed(key: u64, why: String) -> InboundMsg {
    InboundMsg {
        key,
        msg: Inbound::Unparsed(why),
    }
}

fn write_lines(
    key: u64,
    mut stdin: ChildStdin,
    outbox: &Receiver<OutChunk>,
    queued: &AtomicUsize,
    inbound: &Sender<InboundMsg>,
) {
    // Chunks are already batched by the host loop, so each is written
    // with one call and no extra buffer. A closed outbox (all senders
    // dropped) closes stdin.
    while let Ok(chunk) = outbox.recv() {
        let result = stdin.write_all(&chunk);
        queued.fetch_sub(chunk.len(), Ordering::Release);
        if let Err(e) = result {
            let _ = inbound.send(InboundMsg {
                key,
                msg: Inbound::WriteFailed(e.to_string()),
            });
            return;
        }
    }
}
