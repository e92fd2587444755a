//! One extension's crash history (docs/PROTOCOL.md#supervision): the
//! backoff before its next restart, or when to give up.

use std::time::{Duration, Instant};

/// Crashes older than this no longer count towards giving up.
const CRASH_WINDOW: Duration = Duration::from_secs(180);
/// The crash within [`CRASH_WINDOW`] after which the host gives up.
pub(super) const MAX_CRASHES: usize = 5;
/// The backoff doubles per crash, up to this many times its base.
const MAX_BACKOFF_FACTOR: u32 = 16;

/// One extension's crash history.
#[derive(Debug, Default)]
pub(super) struct Supervision {
    /// When it crashed, within [`CRASH_WINDOW`].
    crashes: Vec<Instant>,
    /// Crashes since it last ran for [`CRASH_WINDOW`] without one: the
    /// backoff grows with it, so a slow crash loop also backs off to 8 s.
    pub(super) streak: u32,
    /// Restarts since it was (re)loaded.
    pub(super) restarts: u32,
    /// Its `intercept` list is from its previous run: it has not
    /// subscribed again yet, so it cannot answer but still counts.
    pub(super) remembered: bool,
    /// It became ready since it was (re)loaded.
    pub(super) ready_once: bool,
}

impl Supervision {
    /// Records a crash at `now`: the backoff before the restart, or
    /// `None` at the 5th crash within the window: give up.
    pub(super) fn crashed(&mut self, now: Instant, base: Duration) -> Option<Duration> {
        let recent = |t: &Instant| now.saturating_duration_since(*t) < CRASH_WINDOW;
        if !self.crashes.last().is_some_and(recent) {
            self.streak = 0;
        }
        self.crashes.retain(recent);
        self.crashes.push(now);
        self.streak = self.streak.saturating_add(1);
        if self.crashes.len() >= MAX_CRASHES {
            return None;
        }
        let factor = 1u32
            .checked_shl(self.streak - 1)
            .map_or(MAX_BACKOFF_FACTOR, |f| f.min(MAX_BACKOFF_FACTOR));
        Some(base.saturating_mul(factor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap_and_gives_up_at_the_fifth_crash_in_the_window() {
        let (t0, base) = (Instant::now(), Duration::from_millis(500));
        let after = |s: &mut Supervision, at: Duration| {
            s.crashed(t0 + at, base).map(|d| d.as_millis() as u64)
        };
        let mut fast = Supervision::default();
        let fast: Vec<_> = (0..5).map(|i| after(&mut fast, base * i)).collect();
        assert_eq!(fast, [Some(500), Some(1000), Some(2000), Some(4000), None]);
        // One crash a minute is never 5 within 3 minutes; after 3 quiet
        // minutes (the last crash at 6, the next at 9) it starts over.
        let mut slow = Supervision::default();
        let minutes = [0, 1, 2, 3, 4, 5, 6, 9];
        let slow = minutes.map(|m| after(&mut slow, Duration::from_secs(60 * m)));
        let capped = [500, 1000, 2000, 4000, 8000, 8000, 8000, 500];
        assert_eq!(slow, capped.map(Some));
    }
}
