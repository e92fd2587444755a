//! The stand-in for a model: `--agent-cmd CMD` runs as `sh -c CMD` with
//! the prompt on stdin; its stdout is the assistant message.
//!
//! The command runs in its own process group (so a terminal's Ctrl-C
//! reaches only the session, which then decides to cancel) and a thread
//! waits for it, so the session loop never blocks on it.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A running agent command.
pub struct Agent {
    pgid: i32,
    reaped: Arc<AtomicBool>,
}

impl Agent {
    /// Starts `sh -c cmd` in `cwd`, writes `prompt` and a newline to its
    /// stdin; `done` gets its stdout (without trailing newlines) when it
    /// exits successfully, else why it failed.
    pub fn spawn(
        cmd: &str,
        cwd: &Path,
        prompt: &str,
        done: impl FnOnce(Result<String, String>) + Send + 'static,
    ) -> Result<Agent, String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run sh: {e}"))?;
        let pgid = i32::try_from(child.id()).map_err(|_| "pid out of range".to_string())?;
        let reaped = Arc::new(AtomicBool::new(false));
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let input = format!("{prompt}\n");
        let flag = reaped.clone();
        let waiter = move || {
            // A separate writer: the command may print before it reads.
            let writer = stdin.map(|mut stdin| {
                std::thread::spawn(move || {
                    // It may exit without reading: a broken pipe is fine.
                    let _ = stdin.write_all(input.as_bytes());
                })
            });
            let mut text = Vec::new();
            let read = stdout.map(|mut s| s.read_to_end(&mut text));
            let status = child.wait();
            flag.store(true, Ordering::SeqCst);
            if let Some(w) = writer {
                let _ = w.join();
            }
            done(match (status, read) {
                (Err(e), _) => Err(format!("cannot wait for the agent command: {e}")),
                (_, Some(Err(e))) => Err(format!("cannot read the agent command's output: {e}")),
                (Ok(status), _) if !status.success() => Err(describe(status)),
                (Ok(_), _) => Ok(String::from_utf8_lossy(&text)
                    .trim_end_matches(['\n', '\r'])
                    .to_string()),
            });
        };
        if let Err(e) = std::thread::Builder::new()
            .name("zot-session-agent".into())
            .spawn(waiter)
        {
            // The closure (and the child) are gone; kill its group.
            kill_group(pgid);
            return Err(format!("cannot start a thread: {e}"));
        }
        Ok(Agent { pgid, reaped })
    }

    /// Kills the command and everything it started.
    pub fn kill(&self) {
        // Once reaped its process group id may be reused by someone else.
        if !self.reaped.load(Ordering::SeqCst) {
            kill_group(self.pgid);
        }
    }
}

fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals that process group.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// `exit status 3` or `killed by signal 9`.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}
