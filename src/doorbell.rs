//! How the thread that runs the host loop sleeps until something comes:
//! in one poll(2) over the extensions' stdout pipes and the bell's
//! socket, which whoever sends on one of the channels it waits on rings
//! by writing a byte, only while it sleeps.
//!
//! Why not a `select!` over the channels: the frames do not come through
//! a channel (the loop reads stdout itself: `process.rs`), and crossbeam's
//! blocking receive spins and then yields the CPU a few times before it
//! parks; on one CPU each yield hands the CPU to a thread that can run,
//! about two more context switches per call.
//!
//! No wake-up is lost: the sleeper sets `sleeping` and then looks at its
//! channels once more; a sender puts its message in and then reads
//! `sleeping`. With a `SeqCst` fence between the write and the read on
//! both sides, at least one of them sees the other's write: the sleeper
//! sees the message, or the sender sees it asleep and writes the byte,
//! which a poll(2) not yet begun sees as well. The drop of a channel's
//! last sender rings too, and the next sleep does not wait: it
//! disconnected the channel, which an empty channel's `is_empty` does not
//! say.
//!
//! The CLI surfaces' own channels (their stdin lines, the stdout thread's
//! news, replies for them) ring the same bell: their main thread runs the
//! loop and sleeps there, and a message on its channel ends the turn.

use crate::process::{poll, pollfd};
use crossbeam_channel::{
    Receiver, RecvError, SendError, SendTimeoutError, Sender, TryRecvError, TrySendError,
};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest one sleep lasts: a sleeper without deadline looks again.
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);

/// How often a loop without its wake-up socket looks at its channels.
const BLIND_SLEEP: Duration = Duration::from_millis(10);

/// Rung by the senders of the channels one thread waits on: the thread
/// that runs a host's loop. A CLI surface makes one for its host
/// (`internal::surface`), so that its own channel's senders ring it too.
pub struct Doorbell {
    sleeping: AtomicBool,
    /// A channel's last sender was dropped since the last sleep: the
    /// channel disconnected, which `ready()` cannot tell.
    hung_up: AtomicBool,
    /// A ring writes a byte to the first while the loop sleeps; its
    /// poll(2) watches the second. `None` when the pair could not be
    /// made (out of descriptors): the loop then looks every 10 ms.
    wake: Option<(UnixStream, UnixStream)>,
}

impl Default for Doorbell {
    fn default() -> Self {
        let pair = UnixStream::pair().ok().filter(|(tx, rx)| {
            // Neither end may block: a ring must not wait for the
            // sleeper, nor the sleeper's drain for a ring.
            tx.set_nonblocking(true).is_ok() && rx.set_nonblocking(true).is_ok()
        });
        Doorbell {
            sleeping: AtomicBool::new(false),
            hung_up: AtomicBool::new(false),
            wake: pair,
        }
    }
}

impl Doorbell {
    /// Waits until the bell rings, one of `fds` is ready (poll(2): their
    /// `revents` say which) or `until` passes. When `ready()` holds once
    /// the bell is armed it only looks at `fds`, without waiting. It may
    /// return early (a spurious wake-up): the caller looks anyway.
    pub(crate) fn sleep(
        &self,
        until: Option<Instant>,
        ready: impl FnOnce() -> bool,
        fds: &mut Vec<libc::pollfd>,
    ) {
        self.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let waiting = self.hung_up.swap(false, Ordering::SeqCst) || ready();
        let mut left = match (waiting, until) {
            (true, _) => Duration::ZERO,
            (false, None) => LONGEST_SLEEP,
            (false, Some(d)) => d.saturating_duration_since(Instant::now()),
        };
        left = left.min(LONGEST_SLEEP);
        if self.wake.is_none() {
            left = left.min(BLIND_SLEEP);
        }
        let wake = self.wake.as_ref().map_or(-1, |(_, rx)| rx.as_raw_fd());
        fds.push(pollfd(wake, libc::POLLIN));
        // Whole milliseconds, never fewer than left: woken before its
        // deadline, the loop would only sleep again.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        if !(left.is_zero() && fds.len() == 1) {
            poll(fds, ms);
        }
        let rung = fds.pop().is_some_and(|w| w.revents != 0);
        self.sleeping.store(false, Ordering::SeqCst);
        if let (true, Some((_, rx))) = (rung, &self.wake) {
            // Every ring since the last drain; one that comes after
            // this only makes the next sleep return at once.
            let (mut rx, mut buf) = (rx, [0u8; 64]);
            while matches!(rx.read(&mut buf), Ok(n) if n > 0) {}
        }
    }

    /// Wakes the sleeper, if it sleeps; call it after the send.
    pub(crate) fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            if let Some((tx, _)) = &self.wake {
                // Full only when rung many times already: it wakes.
                let mut tx = tx;
                let _ = tx.write(&[1]);
            }
        }
    }
}

