//! [`later`]: a deadline some time after now that never overflows.

use std::time::{Duration, Instant};

/// `now + d`, or decades away when `d` is too large (`Duration::MAX`
/// says "no timeout").
pub(super) fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}
