//! The report of `zot ext check`: one finding per rule, as text or JSON.

use serde::Serialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Status {
    Pass,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Serialize)]
pub(super) struct Finding {
    rule: String,
    status: Status,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<String>,
    /// How long the step took, in milliseconds.
    ms: f64,
}

impl Finding {
    /// What to do about it, shown under the finding.
    pub(super) fn hint(&mut self, text: impl Into<String>) {
        self.hint = Some(text.into());
    }
}

#[derive(Default)]
pub(super) struct Report {
    pub(super) dir: PathBuf,
    pub(super) extension: Option<String>,
    findings: Vec<Finding>,
    pub(super) stderr_tail: Vec<String>,
    pub(super) took: Duration,
}

impl Report {
    fn add(
        &mut self,
        status: Status,
        rule: &str,
        took: Duration,
        message: impl Into<String>,
    ) -> &mut Finding {
        self.findings.push(Finding {
            rule: rule.to_string(),
            status,
            message: message.into(),
            hint: None,
            ms: (took.as_secs_f64() * 1e5).round() / 100.0,
        });
        let last = self.findings.len() - 1;
        &mut self.findings[last]
    }

    pub(super) fn pass(
        &mut self,
        rule: &str,
        took: Duration,
        message: impl Into<String>,
    ) -> &mut Finding {
        self.add(Status::Pass, rule, took, message)
    }

    pub(super) fn warn(
        &mut self,
        rule: &str,
        took: Duration,
        message: impl Into<String>,
    ) -> &mut Finding {
        self.add(Status::Warn, rule, took, message)
    }

    pub(super) fn fail(
        &mut self,
        rule: &str,
        took: Duration,
        message: impl Into<String>,
    ) -> &mut Finding {
        self.add(Status::Fail, rule, took, message)
    }

    pub(super) fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    pub(super) fn passed(&self, strict: bool) -> bool {
        self.count(Status::Fail) == 0 && (!strict || self.count(Status::Warn) == 0)
    }

    pub(super) fn to_json(&self, strict: bool) -> Value {
        json!({
            "dir": self.dir,
            "extension": self.extension,
            "ok": self.passed(strict),
            "strict": strict,
            "failed": self.count(Status::Fail),
            "warnings": self.count(Status::Warn),
            "ms": (self.took.as_secs_f64() * 1e5).round() / 100.0,
            "checks": self.findings,
            "stderr_tail": self.stderr_tail,
        })
    }

    pub(super) fn to_text(&self, strict: bool) -> String {
        let name = self.extension.as_deref().unwrap_or("extension");
        let mut text = format!("checking {name} in {}\n", self.dir.display());
        let width = self
            .findings
            .iter()
            .map(|f| f.rule.len())
            .max()
            .unwrap_or(0);
        for f in &self.findings {
            let status = match f.status {
                Status::Pass => "pass",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            text += &format!(
                "{status}  {:<width$}  {} ({})\n",
                f.rule,
                f.message,
                millis(f.ms)
            );
            if let Some(hint) = &f.hint {
                text += &format!("      {:<width$}  hint: {hint}\n", "");
            }
        }
        if !self.stderr_tail.is_empty() {
            text += &format!(
                "stderr of {name} (last {} lines):\n",
                self.stderr_tail.len()
            );
            for line in &self.stderr_tail {
                text += &format!("  | {line}\n");
            }
        }
        let (failed, warnings) = (self.count(Status::Fail), self.count(Status::Warn));
        let verdict = if self.passed(strict) { "ok" } else { "FAILED" };
        let strictly = if strict && failed == 0 && warnings > 0 {
            " (--strict: warnings fail)"
        } else {
            ""
        };
        text += &format!(
            "{verdict}: {failed} failed, {warnings} warning{} in {}{strictly}\n",
            if warnings == 1 { "" } else { "s" },
            millis(self.took.as_secs_f64() * 1e3)
        );
        text
    }
}

/// `3.4 ms`, `250 ms`, `12.5 s`. Rounded to integers first: formatting
/// a float would link core's float formatter into the static binary.
pub(super) fn millis(ms: f64) -> String {
    let tenths = |x: f64| {
        let t = (x * 10.0).round() as u64;
        format!("{}.{}", t / 10, t % 10)
    };
    if ms < 10.0 {
        format!("{} ms", tenths(ms))
    } else if ms < 10_000.0 {
        format!("{} ms", ms.round() as u64)
    } else {
        format!("{} s", tenths(ms / 1e3))
    }
}

/// A limit or a measured time: `10 s`, `250 ms`, `3.4 ms`.
pub(super) fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        millis(d.as_secs_f64() * 1e3)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn millis_rounds_like_the_report_reads() {
        let cases = [
            (3.44, "3.4 ms"),
            (9.96, "10.0 ms"),
            (250.4, "250 ms"),
            (12_345.0, "12.3 s"),
        ];
        for (ms, text) in cases {
            assert_eq!(super::millis(ms), text, "{ms}");
        }
    }
}
