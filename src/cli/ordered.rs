//! Replies to pipelined requests and host events, handled in the order
//! the host loop produced them (SPEC 3.17).
//!
//! Replies and events arrive on two channels. Each reply carries how
//! many events the host had sent when it replied; events up to that
//! count are handled before the reply, and not one more, so what one
//! extension writes keeps its order, also a note written after an
//! answer. Replies are handled in the order received.

use crossbeam_channel::Receiver;
use std::collections::VecDeque;
use zot_host::HostEvent;

/// Replies received and not yet handled, and the events handled so far.
pub struct Ordered<R> {
    held: VecDeque<R>,
    taken: u64,
}

impl<R> Default for Ordered<R> {
    fn default() -> Self {
        Ordered {
            held: VecDeque::new(),
            taken: 0,
        }
    }
}

/// A consumer of host events and replies; the provided methods feed it
/// in order.
pub trait InOrder {
    type Reply;

    fn ordered(&mut self) -> &mut Ordered<Self::Reply>;
    /// Host events sent before `reply`: they are handled first.
    fn after(reply: &Self::Reply) -> u64;
    fn handle_event(&mut self, event: HostEvent);
    fn handle_reply(&mut self, reply: Self::Reply);

    /// Handles `event` now, counting it.
    fn take_event(&mut self, event: HostEvent) {
        self.ordered().taken += 1;
        self.handle_event(event);
    }

    /// A host event, in its place among the replies: every reply the
    /// host sent before it is waiting already and goes first; a reply
    /// that waited for it follows it.
    fn host_event(&mut self, event: HostEvent, replies: &Receiver<Self::Reply>) {
        self.ordered().held.extend(replies.try_iter());
        self.release(None);
        self.take_event(event);
        self.release(None);
    }

    /// A reply just received, with the events it waits for.
    fn host_reply(&mut self, reply: Self::Reply, events: &Receiver<HostEvent>) {
        self.ordered().held.push_back(reply);
        self.release(Some(events));
    }

    /// Every reply already sent, with the events they wait for.
    fn drain(&mut self, replies: &Receiver<Self::Reply>, events: &Receiver<HostEvent>) {
        self.ordered().held.extend(replies.try_iter());
        self.release(Some(events));
    }

    /// Handles the held replies in order. A reply that follows host
    /// events not yet taken waits for them: with `events` they are taken
    /// now (the host sent them before the reply, so they are there),
    /// otherwise it and the replies after it stay held.
    fn release(&mut self, events: Option<&Receiver<HostEvent>>) {
        while let Some(reply) = self.ordered().held.pop_front() {
            while self.ordered().taken < Self::after(&reply) {
                match events.map(Receiver::recv) {
                    Some(Ok(event)) => self.take_event(event),
                    Some(Err(_)) => break,
                    None => return self.ordered().held.push_front(reply),
                }
            }
            self.handle_reply(reply);
        }
    }
}
