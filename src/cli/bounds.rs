//! The two bounds of `zot rpc` and `zot mcp` (SPEC 9 "Bounds"), kept
//! apart so that a client that reads is never stalled by a full count
//! of slow requests, and one that does not read costs bounded memory.
//!
//! - [`Unwritten`]: bytes of answers waiting to be written to stdout.
//!   Only while they are over [`UNWRITTEN_LIMIT`] does the stdin reader
//!   wait, so every kind of line (a ping, a parse error) is covered.
//! - [`MAX_IN_FLIGHT`]: requests handed to the host and not yet
//!   answered by it. At the limit stdin is still read; a new request is
//!   answered at once with [`too_many`], while notifications, `ping` and
//!   cancellations are handled as always.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

/// Bytes of answers that may wait for stdout before stdin is not read.
pub const UNWRITTEN_LIMIT: usize = 8 << 20;

/// Requests the host may be serving at once for one client.
pub const MAX_IN_FLIGHT: usize = 256;

/// The error text for a request beyond [`MAX_IN_FLIGHT`].
pub fn too_many() -> String {
    format!(
        "too many requests in flight: {MAX_IN_FLIGHT} are being served; \
         send it again once some are answered"
    )
}

/// A count of bytes produced for stdout and not yet written.
#[derive(Default)]
pub struct Unwritten {
    bytes: Mutex<usize>,
    written: Condvar,
    /// The reader has had to wait once.
    waited: AtomicBool,
}

impl Unwritten {
    /// `n` more bytes wait for stdout.
    pub fn add(&self, n: usize) {
        *self.lock() += n;
    }

    /// `n` bytes were written (or could not be: stdout is gone).
    pub fn written(&self, n: usize) {
        let mut bytes = self.lock();
        *bytes = bytes.saturating_sub(n);
        if *bytes <= UNWRITTEN_LIMIT {
            self.written.notify_all();
        }
    }

    /// Whether more than [`UNWRITTEN_LIMIT`] bytes wait.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub fn over(&self) -> bool {
        *self.lock() > UNWRITTEN_LIMIT
    }

    /// For the stdin reader: returns once at most [`UNWRITTEN_LIMIT`]
    /// bytes wait, i.e. at once unless the client stopped reading. The
    /// first time it has to wait it calls `first_wait` (a diagnostic).
    pub fn wait_for_room(&self, first_wait: impl FnOnce()) {
        let bytes = self.lock();
        if *bytes <= UNWRITTEN_LIMIT {
            return;
        }
        if !self.waited.swap(true, Ordering::Relaxed) {
            first_wait();
        }
        let _room = self
            .written
            .wait_while(bytes, |b| *b > UNWRITTEN_LIMIT)
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// The stderr line for the first wait.
    pub fn not_reading(surface: &str) -> String {
        format!(
            "{surface}: the client is not reading stdout: stdin is not read \
             while more than {} MiB of answers wait",
            UNWRITTEN_LIMIT >> 20
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.bytes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_reader_waits_only_while_over_the_limit() {
        let unwritten = Arc::new(Unwritten::default());
        unwritten.add(UNWRITTEN_LIMIT);
        unwritten.wait_for_room(|| panic!("at the limit: not over it"));
        unwritten.add(1);
        assert!(unwritten.over());
        let writer = {
            let unwritten = unwritten.clone();
            std::thread::spawn(move || unwritten.written(1))
        };
        unwritten.wait_for_room(|| {});
        writer.join().expect("writer thread");
        assert!(!unwritten.over());
    }
}
