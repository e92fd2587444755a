//! `zot ext logs`: print or follow `$ZOT_HOME/logs/ext-<name>.log`.
//!
//! Following is native (no `tail`): poll for new bytes, and when the
//! path names a different file (the host rotated it to `.log.1` and
//! started a new one) or a shorter one (truncated), finish the old file
//! and continue with the new one from its start.
//!
//! The log holds what extensions wrote to stderr: on a terminal each
//! line is shown [`inert`], as the session and `doctor` show it; piped,
//! the bytes are copied as they are.

use super::common::{check_name, failed, Ctx};
use crate::cli::common::CliError;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::thread;
use std::time::Duration;
use zot_host::internal::discovery::logs_dir;
use zot_host::internal::log::{inert, log_path};

/// How often `-f` looks for new bytes.
const POLL: Duration = Duration::from_millis(200);

/// Longest piece of a line made inert at once (a longer line goes on in
/// the next piece).
const PIECE: u64 = 64 * 1024;

/// Runs `zot ext logs <name> [-f]`.
pub(super) fn run(ctx: &Ctx, name: &str, follow: bool) -> Result<i32, CliError> {
    check_name(name)?;
    let path = log_path(&logs_dir(&ctx.home), name);
    if follow {
        return follow_log(&path);
    }
    let mut file = File::open(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => failed(format!(
            "no log for {name}: {} does not exist yet (it is written when the extension runs)",
            path.display()
        )),
        _ => failed(format!("cannot read {}: {e}", path.display())),
    })?;
    copy_out(&mut file, &path)?;
    Ok(0)
}

/// Copies what `file` has left to stdout, made inert on a terminal;
/// false once stdout is closed.
fn copy_out(file: &mut File, path: &Path) -> Result<bool, CliError> {
    let mut stdout = io::stdout().lock();
    let copied = if stdout.is_terminal() {
        copy_inert(file, &mut stdout)
    } else {
        io::copy(file, &mut stdout).map(drop)
    };
    match copied.and_then(|()| stdout.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(failed(format!(
            "cannot copy {} to stdout: {e}",
            path.display()
        ))),
    }
}

/// Copies `from` to `to` line by line, each [`inert`] (its newline kept).
fn copy_inert(from: &mut impl Read, to: &mut impl Write) -> io::Result<()> {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        if from.by_ref().take(PIECE).read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let (text, end) = match line.strip_suffix(b"\n") {
            Some(text) => (text, &b"\n"[..]),
            None => (&line[..], &b""[..]),
        };
        to.write_all(inert(&String::from_utf8_lossy(text)).as_bytes())?;
        to.write_all(end)?;
    }
}

/// What happened to the path since it was opened.
enum Change {
    None,
    Replaced,
    Truncated,
}

fn follow_log(path: &Path) -> Result<i32, CliError> {
    let mut file = wait_for(path)?;
    loop {
        if !copy_out(&mut file, path)? {
            return Ok(0);
        }
        thread::sleep(POLL);
        match change(path, &mut file) {
            Change::None => {}
            Change::Truncated => {
                let _ = file.seek(SeekFrom::Start(0));
            }
            Change::Replaced => {
                // Lines written to the old file just before the rotation come first.
                if !copy_out(&mut file, path)? {
                    return Ok(0);
                }
                if let Ok(new) = File::open(path) {
                    file = new;
                }
            }
        }
    }
}

/// Opens the log, waiting for it to be created if it does not exist yet.
fn wait_for(path: &Path) -> Result<File, CliError> {
    let mut said = false;
    loop {
        match File::open(path) {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !said {
                    eprintln!("zot: waiting for {} to be created", path.display());
                    said = true;
                }
                thread::sleep(POLL);
            }
            Err(e) => return Err(failed(format!("cannot read {}: {e}", path.display()))),
        }
    }
}

fn change(path: &Path, file: &mut File) -> Change {
    // Missing for a moment between rotation and re-creation: keep the old one.
    let (Ok(on_disk), Ok(open)) = (fs::metadata(path), file.metadata()) else {
        return Change::None;
    };
    if (on_disk.dev(), on_disk.ino()) != (open.dev(), open.ino()) {
        return Change::Replaced;
    }
    match file.stream_position() {
        Ok(pos) if on_disk.len() < pos => Change::Truncated,
        _ => Change::None,
    }
}
