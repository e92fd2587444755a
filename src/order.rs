//! Replies and host events in the order the host loop produced them
//! (docs/PROTOCOL.md#ordering), for an embedder that pipelines requests.
//!
//! Replies (to [`Request`](crate::Request)s sent with
//! [`HostHandle::submit`](crate::HostHandle::submit)) and
//! [`HostEvent`]s arrive on two channels, so a consumer reading both
//! could handle a note an extension wrote before its answer after that
//! answer. Each reply is stamped with
//! [`HostHandle::events_sent`](crate::HostHandle::events_sent), read in
//! the reply callback (which runs on the loop thread, so the count is
//! exact); [`InOrder`] then handles the events up to that count before
//! the reply, and not one more. Replies are handled in the order received.
//!
//! The blocking calls ([`HostHandle::command`](crate::HostHandle::command), ...) need
//! none of this: a caller that waits for each answer can read the events
//! after it.
//!
//! ```
//! use crossbeam_channel::select;
//! use zot_host::order::{InOrder, Ordered};
//! use zot_host::{Host, HostConfig, HostEvent, Request, Snapshot};
//!
//! /// A reply, stamped with the events the host had sent by then.
//! struct Stamped(u64, Snapshot);
//!
//! #[derive(Default)]
//! struct Log { order: Ordered<Stamped>, lines: Vec<String> }
//!
//! impl InOrder for Log {
//!     type Reply = Stamped;
//!     fn ordered(&mut self) -> &mut Ordered<Stamped> { &mut self.order }
//!     fn after(reply: &Stamped) -> u64 { reply.0 }
//!     fn handle_event(&mut self, event: HostEvent) { self.lines.push(format!("{event:?}")) }
//!     fn handle_reply(&mut self, reply: Stamped) {
//!         self.lines.push(format!("{} extensions", reply.1.extensions.len()))
//!     }
//! }
//!
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
//! let home = std::env::temp_dir().join(format!("zot-order-{}", std::process::id()));
//! let mut config = HostConfig::new(home, root.into());
//! config.ext_paths = vec![root.join("fixtures/examples/weather")];
//! config.discover = false;
//! // This thread waits on channels, not in calls: the loop needs its own.
//! let host = Host::start_threaded(config)?;
//! let (tx, replies) = crossbeam_channel::unbounded();
//! let handle = host.handle();
//! host.submit(Request::List { reply: Box::new(move |r| {
//!     // On the loop thread: the count is exact.
//!     let _ = tx.send(Stamped(handle.events_sent(), r.unwrap_or_default()));
//! })});
//! let mut log = Log::default();
//! while log.lines.iter().all(|l| !l.ends_with("extensions")) {
//!     select! {
//!         recv(host.events()) -> event => log.host_event(event?, &replies),
//!         recv(replies) -> reply => log.host_reply(reply?, host.events()),
//!     }
//! }
//! assert_eq!(log.lines.last().map(String::as_str), Some("1 extensions"));
//! host.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::HostEvent;
use crossbeam_channel::Receiver;
use std::collections::VecDeque;

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

/// A consumer of host events and replies: it says how to handle each,
/// the provided methods feed it in order.
pub trait InOrder {
    /// What the consumer's reply callbacks send it, stamped with
    /// [`HostHandle::events_sent`](crate::HostHandle::events_sent).
    type Reply;

    /// The consumer's held replies and count of events taken.
    fn ordered(&mut self) -> &mut Ordered<Self::Reply>;
    /// Host events sent before `reply` (its stamp): they are handled first.
    fn after(reply: &Self::Reply) -> u64;
    /// Handles a host event, in its place.
    fn handle_event(&mut self, event: HostEvent);
    /// Handles a reply, in its place.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it handled: events by extension name, replies by text.
    #[derive(Default)]
    struct Record {
        order: Ordered<(u64, &'static str)>,
        seen: Vec<String>,
    }

    impl InOrder for Record {
        type Reply = (u64, &'static str);
        fn ordered(&mut self) -> &mut Ordered<Self::Reply> {
            &mut self.order
        }
        fn after(reply: &Self::Reply) -> u64 {
            reply.0
        }
        fn handle_event(&mut self, event: HostEvent) {
            if let HostEvent::ClearNotes { extension } = event {
                self.seen.push(extension);
            }
        }
        fn handle_reply(&mut self, reply: Self::Reply) {
            self.seen.push(reply.1.to_string());
        }
    }

    fn event(name: &str) -> HostEvent {
        HostEvent::ClearNotes {
            extension: name.into(),
        }
    }

    #[test]
    fn a_reply_waits_for_the_events_sent_before_it_and_no_more() {
        let (event_tx, events) = crossbeam_channel::unbounded();
        let (reply_tx, replies) = crossbeam_channel::unbounded();
        for name in ["e1", "e2", "e3"] {
            event_tx.send(event(name)).unwrap();
        }
        reply_tx.send((2, "after two")).unwrap();
        reply_tx.send((3, "after three")).unwrap();
        let mut r = Record::default();
        // The replies came first: each still follows its events.
        r.host_reply(replies.recv().unwrap(), &events);
        assert_eq!(r.seen, ["e1", "e2", "after two"]);
        r.drain(&replies, &events);
        assert_eq!(r.seen, ["e1", "e2", "after two", "e3", "after three"]);
    }

    #[test]
    fn an_event_goes_after_the_replies_sent_before_it() {
        let (reply_tx, replies) = crossbeam_channel::unbounded();
        reply_tx.send((0, "early")).unwrap();
        let mut r = Record::default();
        r.host_event(event("e1"), &replies);
        assert_eq!(r.seen, ["early", "e1"]);
        // A reply that waits for an event not taken yet is held.
        reply_tx.send((2, "late")).unwrap();
        r.host_event(event("e2"), &replies);
        assert_eq!(r.seen, ["early", "e1", "e2", "late"]);
    }
}
