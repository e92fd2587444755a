//! `zot journal PATH [--json] [--unfinished]`: a journal's tool calls as
//! an audit log, one call a line (or one JSON object a line): when it
//! was accepted, the tool and its extension, the origin, the guards'
//! verdicts, how it ended and how long it took.

use super::common::{json, CliError};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

pub const HELP: &str = "\
usage: zot journal PATH [--json] [--unfinished]

Prints the tool calls a journal (zot --journal PATH) holds, oldest first:
time, tool, extension, origin, each guard verdict, status, duration.

options:
      --json        one JSON object per call
      --unfinished  only the calls with no finished record (a crash
                    interrupted them: resume or abandon them in the
                    session, over zot rpc or the library)
  -h, --help        show this help
";

/// One call, from its records.
#[derive(Default)]
struct Call {
    key: String,
    at: u64,
    tool: String,
    extension: String,
    origin: String,
    replay: String,
    verdicts: Vec<String>,
    dispatched: bool,
    status: Option<String>,
    ended: Option<u64>,
    resumed: bool,
}

/// PATH, `--json`, `--unfinished`; `None` after `--help`.
fn parse(args: Vec<OsString>) -> Result<Option<(PathBuf, bool, bool)>, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let (mut path, mut as_json, mut unfinished) = (None::<PathBuf>, false, false);
    while let Some(arg) = parser.next()? {
        match arg {
            Long("json") => as_json = true,
            Long("unfinished") => unfinished = true,
            Short('h') | Long("help") => {
                print!("{HELP}");
                return Ok(None);
            }
            Value(p) if path.is_none() => path = Some(p.into()),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let path = path.ok_or_else(|| CliError::Failed("zot journal: PATH is missing".into()))?;
    Ok(Some((path, as_json, unfinished)))
}

pub fn run(args: Vec<OsString>) -> Result<i32, CliError> {
    let Some((path, as_json, unfinished)) = parse(args)? else {
        return Ok(0);
    };
    // Read a record at a time; the calls still open by key.
    let mut calls: Vec<Call> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    zot_host::journal::each_record(&path, |r| {
        let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let at = r.get("at").and_then(Value::as_u64).unwrap_or(0);
        let key = text("call");
        match (text("step").as_str(), open.get(&key).copied()) {
            // Resumed after a crash: the same call, run again.
            ("accepted", Some(i)) => calls[i].resumed = true,
            ("accepted", None) => {
                open.insert(key.clone(), calls.len());
                calls.push(Call {
                    key,
                    at,
                    tool: text("tool"),
                    extension: text("extension"),
                    origin: text("origin"),
                    replay: text("replay"),
                    ..Default::default()
                });
            }
            ("verdict", Some(i)) => calls[i].verdicts.push(verdict(&r)),
            ("dispatched", Some(i)) => calls[i].dispatched = true,
            ("finished", Some(i)) => {
                calls[i].status = Some(text("status"));
                calls[i].ended = Some(at);
                open.remove(&key);
            }
            _ => {}
        }
    })
    .map_err(CliError::Failed)?;
    for c in calls.iter().filter(|c| !unfinished || c.status.is_none()) {
        let duration = c.ended.map(|e| e.saturating_sub(c.at));
        let mut status = c.status.clone().unwrap_or_else(|| match c.dispatched {
            true => "unfinished (dispatched)".into(),
            false => "unfinished".into(),
        });
        if c.resumed {
            status.push_str(" (resumed)");
        }
        if as_json {
            let line = json!({
                "call": c.key, "at": c.at, "tool": c.tool, "extension": c.extension,
                "origin": c.origin, "replay": c.replay, "verdicts": c.verdicts,
                "dispatched": c.dispatched, "status": status, "duration_ms": duration,
            });
            println!("{line}");
        } else {
            let verdicts = match c.verdicts.as_slice() {
                [] => "-".to_string(),
                all => all.join(","),
            };
            let took = duration.map_or_else(|| "-".into(), |d| format!("{d}ms"));
            println!(
                "{}  {}  {}  {}  {}  {}  {}  {}",
                c.at, c.tool, c.extension, c.origin, verdicts, status, took, c.key
            );
        }
    }
    Ok(0)
}

/// What a surface says at start about its journal: how it was read, and
/// each call a crash interrupted (none runs by itself).
pub fn startup_lines(host: &zot_host::Host) -> Vec<String> {
    let mut lines = host.journal_notes();
    for c in host.interrupted_calls() {
        lines.push(format!(
            "journal: call {} of tool {} ({}, replay {}) was interrupted by a crash and not run \
             again; resume or abandon it (the session's /resume, /abandon; zot rpc; the library)",
            c.call, c.tool, c.extension, c.replay
        ));
    }
    lines
}

/// `zot rpc`'s `interrupted_calls` event: the calls a crash interrupted,
/// which the client resumes or abandons; `None` without a journal.
pub fn interrupted_event(host: &zot_host::Host) -> Option<Vec<u8>> {
    host.journal_path()?;
    let mut event = json!({
        "type": "interrupted_calls",
        "calls": host.interrupted_calls(),
    });
    let notes = host.journal_notes();
    if !notes.is_empty() {
        event["notes"] = notes.into();
    }
    Some(json(&event))
}

/// `zot rpc`'s `resume` or `abandon` of call `key`, on a thread of its
/// own (a resume waits for its call, after startup readiness): `done`
/// gets the response's data, or its error.
pub fn resolve(
    host: zot_host::HostHandle,
    resume: bool,
    key: String,
    done: impl FnOnce(Result<Vec<u8>, String>) + Send + 'static,
) -> Result<(), String> {
    let run = move || {
        host.wait_ready();
        let data = match resume {
            true => host.resume(&key).map(|o| json(&o)),
            false => host
                .abandon(&key)
                .map(|()| json(&json!({"abandoned": key}))),
        };
        done(data.map_err(|e| e.to_string()));
    };
    std::thread::Builder::new()
        .name("zot-rpc-resume".into())
        .spawn(run)
        .map(drop)
        .map_err(|e| format!("cannot start a thread: {e}"))
}

/// A verdict record in a word: `allow`, or `block: REASON`; a single
/// guard's prefixed with its name (`GUARD block: REASON`).
fn verdict(r: &Map<String, Value>) -> String {
    let decision = match r.get("decision").and_then(Value::as_str) {
        Some(d @ ("block" | "unavailable")) => {
            let reason = r.get("reason").and_then(Value::as_str).unwrap_or("");
            format!("{d}: {reason}")
        }
        Some(other) => other.to_string(),
        None => "?".into(),
    };
    match r.get("guard").and_then(Value::as_str) {
        Some(guard) => format!("{guard} {decision}"),
        None => decision,
    }
}
