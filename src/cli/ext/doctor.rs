//! `zot ext doctor`: discovery and startup exactly as `zot` runs them (the
//! library's own host, with the same options and limits), then a report
//! of every extension found (docs/PROTOCOL.md#zot-ext): what was wrong with its manifest,
//! whether it is disabled or shadowed, how its start and handshake went,
//! how it became ready, what it registered and lost to whom, the host's
//! warnings about it in its log, and where that log is.

use super::common::{out, say, usage};
use crate::cli::common::{shared_option, surface_config, CliError, HostOpts};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use zot_host::internal::discovery::{self, Found, Status};
#[cfg(feature = "journal")]
use zot_host::Replay;
use zot_host::{ExtensionInfo, ExtensionState, HostConfig, ReadyVia, Snapshot};

const HELP: &str = "\
usage: zot ext doctor [--json] [--cwd DIR] [-e PATH]... [--no-ext] [OPTIONS]

Discover and start the extensions exactly as `zot` would here (the same
options, ZOT_STARTUP_TIMEOUT and ZOT_HELLO_TIMEOUT), wait until each is
ready or failed, stop them, and report every extension: manifest errors,
disabled, shadowed (by which copy), start and handshake errors, ready by
its ready frame or by the watchdog, its commands and tools, names it lost
or won, the host's warnings about it, and its log file.

options:
      --json        print the report as one JSON object
  -e, --ext PATH    also load PATH first, as zot -e does (repeatable)
      --no-ext      do not discover installed or project extensions
      --cwd DIR     project directory (default: the current directory)
  (and the other options of zot: --startup-timeout, --hello-timeout, --confine, ...)

Exit status: 0 when nothing failed, 1 otherwise, 2 on a usage error.
";

/// Most warnings shown per extension; the rest are in its log.
const MAX_WARNINGS: usize = 20;

/// Lines of its own stderr shown for an extension that failed.
const STDERR_TAIL: usize = 5;

/// Most bytes of one log read back for this run's warnings.
const MAX_LOG_READ: u64 = 256 << 10;

/// How often doctor looks again at extensions still loading after the grace.
const SETTLE_POLL: Duration = Duration::from_millis(20);

/// Runs `zot ext doctor <args>`; `cwd` is a `--cwd` given before `doctor`.
pub(super) fn run(cwd: Option<PathBuf>, args: Vec<OsString>) -> Result<i32, CliError> {
    let Some((opts, as_json)) = parse(cwd, args)? else {
        out(HELP)?;
        return Ok(0);
    };
    let config = surface_config(&opts)?;
    let report = examine(config)?;
    if as_json {
        out(&format!("{}\n", report.to_json()))?;
    } else {
        say(&report.to_text())?;
    }
    Ok(if report.problems().is_empty() { 0 } else { 1 })
}

fn parse(cwd: Option<PathBuf>, args: Vec<OsString>) -> Result<Option<(HostOpts, bool)>, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let mut opts = HostOpts {
        cwd,
        ..HostOpts::default()
    };
    let mut as_json = false;
    while let Some(arg) = parser.next()? {
        if let Some(which) = shared_option(&arg) {
            opts.take(which, &mut parser)?;
            continue;
        }
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("json") => as_json = true,
            _ => {
                return Err(CliError::Usage(format!(
                    "{} (try zot ext doctor --help)",
                    arg.unexpected()
                )))
            }
        }
    }
    if opts.cwd.as_ref().is_some_and(|d| !d.is_dir()) {
        return Err(usage("--cwd: not a directory"));
    }
    Ok(Some((opts, as_json)))
}

/// What doctor found.
struct Report {
    config: HostConfig,
    /// Until startup readiness (the grace or every extension settled).
    startup: Duration,
    entries: Vec<Entry>,
}

/// One discovered extension directory.
struct Entry {
    found: Found,
    name: String,
    /// Its state in the host, when it was not left out by discovery.
    info: Option<ExtensionInfo>,
    /// Still loading when startup ended: when it settled, if it did.
    late: Option<Option<Duration>>,
    /// Names it won against extensions of lower precedence: (kind, name, loser).
    won: Vec<(String, String, String)>,
    /// What the host and the extension wrote to its log in this run.
    run_log: RunLog,
    /// The replay policy of each tool it owns, when not `never`.
    #[cfg(feature = "journal")]
    replay: Vec<(String, Replay)>,
}

