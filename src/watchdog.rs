//! Kills extension process groups when the host process dies (SPEC
//! 3.14: if the host dies, by SIGKILL or abort, its extensions do not
//! outlive it).
//!
//! `PR_SET_PDEATHSIG` (set in `process.rs`) takes each extension down
//! with the host, but not what the extension started in its process
//! group. For those, one small `sh` process per host process holds the
//! read end of a pipe whose write end only the host has (close-on-exec,
//! so no extension inherits it). The host tells it each group id when
//! the group is created and when it is gone; when the host dies,
//! however it dies, the kernel closes the write end, the watchdog reads
//! end of file and sends SIGKILL to every group still listed.
//!
//! The watchdog runs in its own process group, so a Ctrl-C at the
//! terminal (sent to the host's group) does not reach it. Where `sh`
//! cannot be started, only the extensions themselves are covered.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// Keeps a space-separated list of group ids; at end of input kills
/// them. `+ N` adds a group, `- N` removes it.
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

/// Asks the watchdog to kill process group `pgid` if the host dies.
pub fn guard(pgid: u32) {
    tell(&format!("+ {pgid}\n"));
}

/// The group `pgid` is gone (or dying): forget it, so a later group
/// that reuses the id is never touched.
pub fn release(pgid: u32) {
    tell(&format!("- {pgid}\n"));
}

fn tell(line: &str) {
    let mut watchdog = WATCHDOG.lock().unwrap_or_else(|p| p.into_inner());
    let stdin = watchdog.get_or_insert_with(start);
    if let Some(pipe) = stdin {
        if pipe.write_all(line.as_bytes()).is_err() {
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
        // The child is never waited for: it lives as long as this
        // process and exits right after it.
        Ok(mut child) => child.stdin.take(),
        Err(e) => {
            eprintln!("zot: cannot start the extension watchdog (/bin/sh): {e}");
            None
        }
    }
}
