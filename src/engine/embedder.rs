//! Events on their way to the embedder ([`crate::Host::events`]), their
//! waiting bytes bounded (docs/PROTOCOL.md#ordering): lifecycle events always
//! go through; notes and panel updates are dropped beyond the budget and
//! counted in the next event that gets through. Each event let through
//! is an [`Action::Event`]: the driver sends it, in order with replies.

use super::action::Action;
use crate::types::HostEvent;
use crossbeam_channel::Sender;
use std::collections::VecDeque;

/// Fixed cost counted per event, beyond its JSON.
const EVENT_OVERHEAD: usize = 64;

pub(super) struct EventQueue {
    /// The embedder's channel, only to read how many events wait in it
    /// (the driver sends them).
    gauge: Sender<HostEvent>,
    /// Sizes of the events let through, oldest first. The channel is
    /// FIFO and the driver its only sender, so the last `gauge.len()` of
    /// those handed to the driver are the events still waiting, the
    /// `unsent` after them not sent yet: the rest were taken.
    sizes: VecDeque<usize>,
    unsent: usize,
    waiting: usize,
    budget: usize,
    /// Dropped since the last report.
    dropped: u64,
}

impl EventQueue {
    pub(super) fn new(gauge: Sender<HostEvent>, budget: usize) -> EventQueue {
        EventQueue {
            gauge,
            sizes: VecDeque::new(),
            unsent: 0,
            waiting: 0,
            budget,
            dropped: 0,
        }
    }

    /// The driver took the actions: every event let through is sent.
    pub(super) fn handed_over(&mut self) {
        self.unsent = 0;
    }

    /// Forgets the events the embedder has taken.
    fn settle(&mut self) {
        let left = self.gauge.len() + self.unsent;
        let taken = self.sizes.len().saturating_sub(left);
        self.waiting -= self.sizes.drain(..taken).sum::<usize>();
    }

    /// Sends a lifecycle event: never dropped.
    pub(super) fn send(&mut self, event: HostEvent, actions: &mut Vec<Action>) {
        self.settle();
        self.report_drops(actions);
        self.push(weight(&event), event, actions);
    }

    /// Sends a note or panel update unless the budget is spent; false
    /// when it was dropped (and counted).
    pub(super) fn offer(&mut self, event: HostEvent, actions: &mut Vec<Action>) -> bool {
        self.settle();
        let size = weight(&event);
        // One event is always let through when nothing waits, so an
        // event larger than the budget is not lost for that alone.
        if self.waiting > 0 && self.waiting + size > self.budget {
            self.dropped += 1;
            return false;
        }
        self.report_drops(actions);
        self.push(size, event, actions);
        true
    }

    /// Sends the count of dropped events, if any (also at shutdown).
    pub(super) fn report_drops(&mut self, actions: &mut Vec<Action>) {
        if self.dropped > 0 {
            let count = std::mem::take(&mut self.dropped);
            self.push(EVENT_OVERHEAD, HostEvent::EventsDropped { count }, actions);
        }
    }

    /// Sends `event` itself, as the driver would (tests without one).
    #[cfg(test)]
    pub(super) fn deliver(&self, event: HostEvent) {
        let _ = self.gauge.send(event);
    }

    fn push(&mut self, size: usize, event: HostEvent, actions: &mut Vec<Action>) {
        actions.push(Action::Event(event));
        self.unsent += 1;
        self.sizes.push_back(size);
        self.waiting += size;
    }
}

/// About the bytes an event holds: its JSON, as `zot rpc` writes it
/// (the same serialization, compiled once), and a fixed overhead.
fn weight(event: &HostEvent) -> usize {
    EVENT_OVERHEAD + serde_json::to_vec(event).map_or(0, |json| json.len())
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
        let (tx, _rx) = crossbeam_channel::unbounded();
        let mut q = EventQueue::new(tx, 10);
        let mut actions = Vec::new();
        assert!(q.offer(note(100), &mut actions));
        let registered = HostEvent::Registered {
            extension: "x".into(),
        };
        q.send(registered, &mut actions);
        let events = actions.iter().filter(|a| matches!(a, Action::Event(_)));
        assert_eq!(events.count(), 2);
    }
}
