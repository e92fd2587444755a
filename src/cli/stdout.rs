//! stdout for a surface whose main thread runs the host loop (`zot rpc`,
//! the session): a thread of its own writes it, so a client that stops
//! reading blocks that thread, never the loop. The main thread hands
//! lines over and stops taking host events while more than [`ROOM`]
//! bytes wait (the host then drops notes beyond its event budget,
//! docs/PROTOCOL.md#limits-and-bounds); the writer calls `wake` when there is room again, and
//! when stdout turns out to be closed. The first write error is kept
//! ([`Stdout::take_error`]): a departed reader (EPIPE) is a quiet end,
//! anything else (a full disk) is for the surface to report.

use crossbeam_channel::Sender;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Bytes handed to the writer and not yet written beyond which the main
/// thread takes no more events.
pub const ROOM: usize = 1 << 20;

/// The writer thread's end of stdout.
pub struct Stdout {
    tx: Option<Sender<Vec<u8>>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Bytes handed over and not yet written (or dropped).
    backlog: AtomicUsize,
    /// The main thread found no room: wake it when there is.
    starved: AtomicBool,
    /// A write failed: nobody reads stdout any more.
    broken: AtomicBool,
    /// The first write error.
    error: Mutex<Option<io::Error>>,
}

impl Shared {
    /// A write failed with `e`: nothing more is written.
    fn fail(&self, e: io::Error) {
        if let Ok(mut first) = self.error.lock() {
            first.get_or_insert(e);
        }
        self.broken.store(true, Ordering::SeqCst);
    }
}

impl Stdout {
    /// Starts the writer thread; it calls `wake` when there is room again
    /// after [`Stdout::has_room`] said no, and when stdout breaks.
    pub fn start(wake: impl Fn() + Send + 'static) -> io::Result<Stdout> {
        let shared = Arc::new(Shared {
            backlog: AtomicUsize::new(0),
            starved: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            error: Mutex::new(None),
        });
        let (tx, rx) = crossbeam_channel::unbounded::<Vec<u8>>();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("zot-stdout".into())
            .spawn(move || {
                let mut out = io::stdout().lock();
                while let Ok(bytes) = rx.recv() {
                    if !s.broken.load(Ordering::SeqCst) {
                        let mut written = out.write_all(&bytes);
                        // A burst is flushed once, at its end.
                        if written.is_ok() && rx.is_empty() {
                            written = out.flush();
                        }
                        if let Err(e) = written {
                            s.fail(e);
                            wake();
                        }
                    }
                    s.backlog.fetch_sub(bytes.len(), Ordering::SeqCst);
                    if s.backlog.load(Ordering::SeqCst) < ROOM
                        && s.starved.swap(false, Ordering::SeqCst)
                    {
                        wake();
                    }
                }
                if !s.broken.load(Ordering::SeqCst) {
                    if let Err(e) = out.flush() {
                        s.fail(e);
                    }
                }
            })?;
        Ok(Stdout {
            tx: Some(tx),
            shared,
            thread: Some(thread),
        })
    }

    /// Hands `bytes` to the writer (dropped once stdout is broken).
    pub fn write(&self, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let len = bytes.len();
        self.shared.backlog.fetch_add(len, Ordering::SeqCst);
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(bytes).is_ok());
        if !sent {
            self.shared.backlog.fetch_sub(len, Ordering::SeqCst);
        }
    }

    /// Whether fewer than [`ROOM`] bytes wait; when not, the writer wakes
    /// the main thread once they do.
    pub fn has_room(&self) -> bool {
        let s = &self.shared;
        if s.backlog.load(Ordering::SeqCst) < ROOM {
            return true;
        }
        s.starved.store(true, Ordering::SeqCst);
        // The writer may have made room between the two: look again.
        s.backlog.load(Ordering::SeqCst) < ROOM
    }

    /// Whether a write failed: the client closed stdout.
    pub fn broken(&self) -> bool {
        self.shared.broken.load(Ordering::SeqCst)
    }

    /// The first write error, if any (taken: asked once).
    pub fn take_error(&self) -> Option<io::Error> {
        self.shared.error.lock().ok().and_then(|mut e| e.take())
    }

    /// Waits until everything handed over is written (or stdout broke).
    pub fn finish(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Stdout {
    fn drop(&mut self) {
        self.finish();
    }
}