/// The part of one extension's log written during doctor's run.
#[derive(Default)]
struct RunLog {
    /// The host's own lines, less those the report says in its own words.
    warnings: Vec<String>,
    /// Warnings not shown (over [`MAX_WARNINGS`]).
    more_warnings: usize,
    /// The last lines of the extension's own stderr.
    stderr_tail: Vec<String>,
}

/// Runs the host's discovery and startup and collects the report.
fn examine(config: HostConfig) -> Result<Report, CliError> {
    let (paths, cwd, home) = (&config.ext_paths, &config.cwd, &config.zot_home);
    let found = discovery::discover_with(paths, cwd, home, config.discover, config.trust_project);
    let logs = discovery::logs_dir(home);
    let names: Vec<String> = found.iter().map(name_of).collect();
    // Where this run's lines will start in each log.
    let offsets: HashMap<String, u64> = (names.iter())
        .map(|n| {
            (
                n.clone(),
                log_len(&zot_host::internal::log::log_path(&logs, n)),
            )
        })
        .collect();

    let start = Instant::now();
    let host = zot_host::Host::start(config.clone())
        .map_err(|e| CliError::Failed(format!("cannot start the host: {e}")))?;
    host.wait_ready();
    let startup = start.elapsed();
    let list = |host: &zot_host::Host| {
        host.list()
            .map_err(|e| CliError::Failed(format!("the host stopped: {e}")))
    };
    let mut snap = list(&host)?;
    let mut late: HashMap<PathBuf, Option<Duration>> = (snap.extensions.iter())
        .filter(|e| e.state == ExtensionState::Starting)
        .map(|e| (e.dir.clone(), None))
        .collect();
    // Those still loading keep loading, as in `zot`: wait until each is
    // ready or failed (the hello limit bounds it), to say which.
    let settle_by =
        start + config.timeouts.hello + config.timeouts.startup + Duration::from_secs(1);
    while snap
        .extensions
        .iter()
        .any(|e| e.state == ExtensionState::Starting)
        && Instant::now() < settle_by
    {
        std::thread::sleep(SETTLE_POLL);
        snap = list(&host)?;
        for e in &snap.extensions {
            if let Some(at @ None) = late.get_mut(&e.dir) {
                if e.state != ExtensionState::Starting {
                    *at = Some(start.elapsed());
                }
            }
        }
    }
    // Read before stopping: the shutdown's own lines are no warnings.
    let mut entries: Vec<Entry> = Vec::new();
    for (f, name) in found.into_iter().zip(names) {
        let log = zot_host::internal::log::log_path(&logs, &name);
        let from = offsets.get(&name).copied().unwrap_or(0);
        let run_log = match f.status {
            Status::Start => run_log(&log, from),
            _ => RunLog::default(),
        };
        let info = match f.status {
            Status::Start => snap.extensions.iter().find(|e| e.dir == f.dir).cloned(),
            _ => None,
        };
        let late = info.as_ref().and_then(|i| late.get(&i.dir).copied());
        #[cfg(feature = "journal")]
        let replay = (snap.tools.iter())
            .filter(|t| info.is_some() && t.extension == name && t.replay != Replay::Never)
            .map(|t| (t.name.clone(), t.replay))
            .collect();
        entries.push(Entry {
            found: f,
            name,
            info,
            late,
            won: Vec::new(),
            run_log,
            #[cfg(feature = "journal")]
            replay,
        });
    }
    drop(host);
    mark_winners(&mut entries, &snap);
    Ok(Report {
        config,
        startup,
        entries,
    })
}

/// The manifest's name, else the directory's (as the host names it).
fn name_of(f: &Found) -> String {
    match &f.manifest {
        Some(m) => m.name.clone(),
        None => (f.dir.file_name())
            .map_or_else(|| "unknown".into(), |n| n.to_string_lossy().into_owned()),
    }
}

/// Records on each winner the names it took from others.
fn mark_winners(entries: &mut [Entry], snap: &Snapshot) {
    for loser in &snap.extensions {
        for c in &loser.conflicts {
            let winner = entries.iter_mut().find(|e| {
                e.info
                    .as_ref()
                    .is_some_and(|i| i.name == c.winner && i.dir != loser.dir)
            });
            if let Some(w) = winner {
                w.won
                    .push((c.kind.as_str().into(), c.name.clone(), loser.name.clone()));
            }
        }
    }
}

