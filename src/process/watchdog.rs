//! Kills extension process groups when the host dies, however it dies
//! (docs/PROTOCOL.md#shutdown): one `sh` per host process, in a group of its own (out of
//! a terminal Ctrl-C's reach), reads group ids from a pipe whose write
//! end only the host holds (close-on-exec). When the host dies the kernel
//! closes that end, and the watchdog sends SIGKILL to every group still
//! listed, leaders included. Without `sh`, `PR_SET_PDEATHSIG` covers the
//! extensions themselves, not what they started.
//!
//! A batch of starts is told in one line per group but one write, once
//! every start of the batch is done (`spawner.rs`). An exit through
//! `process::exit` (a signal handler's) waits for that write; a host
//! killed outright while a batch starts (a few milliseconds for 20
//! extensions) leaves those extensions to exit when their stdin closes.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// `+ N` adds group N to a space-separated list, `- N` removes it; at end
/// of input every listed group is killed.
const SCRIPT: &str = r#"trap '' INT HUP TERM
l=' '
while read -r op pg; do
  case $op in
    +) l="$l$pg " ;;
    -) case $l in *" $pg "*) l="${l%% $pg *} ${l#* $pg }" ;; esac ;;
  esac
done
for pg in $l; do kill -s KILL -- "-$pg" 2>/dev/null; done
"#;

/// The watchdog's stdin once started; `None` inside when it could not be
/// started or has gone away (then nothing more is tried).
static WATCHDOG: Mutex<Option<Option<ChildStdin>>> = Mutex::new(None);

/// Whether the watchdog runs (it starts on first use).
pub fn running() -> bool {
    let mut watchdog = WATCHDOG.lock().unwrap_or_else(|p| p.into_inner());
    watchdog.get_or_insert_with(start).is_some()
}

/// `+`: kill process groups `pgids` if the host dies; `-`: the groups
/// are gone, forget them (so a later group that reuses an id is never
/// touched). One write for all of them: each write wakes the watchdog,
/// which then reads its line a byte at a time, so one wake-up per
/// extension would slow down starting many of them.
pub fn tell(op: char, pgids: impl IntoIterator<Item = u32>) {
    let lines: String = pgids
        .into_iter()
        .map(|pgid| format!("{op} {pgid}\n"))
        .collect();
    if lines.is_empty() {
        return;
    }
    let mut watchdog = WATCHDOG.lock().unwrap_or_else(|p| p.into_inner());
    let stdin = watchdog.get_or_insert_with(start);
    if let Some(pipe) = stdin {
        if pipe.write_all(lines.as_bytes()).is_err() {
            eprintln!("zot: the extension watchdog has gone away");
            *stdin = None;
        }
    }
}

fn start() -> Option<ChildStdin> {
    let started = Command::new("/bin/sh")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    match started {
        // Never waited for: it exits right after this process.
        Ok(mut child) => child.stdin.take(),
        Err(e) => {
            eprintln!("zot: cannot start the extension watchdog (/bin/sh): {e}");
            None
        }
    }
}
