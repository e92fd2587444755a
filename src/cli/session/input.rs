//! The session's input: the thread that reads stdin line by line, and
//! the queue where lines typed and what extensions submit wait to run.

use super::bell::Bell;
use crate::cli::common::CliError;
use crossbeam_channel::Receiver;
use std::collections::VecDeque;
use std::io;
use zot_host::internal::protocol::{Line, LineReader, MAX_LINE};

/// Input lines (and what extensions submitted) waiting to run, in
/// order; small, so that stdin is not read far ahead of the work.
#[derive(Default)]
pub struct Lines {
    lines: VecDeque<Work>,
    bytes: usize,
}

/// One thing waiting to run.
pub enum Work {
    /// A line typed (or piped).
    Typed(String),
    /// An extension's `submit` (a prompt) or `submit_slash` (a line).
    #[cfg(feature = "panels")]
    Submitted {
        extension: String,
        text: String,
        slash: bool,
    },
}

impl Work {
    fn len(&self) -> usize {
        match self {
            Work::Typed(line) => line.len(),
            #[cfg(feature = "panels")]
            Work::Submitted { text, .. } => text.len(),
        }
    }

    /// A `/key` line the user typed.
    #[cfg(feature = "panels")]
    fn is_key(&self) -> bool {
        let Work::Typed(line) = self else {
            return false;
        };
        let Some(rest) = line.trim_start().strip_prefix('/') else {
            return false;
        };
        let name = rest.split(char::is_whitespace).next().unwrap_or("");
        name.eq_ignore_ascii_case("key")
    }
}

impl Lines {
    /// Lines or bytes waiting beyond which stdin is not read.
    const MAX_LINES: usize = 64;
    const MAX_BYTES: usize = 1 << 20;

    pub fn has_room(&self) -> bool {
        self.lines.len() < Self::MAX_LINES && self.bytes < Self::MAX_BYTES
    }

    pub fn push_back(&mut self, work: Work) {
        self.bytes += work.len();
        self.lines.push_back(work);
    }

    pub fn pop_front(&mut self) -> Option<Work> {
        let work = self.lines.pop_front()?;
        self.bytes -= work.len();
        Some(work)
    }

    /// Takes out the first `/key` line typed, wherever it waits.
    #[cfg(feature = "panels")]
    pub fn take_key(&mut self) -> Option<String> {
        let at = self.lines.iter().position(Work::is_key)?;
        let work = self.lines.remove(at)?;
        self.bytes -= work.len();
        match work {
            Work::Typed(line) => Some(line),
            Work::Submitted { .. } => None,
        }
    }

    /// Whether a `/key` line typed waits.
    #[cfg(feature = "panels")]
    pub fn has_key(&self) -> bool {
        self.lines.iter().any(Work::is_key)
    }

    /// Drops what extensions submitted; what was typed stays.
    #[cfg(feature = "panels")]
    pub fn drop_submitted(&mut self) -> usize {
        let before = self.lines.len();
        self.lines.retain(|w| matches!(w, Work::Typed(_)));
        self.bytes = self.lines.iter().map(Work::len).sum();
        before - self.lines.len()
    }

    /// What `extension` submitted and still waits.
    #[cfg(feature = "panels")]
    pub fn submitted_by(&self, extension: &str) -> usize {
        (self.lines.iter())
            .filter(|w| matches!(w, Work::Submitted { extension: e, .. } if e == extension))
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn clear(&mut self) {
        self.lines.clear();
        self.bytes = 0;
    }
}

/// A line from stdin.
pub enum Input {
    Line(String),
    TooLong(usize),
    Eof,
}

/// Starts the thread that reads stdin: each line, a line too long, or
/// EOF comes on the channel, and `bell` rings after each.
pub fn read_stdin(bell: Bell) -> Result<Receiver<Input>, CliError> {
    // One line read ahead at most; the rest waits in the pipe.
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("zot-session-stdin".into())
        .spawn(move || {
            let mut lines = LineReader::new(io::stdin().lock(), MAX_LINE);
            loop {
                let input = match lines.next_line() {
                    Ok(Some(Line::Text(l))) => Input::Line(String::from_utf8_lossy(&l).into()),
                    Ok(Some(Line::TooLong(n))) => Input::TooLong(n),
                    Ok(None) | Err(_) => Input::Eof,
                };
                let eof = matches!(input, Input::Eof);
                if tx.send(input).is_err() {
                    break;
                }
                bell.ring();
                if eof {
                    break;
                }
            }
        })
        .map_err(|e| CliError::Failed(format!("cannot start the input thread: {e}")))?;
    Ok(rx)
}
