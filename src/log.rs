//! Per-extension logs, `$ZOT_HOME/logs/ext-<name>.log` (docs/PROTOCOL.md#processes-and-logs): the
//! extension's stderr (copied here by its stderr thread, see `process/mod.rs`)
//! and the host's own `[zot]` lines for it. Before any write that would
//! take the file over its limit, it is renamed to `.log.1`, so one
//! extension's logs stay under twice the limit however much it writes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest message of one `[zot]` line: many quote what an extension
/// sent (a name, a frame), which may be megabytes.
const MAX_LINE_MSG: usize = 4096;

/// Path of an extension's log file.
pub fn log_path(logs_dir: &Path, name: &str) -> PathBuf {
    logs_dir.join(format!("ext-{name}.log"))
}

/// An extension's log. Clones append to the same file; without a file
/// (it could not be opened) lines go to the host's stderr: the child's
/// as written, like the file, and the host's own made [`inert`].
#[derive(Clone, Debug)]
pub(crate) struct ExtLog {
    name: Arc<str>,
    /// One lock keeps rotation and the writes of several threads in order.
    file: Option<Arc<Mutex<LogFile>>>,
}

#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    limit: u64,
    file: File,
    len: u64,
}

impl ExtLog {
    /// Opens (creating its directory) the log of `name`, rotated
    /// whenever a write would take it past `limit` bytes.
    pub(crate) fn open(logs_dir: &Path, name: &str, limit: u64) -> ExtLog {
        let path = log_path(logs_dir, name);
        let opened = LogFile::open(logs_dir, &path, limit);
        let file = opened
            .inspect_err(|e| eprintln!("zot: cannot open log {}: {e}", path.display()))
            .ok();
        ExtLog {
            name: name.into(),
            file: file.map(|f| Arc::new(Mutex::new(f))),
        }
    }

    /// A log that writes only to the host's stderr.
    pub(crate) fn stderr(name: &str) -> ExtLog {
        ExtLog {
            name: name.into(),
            file: None,
        }
    }

    /// Whether it has a file: then the child's stderr is copied into it
    /// (by its stderr thread, `process/mod.rs`); else the child's stderr is
    /// the host's.
    pub(crate) fn has_file(&self) -> bool {
        self.file.is_some()
    }

    /// Appends raw bytes (the child's stderr).
    pub(crate) fn append(&self, bytes: &[u8]) {
        if !self.write(bytes) {
            let _ = io::stderr().write_all(bytes);
        }
    }

    /// Appends one `[zot] <timestamp> <msg>` line, `msg` made [`inert`]:
    /// it may quote what the extension wrote, and `zot ext logs` piped
    /// copies the file as it is.
    pub(crate) fn line(&self, msg: &str) {
        let mut cut = msg.len().min(MAX_LINE_MSG);
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        let msg = match &msg[cut..] {
            "" => msg.to_string(),
            rest => format!("{}... ({} more bytes)", &msg[..cut], rest.len()),
        };
        // One write per line keeps lines whole next to the child's output.
        let msg = inert(&msg);
        let text = format!("[zot] {} {msg}\n", timestamp());
        if !self.write(text.as_bytes()) {
            let line = format!("[zot] {} ext-{}: {msg}", timestamp(), self.name);
            eprintln!("{}", inert(&line));
        }
    }

    /// Writes to the file; false when there is none or the write failed.
    fn write(&self, bytes: &[u8]) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
        file.write(bytes).is_ok()
    }
}

impl LogFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.len > 0 && self.len + bytes.len() as u64 > self.limit {
            rotate(&self.path)?;
            self.file = append_to(&self.path)?;
            self.len = 0;
        }
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Opens (making its directory when missing) the log at `path`,
    /// rotated first when it is over `limit` already.
    fn open(logs_dir: &Path, path: &Path, limit: u64) -> io::Result<LogFile> {
        // The directory is made only when missing: a host starting
        // many extensions opens their logs one after another.
        let mut file = match append_to(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(logs_dir)?;
                append_to(path)?
            }
            opened => opened?,
        };
        let mut len = file.metadata()?.len();
        // Rotated at start too (docs/PROTOCOL.md#processes-and-logs), not only at the first write:
        // a second handle on the same log (a shadowed copy's note)
        // could otherwise rotate first and its note be rotated over
        // the previous run's log.
        if len > limit {
            drop(file);
            rotate(path)?;
            file = append_to(path)?;
            len = file.metadata()?.len();
        }
        Ok(LogFile {
            path: path.to_path_buf(),
            limit,
            file,
            len,
        })
    }
}

/// Renames `path` to `path.1`, replacing an older `.1`.
fn rotate(path: &Path) -> io::Result<()> {
    let mut rotated = path.as_os_str().to_owned();
    rotated.push(".1");
    std::fs::rename(path, rotated)
}

fn append_to(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Text from an extension as it may reach a terminal: a control
/// character there acts (an escape sequence moves the cursor over
/// earlier lines, retitles the window, writes the clipboard; `\r`
/// overwrites the prefix), so each is shown instead: `^[` (caret
/// notation) for C0 and DEL, `\u{9b}` for C1. Tabs are kept. Newlines
/// too are shown: callers split lines first where they mean to keep them.
pub fn inert(text: &str) -> std::borrow::Cow<'_, str> {
    let acts = |c: char| c.is_control() && c != '\t';
    if !text.contains(acts) {
        return text.into();
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match u8::try_from(c) {
            _ if !acts(c) => shown.push(c),
            Ok(b) if b < 0x20 => shown.extend(['^', char::from(b + 0x40)]),
            Ok(0x7f) => shown.push_str("^?"),
            _ => shown.extend(c.escape_unicode()),
        }
    }
    shown.into()
}

/// UTC time as `2026-11-29T23:59:23.123Z`, without a date crate.
pub fn timestamp() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        now.subsec_millis()
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `30 s` or `250 ms`: whole seconds when exact, else milliseconds.
/// Milliseconds as u64 (585 million years): formatting a u128 would
/// link a formatter of its own (`make static` shows its size).
pub(crate) fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    /// The logs directory is made when missing, parents included.
    #[test]
    fn a_missing_logs_directory_is_made() {
        let root = std::env::temp_dir().join(format!("zot-logdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("home/logs");
        ExtLog::open(&dir, "x", 1000).line("first");
        let text = std::fs::read_to_string(log_path(&dir, "x")).unwrap();
        assert!(text.ends_with(" first\n"), "{text}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A log over the limit rotates on the first line after it opens
    /// (docs/PROTOCOL.md#processes-and-logs: when the extension starts); rotation while it runs is
    /// tests/hostile.rs's flood test.
    #[test]
    fn a_large_log_rotates_when_opened() {
        let dir = std::env::temp_dir().join(format!("zot-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = log_path(&dir, "x");
        std::fs::write(&path, vec![b'a'; 1001]).unwrap();
        // The owner opens first; a second handle (a shadowed copy's
        // note) writes before the owner does: the old log stays in `.1`.
        let owner = ExtLog::open(&dir, "x", 1000);
        ExtLog::open(&dir, "x", 1000).line("shadowed");
        owner.line("hello");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("[zot] ")
                && text.contains(" shadowed\n")
                && text.ends_with(" hello\n"),
            "{text}"
        );
        assert_eq!(
            std::fs::metadata(dir.join("ext-x.log.1")).unwrap().len(),
            1001
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
