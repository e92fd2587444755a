//! Per-extension log files: the extension's stderr and the host's own
//! `[zot]` lines for it, in `$ZOT_HOME/logs/ext-<name>.log` (SPEC 3.4).
//!
//! The log is rotated to `.log.1` when its extension starts and, while
//! it runs, before any write that would take it over the limit, so one
//! extension's logs stay under two times the limit on disk however much
//! it writes. The child's stderr reaches the file through a pump thread
//! (see `process.rs`) that writes here, which is what lets a running
//! log rotate.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Default size at which a log is rotated to `.log.1`.
pub const ROTATE_BYTES: u64 = 8 * 1024 * 1024;

/// Path of an extension's log file.
pub fn log_path(logs_dir: &Path, name: &str) -> PathBuf {
    logs_dir.join(format!("ext-{name}.log"))
}

/// An extension's log. Cheap to clone; every clone appends to the same
/// file. When the file cannot be opened, lines go to the host's stderr.
#[derive(Clone, Debug)]
pub struct ExtLog {
    name: Arc<str>,
    file: Option<Arc<LogFile>>,
}

/// The open log file, its size and where it rotates.
#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    limit: u64,
    /// The file and the bytes in it; one lock keeps rotation and
    /// writes from different threads in order.
    state: Mutex<(File, u64)>,
}

impl ExtLog {
    /// Opens (creating directories, rotating a large file) the log of
    /// `name`, rotating at [`ROTATE_BYTES`].
    pub fn open(logs_dir: &Path, name: &str) -> ExtLog {
        ExtLog::open_with_limit(logs_dir, name, ROTATE_BYTES)
    }

    /// Opens the log of `name`, rotating it whenever it would grow past
    /// `limit` bytes.
    pub fn open_with_limit(logs_dir: &Path, name: &str, limit: u64) -> ExtLog {
        let path = log_path(logs_dir, name);
        let file = open_rotated(&path, limit)
            .map_err(|e| eprintln!("zot: cannot open log {}: {e}", path.display()))
            .ok();
        ExtLog {
            name: name.into(),
            file: file.map(|(file, len)| {
                Arc::new(LogFile {
                    path,
                    limit,
                    state: Mutex::new((file, len)),
                })
            }),
        }
    }

    /// A log that writes only to the host's stderr.
    pub fn stderr(name: &str) -> ExtLog {
        ExtLog {
            name: name.into(),
            file: None,
        }
    }

    /// Whether lines go to a log file (rather than the host's stderr).
    pub fn has_file(&self) -> bool {
        self.file.is_some()
    }

    /// A handle for the child's stderr: a pipe to be pumped into the log
    /// with [`ExtLog::append`], or the host's stderr when there is no file.
    pub fn child_stderr(&self) -> std::process::Stdio {
        match self.file {
            Some(_) => std::process::Stdio::piped(),
            None => std::process::Stdio::inherit(),
        }
    }

    /// Appends raw bytes (the child's stderr), rotating first when they
    /// would take the file over its limit.
    pub fn append(&self, bytes: &[u8]) {
        let written = self.file.as_ref().is_some_and(|f| f.write(bytes).is_ok());
        if !written {
            let _ = io::stderr().write_all(bytes);
        }
    }

    /// Appends one `[zot] <timestamp> <msg>` line.
    pub fn line(&self, msg: &str) {
        let text = format!("[zot] {} {msg}\n", timestamp());
        // One write per line keeps lines whole next to the child's output.
        let written = self
            .file
            .as_ref()
            .is_some_and(|f| f.write(text.as_bytes()).is_ok());
        if !written {
            eprintln!("[zot] {} ext-{}: {msg}", timestamp(), self.name);
        }
    }
}

impl LogFile {
    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (file, len) = &mut *state;
        if *len > 0 && *len + bytes.len() as u64 > self.limit {
            rotate(&self.path)?;
            *file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            *len = 0;
        }
        file.write_all(bytes)?;
        *len += bytes.len() as u64;
        Ok(())
    }
}

/// Opens `path` for appending, first rotating it when it is over
/// `limit`; returns the file and its length.
fn open_rotated(path: &Path, limit: u64) -> io::Result<(File, u64)> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() > limit) {
        rotate(path)?;
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let len = file.metadata()?.len();
    Ok((file, len))
}

/// Renames `path` to `path.1`, replacing an older `.1`.
fn rotate(path: &Path) -> io::Result<()> {
    let mut rotated = path.as_os_str().to_owned();
    rotated.push(".1");
    std::fs::rename(path, rotated)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn rotates_large_logs() {
        let dir = std::env::temp_dir().join(format!("zot-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = log_path(&dir, "x");
        std::fs::write(&path, vec![b'a'; ROTATE_BYTES as usize + 1]).unwrap();
        ExtLog::open(&dir, "x").line("hello");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("[zot] ") && text.ends_with(" hello\n"),
            "{text}"
        );
        assert!(dir.join("ext-x.log.1").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rotates_while_running() {
        let dir = std::env::temp_dir().join(format!("zot-log-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = ExtLog::open_with_limit(&dir, "x", 1000);
        for _ in 0..100 {
            log.append(&[b'e'; 99]);
            log.line("between");
        }
        let size = |p: &str| std::fs::metadata(dir.join(p)).unwrap().len();
        assert!(size("ext-x.log") <= 1000 && size("ext-x.log.1") <= 1000);
        assert!(size("ext-x.log.1") > 500, "the old half is kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
