//! `zot ext check`: runs one extension alone, the way the host does, and
//! reports each rule it checks (docs/PROTOCOL.md#author-tools) as pass, warn or
//! fail, with the time each step took.
//!
//! It drives the extension with the library's own pieces (manifest
//! loading and exec resolution, the frame types and parser of `protocol`,
//! the host's limits, `$ZOT_STARTUP_TIMEOUT` / `$ZOT_HELLO_TIMEOUT`
//! included), so what passes here is what the host accepts.

mod child;
mod confine;
mod opts;
mod report;
mod schema;
mod trial;

use super::common::{out, say, usage};
use crate::cli::common::{absolute, string, CliError};
use opts::{Opts, Probe};
use report::{Report, Status};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use zot_host::internal::manifest::{Manifest, Protocol, MANIFEST_FILE};

const HELP: &str = "\
usage: zot ext check [PATH] [--json] [--strict] [--confine] [--call TOOL JSON]...
                     [--command NAME ARGS]...

Run the extension in PATH (default: the current directory) alone, the way
the host runs it, and report each rule it keeps or breaks: manifest, exec,
hello, stdout hygiene, registrations, ready, answers to the intercepts it
subscribes to, events, shutdown and its process group. Each line says
pass, warn or fail and how long the step took; on a failure the end of the
extension's stderr is shown.

options:
      --json                 print the report as one JSON object
      --strict               warnings fail too
      --call TOOL JSON       also call TOOL with these arguments (repeatable)
      --command NAME ARGS    also run the command /NAME with ARGS (repeatable)
      --cwd DIR              project directory sent in hello_ack (default: .)
      --confine              run it confined by its manifest's permissions (Linux
                             Landlock; also ZOT_CONFINE=1) and report what was denied
  -h, --help                 show this help

The limits are the host's: ZOT_HELLO_TIMEOUT and ZOT_STARTUP_TIMEOUT
(seconds) change them here as they do for `zot` and `zot rpc`.

Exit status: 0 when nothing failed, 1 otherwise, 2 on a usage error.
";

/// Lines of stderr shown after a failure.
const STDERR_TAIL: usize = 20;

/// The most bytes of the end of stderr read to find those lines.
const STDERR_TAIL_BYTES: u64 = 64 << 10;

/// Runs `zot ext check <args>`; `cwd` is a `--cwd` given before `check`.
pub(super) fn run(cwd: Option<PathBuf>, args: Vec<OsString>) -> Result<i32, CliError> {
    let Some(opts) = parse(cwd, args)? else {
        out(HELP)?;
        return Ok(0);
    };
    // Ctrl-C or kill: the extension's group dies with this process
    // (`spawn_group`), so exiting is enough once the watchdog knows it.
    crate::cli::common::on_signal(|| {
        let _ = writeln!(std::io::stderr(), "zot ext check: interrupted");
        zot_host::internal::process::exit(130);
    })?;
    let report = check(&opts);
    if opts.json {
        out(&format!("{}\n", report.to_json(opts.strict)))?;
    } else {
        say(&report.to_text(opts.strict))?;
    }
    Ok(if report.passed(opts.strict) { 0 } else { 1 })
}

fn parse(cwd: Option<PathBuf>, args: Vec<OsString>) -> Result<Option<Opts>, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let mut cwd = cwd;
    let (mut path, mut json, mut strict, mut probes) = (None, false, false, Vec::new());
    let mut confine = false;
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("json") => json = true,
            Long("strict") => strict = true,
            Long("confine") => confine = true,
            Long("cwd") => cwd = Some(absolute(parser.value()?.into())?),
            Long("call") => {
                let tool = string(parser.value()?)?;
                let text = string(parser.value()?)?;
                let args = serde_json::from_str(&text).map_err(|e| {
                    usage(&format!(
                        "--call {tool}: the arguments are not JSON ({e}): {text}"
                    ))
                })?;
                probes.push(Probe::Call { tool, args });
            }
            Long("command") => {
                let name = string(parser.value()?)?;
                let name = name.strip_prefix('/').unwrap_or(&name).to_string();
                let args = string(parser.value()?)?;
                probes.push(Probe::Command { name, args });
            }
            Value(v) if path.is_none() => path = Some(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let cwd = match cwd {
        Some(dir) => dir,
        None => crate::cli::common::project_dir(None)?,
    };
    let mut config = crate::cli::common::host_config(PathBuf::new(), cwd.clone());
    crate::cli::common::apply_limits(&mut config, None, None)?;
    config.confine = crate::cli::common::confine_wanted(confine)?;
    if config.confine {
        // Where its data directory is, as in the host.
        config.zot_home = crate::cli::common::zot_home()?;
    }
    Ok(Some(Opts {
        path: absolute(path.unwrap_or_else(|| PathBuf::from(".")))?,
        cwd,
        config,
        json,
        strict,
        probes,
    }))
}

fn check(opts: &Opts) -> Report {
    let start = Instant::now();
    let mut report = Report::default();
    report.dir = opts.path.clone();
    if let Some((manifest, dir, exe)) = check_manifest(opts, &mut report) {
        report.dir = dir.clone();
        let logs = scratch_logs_dir();
        let log = zot_host::internal::log::log_path(&logs, &manifest.name);
        let _ = std::fs::create_dir_all(&logs);
        // Refused: reported, and it is not run unconfined instead.
        let prepared = confine::prepare(opts, &manifest, (&dir, &exe), &logs, &mut report);
        if let Ok(confined) = prepared {
            trial::run(
                opts,
                &manifest,
                &dir,
                &exe,
                &log,
                confined.as_ref(),
                &mut report,
            );
            if confined.is_some() {
                confine::denials(&log, &mut report);
            }
        }
        if report.count(Status::Fail) > 0 {
            report.stderr_tail = stderr_tail(&log);
        }
        let _ = std::fs::remove_dir_all(&logs);
    }
    report.took = start.elapsed();
    report
}

