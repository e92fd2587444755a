//! How the loop finds out that a running extension is gone (docs/PROTOCOL.md#exits):
//! one sub-state of its phase, [`ExitWatch`]. An exit shows as the end
//! of its stdout, as a failed write to its stdin, or to a poll of the
//! process; each has its own deadline here. The graces are
//! [`Timeouts`]' (`eof_before_hello`, `eof_after_hello`, `exit_silence`,
//! `exit_drain`, `stdin_closed`); the polling steps are below.

use super::later::later;
use crate::config::Timeouts;
use std::time::{Duration, Instant};

/// How often the loop checks that extensions live, while requests wait
/// and while idle: a grandchild holding stdout open hides an exit.
pub(super) const LIVENESS_EVERY: Duration = Duration::from_millis(100);
pub(super) const LIVENESS_IDLE: Duration = Duration::from_secs(1);

/// Polling for an exit starts at this step and doubles up to the next.
const POLL_FIRST: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(50);

/// Whether the extension had said `hello` when its stdout closed.
#[derive(Clone, Copy)]
pub(super) enum Handshake {
    Before,
    After,
}

enum Check {
    /// It should exit soon: poll whether it did, the step doubling.
    Poll(Duration),
    /// Polling found it exited, at this time: its last frames are awaited.
    Drain(Instant),
}

/// What is due for a running extension's exit, at a tick.
pub(super) enum Due {
    /// Poll the process for its exit.
    Poll,
    /// Its exit was found and its pipe may still hold frames: ask whether
    /// anything (a child) can still write to it.
    DrainCheck,
    /// A write failed `stdin_closed` ago: fail what it owes unless it exited.
    Deaf,
    /// Its stdout closed a grace ago: fail it unless it exited.
    Mute,
}

/// The deadlines that find a running extension's exit.
#[derive(Default)]
pub(super) struct ExitWatch {
    /// When to look again at its exit, and why.
    check: Option<(Instant, Check)>,
    /// Its stdout closed: failed then unless it has exited (it can
    /// never answer again).
    eof_at: Option<Instant>,
    /// A write to its stdin failed: what it owes fails then, unless it
    /// has exited (then its exit decides, once its pipe is read).
    deaf_at: Option<Instant>,
}

