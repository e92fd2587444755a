//! How the loop finds out that a running extension is gone (docs/PROTOCOL.md#exits):
//! one sub-state of its phase, [`ExitWatch`]. Its exit is an event: its
//! waiter thread says it exited (`process/mod.rs`), and the driver reaps
//! it then. Nothing is polled. What is left are deadlines: the drain of
//! the frames still in its pipe once it exited, the grace after its
//! stdout closed while it runs, and the grace after a failed write to
//! its stdin. The graces are [`Timeouts`]' (`eof_before_hello`,
//! `eof_after_hello`, `exit_silence`, `exit_drain`, `stdin_closed`).

use super::later::later;
use crate::config::Timeouts;
use std::process::ExitStatus;
use std::time::Instant;

/// Whether the extension had said `hello` when its stdout closed.
#[derive(Clone, Copy)]
pub(super) enum Handshake {
    Before,
    After,
}

/// It exited before its stdout ended: the frames still in its pipe are
/// awaited before its exit is handled.
struct Drain {
    /// When to look at its stdout again.
    at: Instant,
    /// When the drain began: it waits no longer than `exit_drain` past it.
    since: Instant,
    /// How it exited.
    status: ExitStatus,
}

/// What is due for a running extension's exit, at a tick.
pub(super) enum Due {
    /// It exited and a drain ended with its stdout still held (a child
    /// writes on, or keeps it open): its exit is handled now.
    Exit(ExitStatus),
    /// It exited and nothing can write to its stdout any more: the frames
    /// left come, then the end of file, which handles its exit.
    DrainCheck,
    /// A write failed `stdin_closed` ago: fail what it owes unless it exited.
    Deaf,
    /// Its stdout closed a grace ago: fail it unless it exited.
    Mute,
}

/// The deadlines that find a running extension's exit.
#[derive(Default)]
pub(super) struct ExitWatch {
    /// It exited before its stdout ended: its last frames are awaited.
    drain: Option<Drain>,
    /// Its stdout has ended: every frame it wrote has come.
    stdout_ended: bool,
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
        let drain = self.drain.as_ref().map(|d| d.at);
        [drain, self.eof_at, self.deaf_at]
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
        if let Some(drain) = self.drain.take_if(|d| d.at <= now) {
            if held() {
                return Some(Due::Exit(drain.status));
            }
            // Nothing can write to its stdout any more: however slowly the
            // loop gets to them, the frames left come, then the end of file.
            self.exited(now, drain.status, t);
            return Some(Due::DrainCheck);
        }
        if self.deaf_at.take_if(|at| *at <= now).is_some() {
            return Some(Due::Deaf);
        }
        if self.eof_at.take_if(|at| *at <= now).is_some() {
            return Some(Due::Mute);
        }
        None
    }

    /// It exited at `now` with `status` and its stdout has not ended: its
    /// frames still in the pipe are awaited, `exit_silence` of silence,
    /// before its exit is handled.
    pub(super) fn exited(&mut self, now: Instant, status: ExitStatus, t: &Timeouts) {
        self.drain = Some(Drain {
            at: later(now, t.exit_silence),
            since: now,
            status,
        });
    }

    /// How it exited, when it is known to have (its last frames are
    /// being awaited).
    pub(super) fn exit_status(&self) -> Option<ExitStatus> {
        self.drain.as_ref().map(|d| d.status)
    }

    /// Whether its stdout has ended: a known exit is handled at once.
    pub(super) fn stdout_ended(&self) -> bool {
        self.stdout_ended
    }

    /// A frame came: a drain waits on, up to `exit_drain` in all (a
    /// grandchild may write forever).
    pub(super) fn frame_came(&mut self, now: Instant, t: &Timeouts) {
        if let Some(d) = &mut self.drain {
            d.at = later(now, t.exit_silence).min(later(d.since, t.exit_drain));
        }
    }

    /// Its stdout ended; while it is expected to answer (`handshake`
    /// says at which point), it is failed a grace later unless it exits.
    pub(super) fn stdout_closed(
        &mut self,
        now: Instant,
        handshake: Option<Handshake>,
        t: &Timeouts,
    ) {
        self.stdout_ended = true;
        let grace = match handshake {
            Some(Handshake::Before) => t.eof_before_hello,
            Some(Handshake::After) => t.eof_after_hello,
            None => return,
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
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;

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

    /// `exit code 3`.
    fn code3() -> ExitStatus {
        ExitStatus::from_raw(3 << 8)
    }

    #[test]
    fn a_mute_extension_is_due_after_its_grace_before_and_after_hello() {
        let t0 = Instant::now();
        for (handshake, grace) in [(Handshake::Before, 100), (Handshake::After, 2000)] {
            let mut w = ExitWatch::default();
            w.stdout_closed(t0, Some(handshake), &t());
            assert!(w.stdout_ended());
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
    fn nothing_is_due_while_nothing_happened_and_a_stopping_eof_has_no_grace() {
        let t0 = Instant::now();
        let mut w = ExitWatch::default();
        assert_eq!(w.deadline(), None, "no polling: no deadline");
        assert!(w.due_t(t0 + 3600 * 1000 * MS, || true).is_none());
        w.stdout_closed(t0, None, &t());
        assert!(w.stdout_ended() && w.deadline().is_none());
    }

    #[test]
    fn a_drain_waits_for_silence_but_not_past_two_seconds() {
        let t0 = Instant::now();
        let mut w = ExitWatch::default();
        w.exited(t0, code3(), &t());
        assert_eq!(w.exit_status(), Some(code3()));
        assert_eq!(w.deadline(), Some(t0 + 250 * MS));
        // A frame every 200 ms keeps it waiting, up to 2 s after the exit.
        for i in 1..=12 {
            w.frame_came(t0 + i * 200 * MS, &t());
        }
        assert_eq!(w.deadline(), Some(t0 + 2000 * MS));
        // Once nothing holds the pipe the grace starts over from then,
        // for the end of file behind the last frames.
        let free = t0 + 2000 * MS;
        assert!(matches!(w.due_t(free, || false), Some(Due::DrainCheck)));
        assert_eq!(w.deadline(), Some(free + 250 * MS));
        // While a child holds it, the exit is handled at the deadline.
        let held = free + 250 * MS;
        assert!(matches!(w.due_t(held, || true), Some(Due::Exit(s)) if s == code3()));
        assert_eq!(w.deadline(), None, "due once");
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