/// The manifest and exec rules; the manifest, its directory and the
/// resolved executable when the extension can be started.
fn check_manifest(opts: &Opts, report: &mut Report) -> Option<(Manifest, PathBuf, PathBuf)> {
    let t = Instant::now();
    let path = &opts.path;
    let (dir, file) = if path.is_dir() {
        (path.clone(), path.join(MANIFEST_FILE))
    } else if path.file_name().is_some_and(|n| n == MANIFEST_FILE) && path.is_file() {
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        (dir, path.clone())
    } else {
        report
            .fail(
                "manifest",
                t.elapsed(),
                format!("{} is not a directory", path.display()),
            )
            .hint("give the extension's directory (the one holding extension.json)");
        return None;
    };
    if !file.exists() {
        report
            .fail(
                "manifest",
                t.elapsed(),
                format!("no {MANIFEST_FILE} in {}", dir.display()),
            )
            .hint(
                "run zot ext check in an extension's directory, or start one with zot ext new NAME",
            );
        return None;
    }
    let manifest = match Manifest::load(&file) {
        Ok(m) => m,
        Err(e) => {
            report.fail("manifest", t.elapsed(), e.to_string());
            return None;
        }
    };
    report.extension = Some(manifest.name.clone());
    let version = manifest.version.as_deref().unwrap_or("(no version)");
    report.pass(
        "manifest",
        t.elapsed(),
        format!("{MANIFEST_FILE} is valid: {} {version}", manifest.name),
    );
    if !manifest.enabled {
        report.warn(
            "manifest",
            Duration::ZERO,
            "\"enabled\": false: the host will not start it (checked anyway)",
        );
    }
    // An MCP server speaks another protocol; this checker knows zot's.
    if manifest.protocol != Protocol::Zot {
        let protocol = manifest.protocol.as_str();
        let msg =
            format!("\"protocol\": {protocol:?}: zot ext check runs zot-protocol extensions only");
        report.warn("manifest", Duration::ZERO, msg);
        return None;
    }
    #[cfg(feature = "bundles")]
    if !manifest.provides.summary().is_empty() {
        let files = (manifest.provides.skills.iter())
            .chain(&manifest.provides.theme)
            .map(|p| p.strip_prefix(&dir).unwrap_or(p).display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let provides = manifest.provides.summary();
        report.pass("provides", Duration::ZERO, format!("{provides}: {files}"));
    }
    let Some(exec) = manifest.exec.clone() else {
        let msg = "no `exec`: a bundle, never started (nothing more to check)";
        report.pass("exec", Duration::ZERO, msg);
        return None;
    };
    let t = Instant::now();
    let exe = match manifest.resolve_exec(&dir) {
        Ok(exe) => exe,
        Err(e) => {
            let f = report.fail("exec", t.elapsed(), e);
            f.hint(format!("install `{exec}` or set exec to a path"));
            return None;
        }
    };
    match exec_problem(&exe) {
        None => {
            let shown = if exec.contains('/') {
                exec.clone()
            } else {
                format!("{exec} ({})", exe.display())
            };
            report.pass("exec", t.elapsed(), format!("{shown} is executable"));
            Some((manifest, dir, exe))
        }
        Some(problem) => {
            let shown = exe.display().to_string().replace("/./", "/");
            let msg = format!("{exec}: {problem} ({shown})");
            let f = report.fail("exec", t.elapsed(), msg);
            let hint = build_hint(&dir, &exec).or_else(|| {
                (problem == "not executable").then(|| format!("chmod +x {}", exe.display()))
            });
            if let Some(hint) = hint {
                f.hint(hint);
            }
            None
        }
    }
}

fn exec_problem(exe: &Path) -> Option<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(exe) {
        Err(_) => Some("no such file"),
        Ok(m) if m.is_dir() => Some("is a directory"),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some("not executable"),
        Ok(_) => None,
    }
}

/// How to build the missing executable of an extension that needs a build.
fn build_hint(dir: &Path, exec: &str) -> Option<String> {
    let at = dir.display();
    if dir.join("go.mod").is_file() {
        Some(format!(
            "it is a Go extension that is not built yet: cd {at} && go build -o {exec} ."
        ))
    } else if dir.join("Cargo.toml").is_file() {
        Some(format!(
            "it is a Rust extension that is not built yet: cd {at} && cargo build --release \
             --target-dir target   (without --target-dir, a CARGO_TARGET_DIR or \
             build.target-dir puts the binary elsewhere)"
        ))
    } else {
        None
    }
}

/// A fresh directory for the run's log (the extension's stderr), so a
/// check never touches `$ZOT_HOME`.
fn scratch_logs_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!("zot-check-{}-{nanos}", std::process::id()))
}

/// The last lines the extension wrote to stderr (the host's own `[zot]`
/// lines left out: the report says the same), read from the end of the
/// log: a log of any size costs at most [`STDERR_TAIL_BYTES`].
fn stderr_tail(log: &Path) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(log) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let from = len.saturating_sub(STDERR_TAIL_BYTES);
    let mut bytes = Vec::new();
    let read = file.seek(SeekFrom::Start(from)).and_then(|_| {
        let mut limited = file.take(STDERR_TAIL_BYTES);
        limited.read_to_end(&mut bytes)
    });
    if read.is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    if from > 0 && !lines.is_empty() {
        lines.remove(0); // a line cut by where the tail begins
    }
    lines.retain(|l| !l.starts_with("[zot] "));
    let from = lines.len().saturating_sub(STDERR_TAIL);
    lines[from..].iter().map(|l| l.to_string()).collect()
}
