//! The stand-in for a model: `--agent-cmd CMD` runs as `sh -c CMD` with
//! the prompt on stdin and the system prompt in `$ZOT_SYSTEM_PROMPT`;
//! its stdout is the assistant message.
//!
//! The command runs in its own process group (so a terminal's Ctrl-C
//! reaches only the session, which then decides to cancel) and a thread
//! waits for it, so the session loop never blocks on it.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use zot_host::internal::process::{describe_status, signal_group};

/// A running agent command.
pub struct Agent {
    pgid: u32,
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
        system_prompt: &str,
        done: impl FnOnce(Result<String, String>) + Send + 'static,
    ) -> Result<Agent, String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(cwd)
            .env("ZOT_SYSTEM_PROMPT", system_prompt)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run sh: {e}"))?;
        let pgid = child.id();
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
                (Ok(status), _) if !status.success() => Err(describe_status(status)),
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
            signal_group(pgid, libc::SIGKILL);
            return Err(format!("cannot start a thread: {e}"));
        }
        Ok(Agent { pgid, reaped })
    }

    /// Kills the command and everything it started.
    pub fn kill(&self) {
        // Once reaped its process group id may be reused by someone else.
        if !self.reaped.load(Ordering::SeqCst) {
            signal_group(self.pgid, libc::SIGKILL);
        }
    }
}
