//! Every extension's stderr into its log, on one thread per host.
//!
//! One thread, so that starting an extension starts no thread for its
//! stderr (a thread start, with its stack, guard page and signal stack,
//! costs CPU on the path `make bench`'s startup20 measures). The pump
//! waits on every pipe and on every extension's stop socket at once, and
//! copies one read's worth from each pipe that has something per pass,
//! so one chatty extension does not hold the others' logs back.
//!
//! A pipe is done with at its end of file, or when its process is (its
//! stop socket closed: `process.rs`): then what is already in the pipe is
//! copied, at most [`DRAIN_READS`] reads, since an escaped grandchild may
//! write forever. Dropping a pipe's `_done` sender says it is done with.

use crate::log::ExtLog;
use crate::process::{poll, pollfd};
use crossbeam_channel::{Receiver, Sender};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::process::ChildStderr;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Reads of a pipe still done once its process is done with: at most
/// 256 KiB, about four pipes' worth.
const DRAIN_READS: usize = 4;

/// The most one read copies: one buffer for the whole pump.
const READ_BYTES: usize = 64 * 1024;

/// Its thread only polls, reads and writes to log files.
const STACK: usize = 64 * 1024;

/// An extension's stderr, handed to the pump.
pub(crate) struct Pipe {
    pub stderr: ChildStderr,
    pub log: ExtLog,
    /// Its process's stop socket: closed when the process is done with.
    pub stop: Arc<UnixStream>,
    /// Dropped once the pipe is done with: held for that alone.
    pub _done: Sender<()>,
}

/// The pump: its thread starts when it is first asked for a
/// [`Pumping`]. Dropping it ends the thread once every pipe handed to it
/// is done with, so its owner drops their processes first (`spawner.rs`
/// owns it).
pub(crate) struct LogPump {
    thread: Option<Running>,
}

struct Running {
    pipes: Sender<Pipe>,
    /// A byte per pipe sent wakes the thread; closed, it ends it.
    bell: Arc<UnixStream>,
    handle: JoinHandle<()>,
}

/// What the pump may be handed pipes through, from any thread.
#[derive(Clone)]
pub(crate) struct Pumping {
    pipes: Sender<Pipe>,
    bell: Arc<UnixStream>,
}

impl LogPump {
    /// A pump with no thread yet.
    pub fn new() -> LogPump {
        LogPump { thread: None }
    }

    /// Where to hand it pipes, starting its thread the first time.
    pub fn pumping(&mut self) -> io::Result<Pumping> {
        if let Some(running) = &self.thread {
            return Ok(running.pumping());
        }
        let running = Running::start()?;
        let pumping = running.pumping();
        self.thread = Some(running);
        Ok(pumping)
    }
}

impl Running {
    fn start() -> io::Result<Running> {
        let (bell, rings) = UnixStream::pair()?;
        // A full socket means the thread has a wake-up pending already.
        bell.set_nonblocking(true)?;
        let (pipes, taken) = crossbeam_channel::unbounded();
        let handle = thread::Builder::new()
            .name("zot-logs".into())
            .stack_size(STACK)
            .spawn(move || run(&rings, &taken))?;
        Ok(Running {
            pipes,
            bell: Arc::new(bell),
            handle,
        })
    }

    fn pumping(&self) -> Pumping {
        Pumping {
            pipes: self.pipes.clone(),
            bell: self.bell.clone(),
        }
    }
}

impl Drop for LogPump {
    fn drop(&mut self) {
        if let Some(running) = self.thread.take() {
            // The last bell closed ends the thread once its pipes are
            // done with: a `Pumping` lives only while a batch starts.
            drop((running.pipes, running.bell));
            let _ = running.handle.join();
        }
    }
}

impl Pumping {
    /// Hands `pipe` to the pump's thread, which takes it at the next
    /// [`Pumping::ring`]: a batch of starts rings once, so the thread
    /// wakes once for all of them, not once per start.
    pub fn add(&self, pipe: Pipe) -> io::Result<()> {
        self.pipes
            .send(pipe)
            .map_err(|_| io::Error::other("the log pump has ended"))
    }

    /// Wakes the thread to take the pipes added since it last woke.
    pub fn ring(&self) -> io::Result<()> {
        match (&*self.bell).write(&[1]) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }
}

/// The thread: until the bell closes and every pipe is done with.
fn run(rings: &UnixStream, taken: &Receiver<Pipe>) {
    let mut open: Vec<Pipe> = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; READ_BYTES];
    let mut ringing = true;
    while ringing || !open.is_empty() {
        fds.clear();
        fds.push(pollfd(
            if ringing { rings.as_raw_fd() } else { -1 },
            libc::POLLIN,
        ));
        for pipe in &open {
            fds.push(pollfd(pipe.stderr.as_raw_fd(), libc::POLLIN));
            fds.push(pollfd(pipe.stop.as_raw_fd(), libc::POLLIN));
        }
        if !poll(&mut fds, -1) {
            // Out of memory for the poll, say: try again in a moment.
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        let mut ready = fds[1..].chunks(2).map(|f| (f[0].revents, f[1].revents));
        open.retain_mut(|pipe| {
            let (revents, stopped) = ready.next().unwrap_or_default();
            match stopped {
                0 => copy(pipe, revents, &mut buf),
                _ => drain(pipe, revents, &mut buf),
            }
        });
        if fds[0].revents != 0 {
            ringing = hear(rings);
            open.extend(taken.try_iter());
        }
    }
}