impl ExitWatch {
    /// The earliest of its deadlines.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let check = self.check.as_ref().map(|(at, _)| *at);
        [check, self.eof_at, self.deaf_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// What is due at `now`, at most one thing per call, in the order
    /// the loop acts on them; `held` says whether something (a child)
    /// can still write to its stdout. The due deadline is consumed.
    pub(super) fn due(
        &mut self,
        now: Instant,
        t: &Timeouts,
        held: impl FnOnce() -> bool,
    ) -> Option<Due> {
        match &self.check {
            // Nothing can write to its stdout any more: however slowly the
            // loop gets to them, the frames left come, then the end of file.
            Some((at, Check::Drain(_))) if *at <= now && !held() => {
                self.drain(now, t);
                return Some(Due::DrainCheck);
            }
            Some((at, _)) if *at <= now => return Some(Due::Poll),
            _ => {}
        }
        if self.deaf_at.take_if(|at| *at <= now).is_some() {
            return Some(Due::Deaf);
        }
        if self.eof_at.take_if(|at| *at <= now).is_some() {
            return Some(Due::Mute);
        }
        None
    }

    /// Polls for its exit from `at` on (it was killed or signalled).
    pub(super) fn poll_from(&mut self, at: Instant) {
        self.check = Some((at, Check::Poll(POLL_FIRST)));
    }

    /// It has not exited yet: polls again, the step doubling.
    pub(super) fn poll_again(&mut self, now: Instant) {
        let step = match self.check {
            Some((_, Check::Poll(s))) => (s * 2).min(POLL_MAX),
            _ => POLL_FIRST,
        };
        self.check = Some((now + step, Check::Poll(step)));
    }

    /// Polling found it exited at `now`: its frames still in the pipe
    /// are awaited, `exit_silence` of silence, before its exit is handled.
    pub(super) fn drain(&mut self, now: Instant, t: &Timeouts) {
        self.check = Some((later(now, t.exit_silence), Check::Drain(now)));
    }

    /// Whether nothing looks at its exit yet.
    pub(super) fn unchecked(&self) -> bool {
        self.check.is_none()
    }

    /// A frame came: a drain waits on, up to `exit_drain` in all (a
    /// grandchild may write forever).
    pub(super) fn frame_came(&mut self, now: Instant, t: &Timeouts) {
        if let Some((at, Check::Drain(seen))) = &mut self.check {
            *at = later(now, t.exit_silence).min(later(*seen, t.exit_drain));
        }
    }

    /// Its stdout closed: it is failed a grace later unless it exits.
    pub(super) fn stdout_closed(&mut self, now: Instant, handshake: Handshake, t: &Timeouts) {
        let grace = match handshake {
            Handshake::Before => t.eof_before_hello,
            Handshake::After => t.eof_after_hello,
        };
        self.eof_at = Some(later(now, grace));
    }

    /// A write to its stdin failed: what it owes fails a grace later.
    pub(super) fn write_failed(&mut self, now: Instant, t: &Timeouts) {
        self.deaf_at = Some(later(now, t.stdin_closed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ExitWatch {
        fn due_t(&mut self, now: Instant, held: impl FnOnce() -> bool) -> Option<Due> {
            self.due(now, &t(), held)
        }
    }

    const MS: Duration = Duration::from_millis(1);

    /// The default graces (docs/PROTOCOL.md#timeouts), as the tests below spell them.
    fn t() -> Timeouts {
        Timeouts::default()
    }

    #[test]
    fn a_mute_extension_is_due_after_its_grace_before_and_after_hello() {
        let t0 = Instant::now();
        for (handshake, grace) in [(Handshake::Before, 100), (Handshake::After, 2000)] {
            let mut w = ExitWatch::default();
            w.stdout_closed(t0, handshake, &t());
            assert_eq!(w.deadline(), Some(t0 + grace * MS));
            assert!(w.due_t(t0 + (grace - 1) * MS, || false).is_none());
            assert!(matches!(
                w.due_t(t0 + grace * MS, || false),
                Some(Due::Mute)
            ));
            assert!(w.due_t(t0 + grace * MS, || false).is_none(), "due once");
        }
    }

    #[test]
    fn polling_doubles_to_fifty_ms() {
        let t0 = Instant::now();
        let mut w = ExitWatch::default();
        w.poll_from(t0);
        let mut at = t0;
        let mut steps = Vec::new();
        for _ in 0..8 {
            assert!(matches!(w.due_t(at, || false), Some(Due::Poll)));
            w.poll_again(at);
            let next = w.deadline().unwrap();
            steps.push((next - at).as_millis());
            at = next;
        }
        assert_eq!(steps, [2, 4, 8, 16, 32, 50, 50, 50]);
    }

    #[test]
    fn a_drain_waits_for_silence_but_not_past_two_seconds() {
        let t0 = Instant::now();
        let mut w = ExitWatch::default();
        w.drain(t0, &t());
        assert_eq!(w.deadline(), Some(t0 + 250 * MS));
        // A frame every 200 ms keeps it waiting, up to 2 s after the exit.
        for i in 1..=12 {
            w.frame_came(t0 + i * 200 * MS, &t());
        }
        assert_eq!(w.deadline(), Some(t0 + 2000 * MS));
        // While a child holds the pipe the drain is polled on; once
        // nothing does, the grace starts over from then.
        assert!(matches!(w.due_t(t0 + 2000 * MS, || true), Some(Due::Poll)));
        let free = t0 + 2000 * MS;
        assert!(matches!(w.due_t(free, || false), Some(Due::DrainCheck)));
        assert_eq!(w.deadline(), Some(free + 250 * MS));
    }

    #[test]
    fn a_failed_write_is_due_two_seconds_later() {
        let t0 = Instant::now();
        let mut w = ExitWatch::default();
        w.write_failed(t0, &t());
        assert!(w.due_t(t0 + 1999 * MS, || false).is_none());
        assert!(matches!(w.due_t(t0 + 2000 * MS, || false), Some(Due::Deaf)));
    }
}
