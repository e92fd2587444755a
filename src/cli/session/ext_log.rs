//! Lines the session appends to an extension's log, for what an
//! extension keeps doing wrong (too many panels, submissions, renders
//! of panels that are not open): said at the 1st, 10th, 100th... time.

use std::io::{self, Write};

/// 1, 10, 100...: when a line repeated that often is logged again.
pub fn power_of_ten(n: u64) -> bool {
    std::iter::successors(Some(1u64), |p| p.checked_mul(10)).any(|p| p == n)
}

/// Appends a `[zot]` line to the extension's log (the session has no
/// handle on it; appending keeps lines whole beside the host's own).
pub fn log_line(extension: &str, msg: &str) {
    let Ok(home) = crate::cli::common::zot_home() else {
        return;
    };
    let logs = zot_host::internal::discovery::logs_dir(&home);
    let path = zot_host::internal::log::log_path(&logs, extension);
    let line = format!("[zot] {} {msg}\n", zot_host::internal::log::timestamp());
    let written = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if written.is_err() {
        // stderr may be gone or full too: nothing more to do then.
        let _ = writeln!(io::stderr(), "[zot] ext-{extension}: {msg}");
    }
}
