//! What extensions submit (docs/PROTOCOL.md#submits): `submit` runs a turn, and
//! `submit_slash` a line as if typed, queued behind the work under way,
//! at most [`MAX_QUEUED`] per extension; after EOF, none.

use super::ext_log::{log_line, power_of_ten};
use super::input::Work;
use super::render::Tone;
use super::state::Session;

/// Submissions one extension may have waiting; the rest are dropped.
pub(super) const MAX_QUEUED: usize = 16;

/// Lines an extension may not send: leaving is the user's call.
const RESERVED: [&str; 2] = ["quit", "exit"];

impl Session {
    /// A `submit` (or with `slash` a `submit_slash`) from `extension`.
    pub(super) fn submitted(&mut self, extension: String, text: String, slash: bool) {
        if self.eof {
            return self.dropped_after_eof(1);
        }
        if self.queue.submitted_by(&extension) >= MAX_QUEUED {
            let n = self
                .asked
                .submits_dropped
                .entry(extension.clone())
                .or_default();
            *n += 1;
            if power_of_ten(*n) {
                let why = format!(
                    "{MAX_QUEUED} submissions of {extension} wait already: dropped ({n} so far)"
                );
                self.out.error(&why);
                log_line(&extension, &why);
            }
            return;
        }
        self.queue.push_back(Work::Submitted {
            extension,
            text,
            slash,
        });
    }

    /// `n` more submissions dropped because input had ended: the
    /// session runs what the user queued and leaves, and an extension
    /// that submits at every start (a `/reload-ext`...) would keep it
    /// running for ever. Said at the 1st, 10th, 100th...
    pub(super) fn dropped_after_eof(&mut self, n: usize) {
        for _ in 0..n {
            self.asked.after_eof += 1;
            if power_of_ten(self.asked.after_eof) {
                let n = self.asked.after_eof;
                self.out.error(&format!(
                    "input ended: what extensions submit is not run ({n} dropped so far)"
                ));
            }
        }
    }

    /// Runs a submission whose turn has come.
    pub(super) fn run_submitted(&mut self, extension: &str, text: String, slash: bool) {
        let text = text.trim().to_string();
        if !slash {
            self.out
                .text(&format!("submit [{extension}]: "), Tone::Cyan, &text);
            return self.start_turn(text);
        }
        let rest = text.strip_prefix('/').unwrap_or(&text);
        let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if RESERVED.contains(&name.to_lowercase().as_str()) {
            let why =
                format!("extension {extension} sent /{name}: an extension cannot end the session");
            self.out.error(&why);
            return log_line(extension, &why);
        }
        self.out
            .text(&format!("submit_slash [{extension}]: "), Tone::Cyan, &text);
        self.slash(name, args.trim());
    }
}
