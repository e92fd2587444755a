//! Events on their way to the embedder ([`crate::Host::events`]), their
//! waiting bytes bounded (SPEC 3.17): lifecycle events always
//! go through; notes and panel updates are dropped beyond the budget and
//! counted in the next event that gets through.

use crate::types::HostEvent;
use crossbeam_channel::Sender;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Fixed cost counted per event, beyond its JSON.
const EVENT_OVERHEAD: usize = 64;

pub(super) struct EventQueue {
    tx: Sender<HostEvent>,
    /// Sizes of the events sent, oldest first. The channel is FIFO and
    /// the loop is its only sender, so the last `tx.len()` of these are
    /// the events still waiting: the rest were taken.
    sizes: VecDeque<usize>,
    waiting: usize,
    budget: usize,
    /// Dropped since the last report.
    dropped: u64,
    /// Events sent so far, for [`crate::HostHandle::events_sent`]: read
    /// in a reply callback (on the loop thread) it counts exactly the
    /// events sent before that reply.
    sent: Arc<AtomicU64>,
}

impl EventQueue {
    pub(super) fn new(tx: Sender<HostEvent>, budget: usize, sent: Arc<AtomicU64>) -> EventQueue {
        EventQueue {
            tx,
            sizes: VecDeque::new(),
            waiting: 0,
            budget,
            dropped: 0,
            sent,
        }
    }

    /// Forgets the events the embedder has taken.
    fn settle(&mut self) {
        let taken = self.sizes.len().saturating_sub(self.tx.len());
        self.waiting -= self.sizes.drain(..taken).sum::<usize>();
    }

    /// Sends a lifecycle event: never dropped.
    pub(super) fn send(&mut self, event: HostEvent) {
        self.settle();
        self.report_drops();
        self.push(weight(&event), event);
    }

    /// Sends a note or panel update unless the budget is spent; false
    /// when it was dropped (and counted).
    pub(super) fn offer(&mut self, event: HostEvent) -> bool {
        self.settle();
        let size = weight(&event);
        // One event is always let through when nothing waits, so an
        // event larger than the budget is not lost for that alone.
        if self.waiting > 0 && self.waiting + size > self.budget {
            self.dropped += 1;
            return false;
        }
        self.report_drops();
        self.push(size, event);
        true
    }

    /// Sends the count of dropped events, if any (also at shutdown).
    pub(super) fn report_drops(&mut self) {
        if self.dropped > 0 {
            let count = std::mem::take(&mut self.dropped);
            self.push(EVENT_OVERHEAD, HostEvent::EventsDropped { count });
        }
    }

    fn push(&mut self, size: usize, event: HostEvent) {
        if self.tx.send(event).is_ok() {
            self.sent.fetch_add(1, Ordering::SeqCst);
            self.sizes.push_back(size);
            self.waiting += size;
        }
    }
}

/// About the bytes an event holds: its JSON, counted without building it.
fn weight(event: &HostEvent) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(EVENT_OVERHEAD);
    let _ = serde_json::to_writer(&mut count, event);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(n: usize) -> HostEvent {
        HostEvent::Notify {
            extension: "x".into(),
            level: crate::types::Level::Info,
            message: "m".repeat(n),
        }
    }

    #[test]
    fn lifecycle_events_always_pass() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut q = EventQueue::new(tx, 10, Arc::default());
        assert!(q.offer(note(100)));
        q.send(HostEvent::Registered {
            extension: "x".into(),
        });
        assert_eq!(rx.len(), 2);
    }
}
