//! Per-extension log files: the extension's stderr and the host's own
//! `[zot]` lines for it, in `$ZOT_HOME/logs/ext-<name>.log` (SPEC 3.4).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A log over this size is rotated to `.log.1` when its extension starts.
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
    file: Option<Arc<File>>,
}

impl ExtLog {
    /// Opens (creating directories, rotating a large file) the log of `name`.
    pub fn open(logs_dir: &Path, name: &str) -> ExtLog {
        let path = log_path(logs_dir, name);
        let file = open_rotated(&path)
            .map_err(|e| eprintln!("zot: cannot open log {}: {e}", path.display()))
            .ok();
        ExtLog {
            name: name.into(),
            file: file.map(Arc::new),
        }
    }

    /// A log that writes only to the host's stderr.
    pub fn stderr(name: &str) -> ExtLog {
        ExtLog {
            name: name.into(),
            file: None,
        }
    }

    /// A handle for the child's stderr: the log file, or the host's stderr.
    pub fn child_stderr(&self) -> std::process::Stdio {
        match self.file.as_ref().and_then(|f| f.try_clone().ok()) {
            Some(f) => f.into(),
            None => std::process::Stdio::inherit(),
        }
    }

    /// Appends one `[zot] <timestamp> <msg>` line.
    pub fn line(&self, msg: &str) {
        let text = format!("[zot] {} {msg}\n", timestamp());
        let written = match &self.file {
            // One write call per line keeps lines whole next to the child's own output.
            Some(f) => (&**f).write_all(text.as_bytes()).is_ok(),
            None => false,
        };
        if !written {
            eprintln!("[zot] {} ext-{}: {msg}", timestamp(), self.name);
        }
    }
}

fn open_rotated(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() > ROTATE_BYTES) {
        let mut rotated = path.as_os_str().to_owned();
        rotated.push(".1");
        std::fs::rename(path, rotated)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
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
}
