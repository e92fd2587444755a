//! The bounds of `zot rpc` and `zot mcp` (docs/PROTOCOL.md#limits-and-bounds), kept
//! apart so that a client that reads is never stalled by a full count
//! of slow requests, and one that does not read costs bounded memory.
//!
//! - [`Unwritten`]: bytes of answers waiting to be written to stdout.
//!   Only while they are over [`UNWRITTEN_LIMIT`] does the stdin reader
//!   wait, so every kind of line (a ping, a parse error) is covered.
//! - [`Slots`]: requests handed to the host and not yet answered by it,
//!   at most [`MAX_IN_FLIGHT`]. Beyond that a request waits, in order,
//!   in a queue of at most [`QUEUE_LIMIT`] bytes (its line as read) and
//!   starts when an earlier one is answered; stdin is still read, so
//!   notifications, `ping` and cancellations are handled at once (a
//!   cancelled waiting request leaves the queue). Only a request that
//!   would overflow the queue is answered at once, with [`queue_full`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

/// Bytes of answers that may wait for stdout before stdin is not read.
pub const UNWRITTEN_LIMIT: usize = 8 << 20;

/// Requests the host may be serving at once for one client.
pub const MAX_IN_FLIGHT: usize = 256;

/// Bytes of requests that may wait for an in-flight slot.
pub const QUEUE_LIMIT: usize = 16 << 20;

/// What a waiting request costs beyond its line: its place in the queue.
const ENTRY_COST: usize = 64;

/// The error text for a request that would overflow the queue.
pub fn queue_full() -> String {
    format!(
        "too many requests waiting: {MAX_IN_FLIGHT} are being served and \
         {} MiB of requests wait for them; send it again once some are answered",
        QUEUE_LIMIT >> 20
    )
}

/// What [`Slots::admit`] made of a request.
pub enum Admit<T> {
    /// It took a slot: serve it now.
    Now(T),
    /// It waits in the queue; [`Slots::release`] hands it out later.
    Queued,
    /// The queue is full: refuse it ([`queue_full`]).
    Full(T),
}

/// One waiting request: `None` once cancelled (left for the queue's
/// front to drop, or for the next compaction).
struct Entry<T> {
    seq: u64,
    key: Option<String>,
    item: Option<T>,
    bytes: usize,
}

/// The in-flight slots of one client and the requests that wait for
/// one. Keep it under the lock that orders the requests; it never
/// blocks.
pub struct Slots<T> {
    running: usize,
    queue: std::collections::VecDeque<Entry<T>>,
    /// Bytes the live entries hold.
    bytes: usize,
    /// Live entries with a key, by key: what a cancellation names.
    keyed: std::collections::HashMap<String, u64>,
    /// Cancelled entries still in `queue`.
    dead: usize,
    next_seq: u64,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            running: 0,
            queue: Default::default(),
            bytes: 0,
            keyed: Default::default(),
            dead: 0,
            next_seq: 0,
        }
    }
}

impl<T> Slots<T> {
    /// A request of `bytes` (its line), named `key` for cancellations:
    /// it takes a free slot when no earlier one waits, else waits while
    /// the queue has room for it.
    pub fn admit(&mut self, key: Option<String>, bytes: usize, item: T) -> Admit<T> {
        if self.running < MAX_IN_FLIGHT && self.live() == 0 {
            self.running += 1;
            return Admit::Now(item);
        }
        let bytes = bytes + ENTRY_COST;
        if self.bytes + bytes > QUEUE_LIMIT {
            return Admit::Full(item);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(key) = &key {
            self.keyed.insert(key.clone(), seq);
        }
        self.bytes += bytes;
        let item = Some(item);
        self.queue.push_back(Entry {
            seq,
            key,
            item,
            bytes,
        });
        Admit::Queued
    }

    /// A slot was freed: the next waiting request takes it (serve it
    /// now), or the slot is free again (`None`).
    pub fn release(&mut self) -> Option<T> {
        while let Some(entry) = self.queue.pop_front() {
            let Some(item) = entry.item else {
                self.dead -= 1;
                continue;
            };
            self.forget(&entry.key, entry.seq, entry.bytes);
            return Some(item);
        }
        self.running = self.running.saturating_sub(1);
        None
    }

    /// Takes the waiting request named `key` out of the queue.
    pub fn cancel(&mut self, key: &str) -> Option<T> {
        let seq = *self.keyed.get(key)?;
        // In order of `seq`, cancelled ones included until compacted.
        let at = self.queue.binary_search_by_key(&seq, |e| e.seq).ok()?;
        let entry = self.queue.get_mut(at)?;
        let item = entry.item.take()?;
        let (key, bytes) = (entry.key.take(), entry.bytes);
        self.forget(&key, seq, bytes);
        self.dead += 1;
        // Cancelled entries never outnumber live ones for long.
        if self.dead > self.live() + 64 {
            self.queue.retain(|e| e.item.is_some());
            self.dead = 0;
        }
        Some(item)
    }

    /// Whether a waiting request is named `key`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub fn waits(&self, key: &str) -> bool {
        self.keyed.contains_key(key)
    }

    /// Whether no request waits.
    pub fn nothing_waits(&self) -> bool {
        self.live() == 0
    }

    fn live(&self) -> usize {
        self.queue.len() - self.dead
    }

    fn forget(&mut self, key: &Option<String>, seq: u64, bytes: usize) {
        if let Some(key) = key {
            if self.keyed.get(key) == Some(&seq) {
                self.keyed.remove(key);
            }
        }
        self.bytes -= bytes;
    }
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
    fn requests_beyond_the_slots_wait_in_order_within_the_byte_bound() {
        let mut slots = Slots::default();
        for i in 0..MAX_IN_FLIGHT {
            assert!(matches!(slots.admit(None, 10, i), Admit::Now(n) if n == i));
        }
        assert!(matches!(
            slots.admit(Some("a".into()), 10, 1000),
            Admit::Queued
        ));
        assert!(matches!(
            slots.admit(Some("b".into()), 10, 1001),
            Admit::Queued
        ));
        assert!(matches!(slots.admit(None, 10, 1002), Admit::Queued));
        assert!(slots.waits("b"));
        assert_eq!(slots.cancel("b"), Some(1001));
        assert_eq!(slots.cancel("b"), None, "taken out once");
        assert!(!slots.waits("b"));
        assert_eq!(slots.release(), Some(1000));
        assert_eq!(slots.release(), Some(1002), "the cancelled one is skipped");
        assert!(slots.nothing_waits());
        assert_eq!(slots.release(), None);
        // One slot is free: the next request takes it, not the queue.
        assert!(matches!(slots.admit(None, 10, 7), Admit::Now(7)));
        let big = QUEUE_LIMIT - ENTRY_COST;
        assert!(matches!(slots.admit(None, big, 8), Admit::Queued));
        assert!(matches!(slots.admit(None, 0, 9), Admit::Full(9)));
        assert_eq!(slots.release(), Some(8));
        assert!(matches!(slots.admit(None, 0, 9), Admit::Queued));
    }

    #[test]
    fn cancelled_entries_do_not_pile_up() {
        let mut slots = Slots::default();
        for i in 0..MAX_IN_FLIGHT {
            let _ = slots.admit(None, 0, i);
        }
        for round in 0..10_000 {
            assert!(matches!(
                slots.admit(Some("x".into()), 0, round),
                Admit::Queued
            ));
            assert_eq!(slots.cancel("x"), Some(round));
        }
        assert!(
            slots.queue.len() <= 65,
            "{} entries kept",
            slots.queue.len()
        );
        assert_eq!(slots.bytes, 0);
    }

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