/// A channel's sender that rings its receiver's bell after each send,
/// and when the last clone is dropped (that disconnects the channel).
pub struct BellSender<T> {
    /// Shared by the clones: only the last one's drop drops the sender
    /// (disconnecting the channel) and rings; the others' wake nobody.
    /// `None` only while it is dropped.
    tx: Option<Arc<Sender<T>>>,
    bell: Arc<Doorbell>,
}

impl<T> Clone for BellSender<T> {
    fn clone(&self) -> Self {
        BellSender {
            tx: self.tx.clone(),
            bell: self.bell.clone(),
        }
    }
}

impl<T> Drop for BellSender<T> {
    fn drop(&mut self) {
        // Exactly one of clones dropped at once gets the sender.
        if let Some(tx) = self.tx.take().and_then(Arc::into_inner) {
            drop(tx);
            self.bell.hung_up.store(true, Ordering::SeqCst);
            self.bell.ring();
        }
    }
}

impl<T> BellSender<T> {
    /// Sends (blocking while a bounded channel is full), then rings.
    pub fn send(&self, msg: T) -> Result<(), SendError<T>> {
        let Some(tx) = &self.tx else {
            return Err(SendError(msg));
        };
        let sent = tx.send(msg);
        self.bell.ring();
        sent
    }

    /// Sends if there is room, then rings; a full channel already
    /// holds a message its receiver has not taken, and is not rung.
    pub fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        let Some(tx) = &self.tx else {
            return Err(TrySendError::Disconnected(msg));
        };
        tx.try_send(msg)?;
        self.bell.ring();
        Ok(())
    }

    /// [`BellSender::send`], waiting at most `timeout` for room.
    pub(crate) fn send_timeout(
        &self,
        msg: T,
        timeout: Duration,
    ) -> Result<(), SendTimeoutError<T>> {
        let Some(tx) = &self.tx else {
            return Err(SendTimeoutError::Disconnected(msg));
        };
        tx.send_timeout(msg, timeout)?;
        self.bell.ring();
        Ok(())
    }

    /// Messages waiting in the channel.
    pub(crate) fn len(&self) -> usize {
        self.tx.as_ref().map_or(0, |tx| tx.len())
    }
}

/// A sender nobody sleeps on (for tests that read the channel themselves).
impl<T> From<Sender<T>> for BellSender<T> {
    fn from(tx: Sender<T>) -> Self {
        BellSender {
            tx: Some(Arc::new(tx)),
            bell: Arc::default(),
        }
    }
}

/// The receiving end of a [`channel`] made for a CLI surface: its
/// senders ring the bell, so the loop that sleeps on that bell returns
/// for its messages (`Host::poll_with` takes only this kind).
pub struct BellReceiver<T>(Receiver<T>);

impl<T> BellReceiver<T> {
    /// Waits for a message, outside the host loop.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.0.recv()
    }

    /// A message if one waits.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.0.try_recv()
    }

    /// The channel, for the loop's wait.
    pub(crate) fn receiver(&self) -> &Receiver<T> {
        &self.0
    }
}

/// An unbounded (`None`) or bounded channel whose sender rings `bell`.
pub(crate) fn channel<T>(
    bell: &Arc<Doorbell>,
    bound: Option<usize>,
) -> (BellSender<T>, Receiver<T>) {
    let (tx, rx) = match bound {
        Some(n) => crossbeam_channel::bounded(n),
        None => crossbeam_channel::unbounded(),
    };
    let bell = bell.clone();
    let tx = Some(Arc::new(tx));
    (BellSender { tx, bell }, rx)
}

/// [`channel`] with its receiving end as a [`BellReceiver`].
pub(crate) fn bell_channel<T>(
    bell: &Arc<Doorbell>,
    bound: Option<usize>,
) -> (BellSender<T>, BellReceiver<T>) {
    let (tx, rx) = channel(bell, bound);
    (tx, BellReceiver(rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn a_send_from_another_thread_wakes_the_sleeper() {
        let bell = Arc::new(Doorbell::default());
        let (tx, rx) = channel::<u32>(&bell, None);
        let from = thread::spawn(move || {
            for i in 0..2000 {
                tx.send(i).unwrap();
            }
        });
        // No deadline: a lost wake-up would hang here, not pass.
        let mut got = 0;
        while got < 2000 {
            bell.sleep(None, || !rx.is_empty(), &mut Vec::new());
            while rx.try_recv().is_ok() {
                got += 1;
            }
        }
        from.join().unwrap();
    }

    #[test]
    fn only_the_last_senders_drop_hangs_up() {
        let bell = Arc::new(Doorbell::default());
        let (tx, rx) = bell_channel::<u32>(&bell, Some(1));
        drop(tx.clone());
        let hung_up = || bell.hung_up.load(Ordering::SeqCst);
        assert!(!hung_up(), "a clone's drop marked the channel disconnected");
        tx.try_send(1).unwrap();
        assert!(tx.try_send(2).unwrap_err().is_full());
        drop(tx);
        assert!(hung_up(), "the last sender's drop did not ring");
        assert_eq!(rx.try_recv(), Ok(1));
        assert!(rx.try_recv().unwrap_err().is_disconnected());
    }
}