/// Reads what woke the thread: false once the bell is closed.
fn hear(mut rings: &UnixStream) -> bool {
    let mut rung = [0u8; 64];
    match rings.read(&mut rung) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == io::ErrorKind::Interrupted,
    }
}

/// Copies one read of what poll(2) says waits (`revents`) into the log;
/// false when the pipe is done with (end of file, or it failed).
fn copy(pipe: &mut Pipe, revents: i16, buf: &mut [u8]) -> bool {
    if revents & libc::POLLIN == 0 {
        return revents == 0; // hung up with nothing left, or failed
    }
    match pipe.stderr.read(buf) {
        Ok(0) => false,
        Ok(n) => {
            pipe.log.append(&buf[..n]);
            true
        }
        Err(e) => e.kind() == io::ErrorKind::Interrupted,
    }
}

/// Its process is done with: copies what the pipe holds now, at most
/// [`DRAIN_READS`] reads; always false (done with).
fn drain(pipe: &mut Pipe, mut revents: i16, buf: &mut [u8]) -> bool {
    for _ in 0..DRAIN_READS {
        if revents == 0 || !copy(pipe, revents, buf) {
            break;
        }
        revents = readable(pipe.stderr.as_raw_fd());
    }
    false
}

/// poll(2)'s revents for reading `fd`, without waiting.
fn readable(fd: RawFd) -> i16 {
    let mut fds = [pollfd(fd, libc::POLLIN)];
    match poll(&mut fds, 0) {
        true => fds[0].revents,
        false => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::log_path;
    use crossbeam_channel::RecvTimeoutError;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::Instant;

    /// `sh -c script` with its stderr piped, and its pipe for the pump
    /// (logging to `dir`), with the stop socket's other end.
    fn sh(dir: &Path, name: &str, script: &str) -> (Child, Pipe, UnixStream, Receiver<()>) {
        let mut child = Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("/bin/sh starts");
        let (stop, stop_rx) = UnixStream::pair().expect("a socket pair");
        let (done, done_rx) = crossbeam_channel::bounded(0);
        let pipe = Pipe {
            stderr: child.stderr.take().expect("stderr is piped"),
            log: ExtLog::open(dir, name, 1 << 20),
            stop: Arc::new(stop_rx),
            _done: done,
        };
        (child, pipe, stop, done_rx)
    }

    fn log_has(dir: &Path, name: &str, text: &str) -> bool {
        std::fs::read_to_string(log_path(dir, name)).is_ok_and(|log| log.contains(text))
    }

    /// Until `what` holds, for at most a minute (a busy machine is slow,
    /// never that slow); every 5 ms.
    fn within_a_minute(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cond() {
            assert!(Instant::now() < deadline, "{what} within 60 s");
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn every_pipe_reaches_its_log_a_flood_holds_none_back_and_a_stop_ends_a_flood() {
        let dir = std::env::temp_dir().join(format!("zot-logpump-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut pump = LogPump::new();
        let pumping = pump.pumping().expect("the pump starts");
        // Writes to stderr for ever, until killed.
        let (mut flood, pipe, flood_stop, flood_done) =
            sh(&dir, "flood", "while :; do echo floodfloodflood >&2; done");
        pumping.add(pipe).unwrap();
        pumping.ring().unwrap();
        within_a_minute("the flood in its log", || log_has(&dir, "flood", "flood"));
        // Its line reaches its log while the flood goes on; its end of
        // file lets its pipe go with no stop.
        let (mut quiet, pipe, _quiet_stop, quiet_done) = sh(&dir, "quiet", "echo quiet-line >&2");
        pumping.add(pipe).unwrap();
        pumping.ring().unwrap();
        within_a_minute("the quiet line in its log", || {
            log_has(&dir, "quiet", "quiet-line\n")
        });
        assert_eq!(
            quiet_done.recv_timeout(Duration::from_secs(60)),
            Err(RecvTimeoutError::Disconnected),
            "the quiet pipe let go at its end of file"
        );
        let _ = quiet.wait();
        // A stop lets the flood's pipe go although it never ends.
        drop(flood_stop);
        assert_eq!(
            flood_done.recv_timeout(Duration::from_secs(60)),
            Err(RecvTimeoutError::Disconnected),
            "the flood's pipe let go after its stop"
        );
        let _ = flood.kill();
        let _ = flood.wait();
        // Nothing handed to it is left: dropping it ends its thread.
        drop(pumping);
        drop(pump);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
