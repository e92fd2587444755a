//! The stand-in for a model: `--agent-cmd CMD` runs as `sh -c CMD` with
//! the prompt on stdin; its stdout is the assistant message.
//!
//! The system prompt is in the file `$ZOT_SYSTEM_PROMPT_FILE` (removed
//! when the command ends), and also in `$ZOT_SYSTEM_PROMPT` when Linux
//! can pass it there: one environment string is at most 128 KiB, while
//! `before_agent_start` may make the prompt up to 1 MiB (docs/PROTOCOL.md#system-prompt).
//! The answer is bounded like a line the session reads ([`MAX_ANSWER`]):
//! a command that prints more is stopped and the turn fails.
//!
//! The command runs in its own process group (so a terminal's Ctrl-C
//! reaches only the session, which then decides to cancel) and a thread
//! waits for it, so the session loop never blocks on it.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use zot_host::internal::process::{describe_status, signal_group};
use zot_host::internal::protocol::MAX_LINE;

/// The longest answer taken from the agent command, as long as the
/// longest line the session reads.
pub const MAX_ANSWER: usize = MAX_LINE;

/// Linux's bound on one environment string, `NAME=value` and its NUL
/// (MAX_ARG_STRLEN): a longer one makes exec fail with E2BIG.
const MAX_ENV_STRING: usize = 128 * 1024;

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
        let prompt_file = PromptFile::write(system_prompt)
            .map_err(|e| format!("cannot write the system prompt to a file: {e}"))?;
        let mut command = Command::new("sh");
        command.env("ZOT_SYSTEM_PROMPT_FILE", &prompt_file.0);
        match fits_environment("ZOT_SYSTEM_PROMPT", system_prompt) {
            true => command.env("ZOT_SYSTEM_PROMPT", system_prompt),
            false => command.env_remove("ZOT_SYSTEM_PROMPT"),
        };
        let mut child = command
            .arg("-c")
            .arg(cmd)
            .current_dir(cwd)
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
            let read = stdout.map(|s| read_at_most(s, MAX_ANSWER));
            if let Some(Ok(None)) = read {
                // Not reaped yet, so the group id is still its own.
                signal_group(pgid, libc::SIGKILL);
            }
            let status = child.wait();
            flag.store(true, Ordering::SeqCst);
            drop(prompt_file);
            if let Some(w) = writer {
                let _ = w.join();
            }
            done(match (status, read) {
                (Err(e), _) => Err(format!("cannot wait for the agent command: {e}")),
                (_, Some(Err(e))) => Err(format!("cannot read the agent command's output: {e}")),
                (_, Some(Ok(None))) => Err(format!(
                    "its output is over {} MiB: stopped it",
                    MAX_ANSWER >> 20
                )),
                (Ok(status), _) if !status.success() => Err(describe_status(status)),
                (Ok(_), Some(Ok(Some(text)))) => Ok(String::from_utf8_lossy(&text)
                    .trim_end_matches(['\n', '\r'])
                    .to_string()),
                (Ok(_), None) => Ok(String::new()),
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

/// Whether `name=value` can go into a child's environment: within
/// [`MAX_ENV_STRING`], and without a NUL (which cannot be passed at all).
fn fits_environment(name: &str, value: &str) -> bool {
    name.len() + 1 + value.len() < MAX_ENV_STRING && !value.contains('\0')
}

/// What `from` gives until its end, or `None` once it gives more than `limit` bytes.
fn read_at_most(from: impl Read, limit: usize) -> io::Result<Option<Vec<u8>>> {
    let mut text = Vec::new();
    from.take(limit as u64 + 1).read_to_end(&mut text)?;
    Ok((text.len() <= limit).then_some(text))
}

/// A private file holding the system prompt for one run of the agent
/// command, removed when dropped.
struct PromptFile(PathBuf);

impl PromptFile {
    fn write(prompt: &str) -> io::Result<PromptFile> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let name = format!("zot-system-prompt-{}-{run}", std::process::id());
        let path = std::env::temp_dir().join(name);
        // A new file only readable by us: no one else's file is reused.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let written = PromptFile(path); // from here on, an error removes it
        file.write_all(prompt.as_bytes())?;
        Ok(written)
    }
}

impl Drop for PromptFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}