fn log_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// What was written to `log` from offset `from` on (from the start if it
/// was rotated meanwhile), at most its last [`MAX_LOG_READ`] bytes.
fn run_log(log: &Path, from: u64) -> RunLog {
    let Ok(mut file) = std::fs::File::open(log) else {
        return RunLog::default();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let from = if len < from { 0 } else { from };
    let from = from.max(len.saturating_sub(MAX_LOG_READ));
    let mut text = Vec::new();
    if file.seek(SeekFrom::Start(from)).is_err()
        || file.take(MAX_LOG_READ).read_to_end(&mut text).is_err()
    {
        return RunLog::default();
    }
    let text = String::from_utf8_lossy(&text);
    let stderr: Vec<&str> = (text.lines())
        .filter(|l| !l.starts_with("[zot] ") && !l.trim().is_empty())
        .collect();
    let stderr_tail = stderr[stderr.len().saturating_sub(STDERR_TAIL)..]
        .iter()
        .map(|l| l.to_string())
        .collect();
    let said_otherwise = [
        "started ",
        "not started: ",
        "no ready frame: treated as ready",
        "still loading after the startup grace",
    ];
    let lines: Vec<String> = (text.lines())
        .filter_map(|l| l.strip_prefix("[zot] "))
        // Past the timestamp.
        .map(|l| l.split_once(' ').map_or(l, |(_, msg)| msg))
        .filter(|msg| !said_otherwise.iter().any(|s| msg.starts_with(s)))
        .filter(|msg| !msg.contains(" shadowed by "))
        .map(str::to_string)
        .collect();
    RunLog {
        more_warnings: lines.len().saturating_sub(MAX_WARNINGS),
        warnings: lines.into_iter().take(MAX_WARNINGS).collect(),
        stderr_tail,
    }
}

impl Entry {
    /// `ready`, `starting`, `failed`, `exited`, `disabled`, `bundle`,
    /// `shadowed`, `untrusted` or `invalid`.
    fn status(&self) -> &str {
        match (&self.found.status, &self.info) {
            (Status::Invalid(_), _) => "invalid",
            (Status::Untrusted(_), _) => "untrusted",
            (Status::Shadowed { .. }, _) => "shadowed",
            (Status::Disabled, _) => "disabled",
            (_, Some(info)) => info.state.as_str(),
            (Status::Start, None) => "starting",
        }
    }

    /// Why it counts as failed, if it does.
    fn problem(&self) -> Option<String> {
        let error = self.info.as_ref().and_then(|i| i.state.error());
        match (&self.found.status, self.status()) {
            (Status::Invalid(e), _) => Some(format!("invalid manifest: {}", e.reason)),
            (_, "failed") => Some(format!("failed: {}", error.unwrap_or("unknown reason"))),
            (_, "exited") => Some(format!("exited: {}", error.unwrap_or("unknown status"))),
            (_, "starting") => Some("still starting when doctor gave up waiting".into()),
            _ => None,
        }
    }

    /// The headline: its status with what qualifies it.
    fn headline(&self, cfg: &HostConfig) -> String {
        match &self.found.status {
            Status::Invalid(e) => return format!("invalid manifest: {e}"),
            Status::Shadowed { by } => return format!("shadowed by {}: not started", by.display()),
            Status::Disabled => return "disabled (\"enabled\": false): not started".into(),
            // Not a failure, as disabled is not: the user decides (docs/PROTOCOL.md#trust).
            Status::Untrusted(why) => {
                return format!(
                    "untrusted ({why}): not started; review it, then run \
                     'zot ext trust {}' in {}",
                    self.name,
                    cfg.cwd.display()
                )
            }
            Status::Start => {}
        }
        let Some(info) = &self.info else {
            return "not in the host's list".into();
        };
        let mut line = info.state.to_string();
        match info.ready_via {
            Some(ReadyVia::Watchdog) => line.push_str(&format!(
                " (by the watchdog: no ready frame, {} ms of silence)",
                cfg.timeouts.ready_idle.as_millis() as u64
            )),
            Some(_) => line.push_str(" (its ready frame)"),
            None => {}
        }
        if info.state.as_str() == "bundle" {
            line.push_str(" (skills and theme only: nothing to start)");
        }
        if let Some(error) = info.state.error() {
            line.push_str(&format!(": {error}"));
        }
        line
    }

    /// Conflicts as lines: lost ones and won ones.
    fn conflicts(&self) -> Vec<String> {
        let lost = self.info.iter().flat_map(|i| &i.conflicts).map(|c| {
            let winner = match c.winner.as_str() {
                "built-in" => format!("the built-in {}", c.kind),
                other => format!("extension {other} (higher precedence)"),
            };
            format!(
                "{} {}: lost to {winner}",
                c.kind,
                shown(c.kind.as_str(), &c.name)
            )
        });
        let won = (self.won.iter())
            .map(|(kind, name, loser)| format!("{kind} {}: won over {loser}", shown(kind, name)));
        lost.chain(won).collect()
    }

    fn log(&self, cfg: &HostConfig) -> Option<PathBuf> {
        let runs = matches!(self.found.status, Status::Start) && self.status() != "bundle";
        runs.then(|| {
            zot_host::internal::log::log_path(&discovery::logs_dir(&cfg.zot_home), &self.name)
        })
    }

    fn late_warning(&self, cfg: &HostConfig) -> Option<String> {
        let settled = self.late?;
        let grace = seconds(cfg.timeouts.startup, 3);
        let grace = grace.trim_end_matches('0').trim_end_matches('.');
        let when = match settled {
            Some(at) => format!("settled after {} s", seconds(at, 1)),
            None => "never settled".into(),
        };
        Some(format!(
            "still loading when the {grace} s startup grace ended ({when}): \
             its names were missing at startup"
        ))
    }

    fn to_json(&self, cfg: &HostConfig) -> Value {
        let info = self.info.as_ref();
        let names = |f: fn(&ExtensionInfo) -> &Vec<String>| info.map_or(json!([]), |i| json!(f(i)));
        let by = match &self.found.status {
            Status::Shadowed { by } => Some(by.display().to_string()),
            _ => None,
        };
        let mut warnings: Vec<String> = self.late_warning(cfg).into_iter().collect();
        warnings.extend(self.run_log.warnings.iter().cloned());
        let failed = self.problem().is_some();
        let stderr = if failed {
            &self.run_log.stderr_tail[..]
        } else {
            &[]
        };
        let lost = info.iter().flat_map(|i| &i.conflicts).map(
            |c| json!({"kind": c.kind, "name": c.name, "winner": c.winner, "loser": self.name}),
        );
        let won = (self.won.iter()).map(|(kind, name, loser)| {
            json!({"kind": kind, "name": name, "winner": self.name, "loser": loser})
        });
        #[cfg(feature = "bundles")]
        let (skills, theme) = (
            info.map_or(json!([]), |i| json!(i.skills)),
            info.and_then(|i| i.theme.clone()),
        );
        // A build without bundles hands over none.
        #[cfg(not(feature = "bundles"))]
        let (skills, theme) = (json!([]), None::<PathBuf>);
        #[cfg(feature = "journal")]
        let replay = (self.replay.iter()).map(|(n, r)| (n.clone(), json!(r)));
        // A build without the journal replays nothing.
        #[cfg(not(feature = "journal"))]
        let replay = std::iter::empty::<(String, Value)>();
        json!({
            "name": self.name,
            "scope": self.found.scope.as_str(),
            "dir": self.found.dir,
            "status": self.status(),
            "problem": self.problem(),
            "shadowed_by": by,
            "ready_via": info.and_then(|i| i.ready_via),
            "error": info.and_then(|i| i.state.error()),
            "commands": names(|i| &i.commands),
            "tools": names(|i| &i.tools),
            "replay": replay.collect::<serde_json::Map<_, _>>(),
            "events": names(|i| &i.events),
            "intercept": info.map_or(json!([]), |i| json!(i.intercept)),
            "skills": skills,
            "theme": theme,
            "conflicts": lost.chain(won).collect::<Vec<_>>(),
            "warnings": warnings,
            "more_warnings": self.run_log.more_warnings,
            "stderr_tail": stderr,
            "log": self.log(cfg),
        })
    }
}

/// `/name` for a command, `name` for a tool.
fn shown(kind: &str, name: &str) -> String {
    match kind {
        "command" => format!("/{name}"),
        _ => name.to_string(),
    }
}

impl Report {
    fn problems(&self) -> Vec<String> {
        (self.entries.iter())
            .filter_map(|e| e.problem().map(|p| format!("{} ({p})", e.name)))
            .collect()
    }

    fn to_json(&self) -> Value {
        let entries: Vec<Value> = self
            .entries
            .iter()
            .map(|e| e.to_json(&self.config))
            .collect();
        json!({
            "ok": self.problems().is_empty(),
            "project": discovery::project_dir(&self.config.cwd),
            "global": discovery::global_dir(&self.config.zot_home),
            "startup_ms": self.startup.as_millis() as u64,
            "extensions": entries,
            "problems": self.problems(),
        })
    }

    fn to_text(&self) -> String {
        let cfg = &self.config;
        let from = match cfg.discover {
            true => format!(
                "{} and {}",
                discovery::project_dir(&cfg.cwd).display(),
                discovery::global_dir(&cfg.zot_home).display()
            ),
            false => "-e paths only (--no-ext)".into(),
        };
        let mut text = format!(
            "zot ext doctor: {} extension(s) from {from}; startup took {} s\n",
            self.entries.len(),
            seconds(self.startup, 2)
        );
        for e in &self.entries {
            text.push('\n');
            let scope = e.found.scope.as_str();
            text.push_str(&format!("{}  {scope}  {}\n", e.name, e.headline(cfg)));
            let mut field = |key: &str, value: String| {
                text.push_str(&format!("  {key:<9} {value}\n"));
            };
            field("dir", e.found.dir.display().to_string());
            if let Some(info) = &e.info {
                let list = |names: &[String], slash: &str| match names {
                    [] => "-".to_string(),
                    _ => names
                        .iter()
                        .map(|n| format!("{slash}{n}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                };
                if info.state.as_str() != "bundle" {
                    field("commands", list(&info.commands, "/"));
                    field("tools", list(&info.tools, ""));
                    #[cfg(feature = "journal")]
                    if !e.replay.is_empty() {
                        let each = e.replay.iter().map(|(n, r)| format!("{n}={r}"));
                        field("replay", each.collect::<Vec<_>>().join(" "));
                    }
                }
                if !info.events.is_empty() || !info.intercept.is_empty() {
                    let intercept: Vec<String> =
                        (info.intercept.iter()).map(|e| e.to_string()).collect();
                    let subs = format!(
                        "{} (intercepts: {})",
                        list(&info.events, ""),
                        list(&intercept, "")
                    );
                    field("events", subs);
                }
                #[cfg(feature = "bundles")]
                {
                    for skill in &info.skills {
                        field("skill", skill.display().to_string());
                    }
                    if let Some(theme) = &info.theme {
                        field("theme", theme.display().to_string());
                    }
                }
            }
            for c in e.conflicts() {
                field("conflict", c);
            }
            for w in e.late_warning(cfg).iter().chain(&e.run_log.warnings) {
                field("warning", w.clone());
            }
            if let Some(log) = e.log(cfg) {
                let more = e.run_log.more_warnings;
                if more > 0 {
                    field("warning", format!("... {more} more in the log"));
                }
                if e.problem().is_some() {
                    for line in &e.run_log.stderr_tail {
                        field("stderr", line.clone());
                    }
                }
                field("log", log.display().to_string());
            }
        }
        let problems = self.problems();
        text.push('\n');
        if problems.is_empty() {
            text.push_str("ok: nothing failed\n");
        } else {
            text.push_str(&format!(
                "{} failed: {}\n",
                problems.len(),
                problems.join("; ")
            ));
        }
        text
    }
}

/// `d` in seconds, rounded to `places` decimals (at most 3). Integer
/// arithmetic: core's float formatter would grow the minimal static
/// binary for these three numbers.
fn seconds(d: Duration, places: u32) -> String {
    let scale = 10u128.pow(places);
    let units = (d.as_millis() * scale + 500) / 1000;
    let (whole, frac) = ((units / scale) as u64, (units % scale) as u64);
    match places {
        0 => whole.to_string(),
        _ => format!("{whole}.{frac:0width$}", width = places as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;
    use std::time::Duration;

    #[test]
    fn seconds_round_to_their_places() {
        let ms = Duration::from_millis;
        assert_eq!(seconds(ms(1234), 2), "1.23");
        assert_eq!(seconds(ms(1235), 2), "1.24");
        assert_eq!(seconds(ms(50), 1), "0.1");
        assert_eq!(seconds(ms(200), 3), "0.200");
        assert_eq!(seconds(ms(61_999), 0), "62");
    }
}
