//! The journal: a durable, append-only record of every tool call, one
//! JSON line per step (`accepted`, `verdict`, `dispatched`, `finished`),
//! each on disk before the step takes effect. The host's loop buffers
//! the records of a turn and writes and `fdatasync`s them at once
//! ([`Journal::sync`]) before the turn's frames and answers go out.
//! Started on a journal whose calls have no `finished` (a crash), the
//! host reports them and runs none by itself; the embedder resumes or
//! abandons each (docs/JOURNAL.md).

use crate::types::Replay;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// A result past this many bytes is journaled cut, with its size.
pub const RESULT_LIMIT: usize = 64 * 1024;

/// Past this size the journal is rotated to `PATH.1`.
pub const ROTATE_BYTES: u64 = 64 * 1024 * 1024;

/// A call a crash interrupted: accepted, never finished.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InterruptedCall {
    /// Its key (the `operation_key` of its `tool_call` frames).
    pub call: String,
    /// The tool's name.
    pub tool: String,
    /// The extension that owned the tool when it was accepted.
    pub extension: String,
    /// The arguments as the guards left them (as proposed when no
    /// verdict was journaled).
    pub args: Value,
    /// The tool's policy when it was accepted.
    pub replay: Replay,
    /// Milliseconds since the Unix epoch.
    pub accepted_at: u64,
    /// Who asked for it: the surface (`embedder` for the library,
    /// `rpc`, `mcp`, `session`), or `extension:NAME` for an extension's
    /// `call_tool`.
    pub origin: String,
    /// It was handed to its extension before the crash.
    #[serde(skip)]
    pub dispatched: bool,
}

/// An open journal, locked against other hosts.
pub struct Journal {
    path: PathBuf,
    inner: Mutex<Inner>,
    /// Makes call keys unique within this process.
    counter: AtomicU64,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Journal({})", self.path.display())
    }
}

struct Inner {
    file: File,
    size: u64,
    /// Calls accepted and not finished: their `accepted` record, with
    /// the args of their verdict.
    open: Open,
    /// Those open at start, until each is resolved.
    interrupted: Vec<String>,
    /// A note for the embedder about how the journal was read.
    notes: Vec<String>,
    /// The host stopped: the lock is released, nothing more is written.
    closed: bool,
    /// Records of the loop's turn not on disk yet ([`Journal::sync`]).
    pending: Vec<Buffered>,
    /// Records written and syncs made so far ([`Journal::counts`]).
    records: u64,
    syncs: u64,
}

/// A record waiting for the turn's sync, and what it changes in the
/// calls known once it is on disk.
struct Buffered {
    line: Vec<u8>,
    key: String,
    apply: Apply,
}

/// What a record changes in [`Inner::open`] once it is on disk.
enum Apply {
    Accepted(Box<InterruptedCall>),
    Args(Value),
    Dispatched,
    Finished,
    Nothing,
}

impl Apply {
    fn to(self, inner: &mut Inner, key: &str) {
        match self {
            Apply::Accepted(call) => {
                inner.open.insert(key.to_string(), *call);
                // Resumed: no longer the crash's to resolve.
                inner.interrupted.retain(|k| k != key);
            }
            Apply::Args(args) => {
                if let Some(open) = inner.open.get_mut(key) {
                    open.args = args;
                }
            }
            Apply::Dispatched => {
                if let Some(open) = inner.open.get_mut(key) {
                    open.dispatched = true;
                }
            }
            Apply::Finished => {
                inner.open.remove(key);
                inner.interrupted.retain(|k| k != key);
            }
            Apply::Nothing => {}
        }
    }
}

/// A failed [`Journal::sync`]: the error, naming the file, and the keys
/// of the calls whose records were lost with it.
#[derive(Debug)]
pub struct SyncFailed {
    /// Why, naming the file.
    pub error: String,
    /// The calls with records in the lost batch.
    pub keys: Vec<String>,
}

/// The calls open (accepted, not finished), oldest first: few at a
/// time, so a list (a map type of its own would cost the binary more).
#[derive(Default)]
struct Open(Vec<InterruptedCall>);

impl Open {
    fn get(&self, key: &str) -> Option<&InterruptedCall> {
        self.0.iter().find(|c| c.call == key)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut InterruptedCall> {
        self.0.iter_mut().find(|c| c.call == key)
    }

    fn insert(&mut self, key: String, call: InterruptedCall) {
        self.remove(&key);
        self.0.push(call);
    }

    fn remove(&mut self, key: &str) {
        self.0.retain(|c| c.call != key);
    }

    fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|c| &c.call)
    }

    fn values(&self) -> impl Iterator<Item = &InterruptedCall> {
        self.0.iter()
    }
}

/// The `accepted` record of `call`.
fn accepted_record(call: &InterruptedCall) -> Value {
    json!({
        "step": "accepted", "at": call.accepted_at, "call": call.call,
        "tool": call.tool, "extension": call.extension, "args": call.args,
        "origin": call.origin, "replay": call.replay,
    })
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    since.map_or(0, |d| d.as_millis() as u64)
}

impl Journal {
    /// Opens (creating, mode 0600) and locks the journal at `path`, and
    /// reads what it holds. Fails naming the file when it cannot be
    /// opened, another host holds it, or a line other than a torn last
    /// one does not parse.
    pub fn open(path: &Path) -> Result<Journal, String> {
        let name = path.display();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("cannot open journal {name}: {e}"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "journal {name} is in use by another host (it is locked)"
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock journal {name}: {e}"))
            }
        }
        let meta = file
            .metadata()
            .map_err(|e| format!("journal {name}: {e}"))?;
        let mut open = Open::default();
        let mut notes = Vec::new();
        let mut size = meta.len();
        // A device (such as /dev/full) has nothing to read back.
        if meta.is_file() {
            file.seek(SeekFrom::Start(0))
                .map_err(|e| format!("cannot read journal {name}: {e}"))?;
            let reader = io::BufReader::new(&file);
            let (torn_at, newline_missing) =
                scan(path, reader, |record| apply_record(&mut open, record))?;
            if let Some(at) = torn_at {
                notes.push(format!(
                    "journal {name}: its last line was cut short (a crash while writing it); ignored"
                ));
                // Cut off, so that the next record starts a line.
                file.set_len(at)
                    .map_err(|e| format!("cannot repair journal {name}: {e}"))?;
                size = at;
            }
            if newline_missing {
                (file.write_all(b"\n").and_then(|_| file.sync_data()))
                    .map_err(|e| format!("cannot repair journal {name}: {e}"))?;
                size += 1;
            }
        }
        let interrupted = open.keys().cloned().collect();
        Ok(Journal {
            path: path.to_path_buf(),
            inner: Mutex::new(Inner {
                file,
                size,
                open,
                interrupted,
                notes,
                closed: false,
                pending: Vec::new(),
                records: 0,
                syncs: 0,
            }),
            counter: AtomicU64::new(0),
        })
    }

    /// Releases the lock when the host stops, so that another host may
    /// open the journal at once (whatever still holds this one).
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        let _ = inner.file.unlock();
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new call key, unique across runs.
    pub fn new_key(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{}-{}-{n}", now_ms(), std::process::id())
    }

    /// The calls interrupted by a crash and not resolved yet.
    pub fn interrupted(&self) -> Vec<InterruptedCall> {
        let inner = self.lock();
        (inner.interrupted.iter())
            .filter_map(|k| inner.open.get(k).cloned())
            .collect()
    }

    /// What reading the journal found worth saying (a torn last line).
    pub fn notes(&self) -> Vec<String> {
        self.lock().notes.clone()
    }

    /// The open call `key`, when it is one interrupted by a crash.
    pub fn interrupted_call(&self, key: &str) -> Option<InterruptedCall> {
        let inner = self.lock();
        (inner.interrupted.iter().any(|k| k == key))
            .then(|| inner.open.get(key).cloned())
            .flatten()
    }

    /// Buffers `accepted` for call `key`, for the turn's sync.
    pub fn accepted(&self, call: &InterruptedCall) -> Result<(), String> {
        let record = accepted_record(call);
        self.buffer(
            &call.call,
            record.to_string(),
            Apply::Accepted(Box::new(call.clone())),
        )
    }

    /// Buffers the guards' verdict on call `key`: `block` with `reason`,
    /// else allowed with `args` (rewritten or not).
    pub fn verdict(&self, key: &str, block: Option<&str>, args: &Value) -> Result<(), String> {
        let mut record = json!({"step": "verdict", "at": now_ms(), "call": key});
        let apply = match block {
            Some(reason) => {
                record["decision"] = "block".into();
                record["reason"] = reason.into();
                Apply::Nothing
            }
            None => {
                record["decision"] = "allow".into();
                record["args"] = args.clone();
                Apply::Args(args.clone())
            }
        };
        self.buffer(key, record.to_string(), apply)
    }

    /// Buffers one guard's answer on call `key`: `decision` (`allow`,
    /// `block`, `rewrite`, `unavailable`) with its reason or new args.
    pub fn guard(
        &self,
        key: &str,
        guard: &str,
        decision: &str,
        detail: Option<(&str, Value)>,
    ) -> Result<(), String> {
        let mut record = json!({"step": "verdict", "at": now_ms(), "call": key,
                                "guard": guard, "decision": decision});
        if let Some((field, value)) = detail {
            record[field] = value;
        }
        self.buffer(key, record.to_string(), Apply::Nothing)
    }

    /// Buffers that call `key` is handed to its extension.
    pub fn dispatched(&self, key: &str) -> Result<(), String> {
        let record = json!({"step": "dispatched", "at": now_ms(), "call": key});
        self.buffer(key, record.to_string(), Apply::Dispatched)
    }

    /// Buffers how call `key` ended: `status`, and `result` (JSON text;
    /// past [`RESULT_LIMIT`] bytes its start as `result_text`, with its
    /// whole size).
    pub fn finished(&self, key: &str, status: &str, result: Option<&str>) -> Result<(), String> {
        self.buffer(key, finished_line(key, status, result), Apply::Finished)
    }

    /// Writes how call `key` ended at once, with its own sync: for a
    /// resolution outside the loop's turns (abandon, a recovered result).
    pub fn finished_now(
        &self,
        key: &str,
        status: &str,
        result: Option<&str>,
    ) -> Result<(), String> {
        let mut inner = self.lock();
        self.open_for_writing(&inner)?;
        let mut line = finished_line(key, status, result).into_bytes();
        line.push(b'\n');
        self.write_synced(&mut inner, &[(line, key)])?;
        Apply::Finished.to(&mut inner, key);
        Ok(())
    }

    /// Adds a record to the turn's buffer: on disk at the next
    /// [`Journal::sync`], which the loop makes before the turn's effects.
    fn buffer(&self, key: &str, line: String, apply: Apply) -> Result<(), String> {
        let mut inner = self.lock();
        self.open_for_writing(&inner)?;
        let mut line = line.into_bytes();
        line.push(b'\n');
        inner.pending.push(Buffered {
            line,
            key: key.to_string(),
            apply,
        });
        Ok(())
    }

    fn open_for_writing(&self, inner: &Inner) -> Result<(), String> {
        match inner.closed {
            true => Err(format!(
                "journal {} is closed: the host stopped",
                self.path.display()
            )),
            false => Ok(()),
        }
    }

    /// Whether records wait for [`Journal::sync`].
    pub fn has_pending(&self) -> bool {
        !self.lock().pending.is_empty()
    }

    /// Writes the records buffered since the last sync in one write and
    /// one `fdatasync`. On failure the file is cut back to where it
    /// was; the error names it, with the keys of the calls whose records
    /// were lost (those calls fail).
    pub fn sync(&self) -> Result<(), SyncFailed> {
        let mut inner = self.lock();
        let pending = std::mem::take(&mut inner.pending);
        if pending.is_empty() {
            return Ok(());
        }
        let failed = |error: String, pending: &[Buffered]| {
            let mut keys: Vec<String> = Vec::new();
            for b in pending {
                if !keys.contains(&b.key) {
                    keys.push(b.key.clone());
                }
            }
            SyncFailed { error, keys }
        };
        if let Err(error) = self.open_for_writing(&inner) {
            return Err(failed(error, &pending));
        }
        let lines: Vec<(Vec<u8>, &str)> = (pending.iter())
            .map(|b| (b.line.clone(), b.key.as_str()))
            .collect();
        if let Err(error) = self.write_synced(&mut inner, &lines) {
            return Err(failed(error, &pending));
        }
        for b in pending {
            b.apply.to(&mut inner, &b.key);
        }
        Ok(())
    }

    /// How many records were written and how many syncs made, since the
    /// host opened the journal: the records of a turn share one sync.
    pub fn counts(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.records, inner.syncs)
    }

    /// Writes `lines` (each ending in a newline) and syncs them, rotating
    /// first when they would take the file past [`ROTATE_BYTES`].
    fn write_synced(&self, inner: &mut Inner, lines: &[(Vec<u8>, &str)]) -> Result<(), String> {
        let len: u64 = lines.iter().map(|(l, _)| l.len() as u64).sum();
        if inner.size > 0 && inner.size + len > ROTATE_BYTES {
            self.rotate(inner)?;
        }
        let mut bytes = Vec::with_capacity(len as usize);
        for (line, _) in lines {
            bytes.extend_from_slice(line);
        }
        let written = inner
            .file
            .write_all(&bytes)
            .and_then(|_| inner.file.sync_data());
        if let Err(e) = written {
            let size = inner.size;
            let _ = inner.file.set_len(size);
            return Err(format!("cannot write journal {}: {e}", self.path.display()));
        }
        inner.size += len;
        inner.records += lines.len() as u64;
        inner.syncs += 1;
        Ok(())
    }

    /// Moves the journal to `PATH.1` and starts a new one holding the
    /// `accepted` (and verdict) records of the calls still open.
    fn rotate(&self, inner: &mut Inner) -> Result<(), String> {
        let name = self.path.display();
        let fail = |e: io::Error| format!("cannot rotate journal {name}: {e}");
        let mut fresh_path = self.path.clone().into_os_string();
        fresh_path.push(".new");
        let fresh_path = PathBuf::from(fresh_path);
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        let mut fresh = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&fresh_path)
            .map_err(fail)?;
        fresh
            .try_lock()
            .map_err(|e| fail(io::Error::other(e.to_string())))?;
        let mut text = Vec::new();
        for call in inner.open.values() {
            let mut accepted = accepted_record(call);
            accepted["carried"] = true.into();
            text.extend_from_slice(accepted.to_string().as_bytes());
            text.push(b'\n');
            if call.dispatched {
                let d = json!({"step": "dispatched", "at": call.accepted_at, "call": call.call});
                text.extend_from_slice(d.to_string().as_bytes());
                text.push(b'\n');
            }
        }
        fresh
            .write_all(&text)
            .and_then(|_| fresh.sync_data())
            .map_err(fail)?;
        std::fs::rename(&self.path, &old).map_err(fail)?;
        std::fs::rename(&fresh_path, &self.path).map_err(fail)?;
        fresh.seek(SeekFrom::End(0)).map_err(fail)?;
        inner.file = fresh;
        inner.size = text.len() as u64;
        Ok(())
    }
}

/// The `finished` record of call `key`, as a line (no newline).
fn finished_line(key: &str, status: &str, result: Option<&str>) -> String {
    let mut record = json!({"step": "finished", "at": now_ms(), "call": key, "status": status});
    let mut raw = None;
    match result {
        Some(text) if text.len() > RESULT_LIMIT => {
            let mut end = RESULT_LIMIT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            record["result_text"] = text[..end].into();
            record["truncated"] = true.into();
            record["size"] = text.len().into();
        }
        other => raw = other,
    }
    let mut line = record.to_string();
    if let Some(raw) = raw {
        // Spliced in as it is: no tree of it is built.
        line.pop();
        line.push_str(",\"result\":");
        line.push_str(raw);
        line.push('}');
    }
    line
}

/// A line longer than this is no record (the journal is not read into
/// memory whole: a line at a time).
const MAX_LINE: u64 = 256 * 1024 * 1024;

/// Reads the journal's lines from `reader` one at a time, handing each
/// record to `each`. A last line cut short that does not parse is left
/// out: returned is where it starts, if so, and whether a last line that
/// parsed lacks its newline. Any other bad line is an error naming the
/// file and the line.
fn scan(
    path: &Path,
    mut reader: impl BufRead,
    mut each: impl FnMut(Map<String, Value>),
) -> Result<(Option<u64>, bool), String> {
    let name = path.display();
    let (mut offset, mut number, mut line) = (0u64, 0u64, Vec::new());
    loop {
        line.clear();
        let n = (reader.by_ref().take(MAX_LINE))
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("cannot read journal {name}: {e}"))?;
        if n == 0 {
            return Ok((None, false));
        }
        number += 1;
        let complete = line.last() == Some(&b'\n');
        if !complete && n as u64 == MAX_LINE {
            return Err(format!(
                "journal {name}: line {number} is longer than {MAX_LINE} bytes"
            ));
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if !text.is_empty() {
            match parse_record(text) {
                Ok(record) => each(record),
                Err(_) if !complete => return Ok((Some(offset), false)),
                Err(why) => {
                    return Err(format!(
                        "journal {name}: line {number} is not a journal record: {why}"
                    ))
                }
            }
        }
        if !complete {
            return Ok((None, !text.is_empty()));
        }
        offset += n as u64;
    }
}

/// One line as a record: a JSON object with a string `step` and `call`.
fn parse_record(line: &[u8]) -> Result<Map<String, Value>, String> {
    let value: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let Value::Object(record) = value else {
        return Err("not a JSON object".into());
    };
    for key in ["step", "call"] {
        if !record.get(key).is_some_and(Value::is_string) {
            return Err(format!("no string `{key}`"));
        }
    }
    let step = record["step"].as_str().unwrap_or("");
    if !["accepted", "verdict", "dispatched", "finished"].contains(&step) {
        return Err(format!("unknown step {step:?}"));
    }
    if step == "accepted" && !record.get("tool").is_some_and(Value::is_string) {
        return Err("accepted without a string `tool`".into());
    }
    Ok(record)
}

fn apply_record(open: &mut Open, record: Map<String, Value>) {
    let text = |k: &str| {
        record
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let key = text("call");
    match record["step"].as_str().unwrap_or("") {
        "accepted" => {
            let replay = record.get("replay").and_then(Value::as_str);
            let call = InterruptedCall {
                call: key.clone(),
                tool: text("tool"),
                extension: text("extension"),
                args: record.get("args").cloned().unwrap_or(Value::Null),
                replay: replay.and_then(Replay::parse).unwrap_or_default(),
                accepted_at: record.get("at").and_then(Value::as_u64).unwrap_or(0),
                origin: text("origin"),
                dispatched: false,
            };
            open.insert(key, call);
        }
        // The guards' final args (a single guard's rewrite may be rewritten again).
        "verdict" if !record.contains_key("guard") => {
            if let (Some(call), Some(args)) = (open.get_mut(&key), record.get("args")) {
                call.args = args.clone();
            }
        }
        "dispatched" => {
            if let Some(call) = open.get_mut(&key) {
                call.dispatched = true;
            }
        }
        "verdict" => {}
        _ => {
            open.remove(&key);
        }
    }
}

/// Every record of the journal at `path`, in order, to `each`, for `zot
/// journal`: read a line at a time; a torn last line is left out, any
/// other bad line is an error naming it.
pub fn each_record(path: &Path, each: impl FnMut(Map<String, Value>)) -> Result<(), String> {
    let file =
        File::open(path).map_err(|e| format!("cannot read journal {}: {e}", path.display()))?;
    scan(path, io::BufReader::new(file), each).map(|_| ())
}

/// Every record of the journal at `path` ([`each_record`]).
pub fn read_records(path: &Path) -> Result<Vec<Map<String, Value>>, String> {
    let mut records = Vec::new();
    each_record(path, |r| records.push(r))?;
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("zot-journal-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join("j")
    }

    fn call(key: &str) -> InterruptedCall {
        InterruptedCall {
            call: key.into(),
            tool: "t".into(),
            extension: "e".into(),
            args: json!({"a": 1}),
            replay: Replay::Safe,
            accepted_at: 1,
            origin: "embedder".into(),
            dispatched: false,
        }
    }

    #[test]
    fn unfinished_calls_survive_a_reopen_and_rotation_carries_them() {
        let path = temp("reopen");
        let j = Journal::open(&path).expect("open");
        j.accepted(&call("k1")).expect("accepted");
        j.verdict("k1", None, &json!({"a": 2})).expect("verdict");
        j.dispatched("k1").expect("dispatched");
        j.accepted(&call("k2")).expect("accepted");
        j.finished("k2", "completed", Some(r#"{"x":1}"#))
            .expect("finished");
        j.sync().expect("one sync");
        assert_eq!(j.counts(), (5, 1), "five records share one sync");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        drop(j);
        let j = Journal::open(&path).expect("reopen");
        let open = j.interrupted();
        assert_eq!(open.len(), 1);
        assert_eq!(
            (open[0].call.as_str(), &open[0].args),
            ("k1", &json!({"a": 2}))
        );
        assert!(open[0].dispatched);
        let mut inner = j.lock();
        j.rotate(&mut inner).expect("rotate");
        drop(inner);
        drop(j);
        let mut old = path.clone().into_os_string();
        old.push(".1");
        assert!(Path::new(&old).exists());
        let j = Journal::open(&path).expect("after rotation");
        assert_eq!(j.interrupted().len(), 1, "carried over");
    }

    #[test]
    fn an_append_past_the_bound_rotates_first() {
        let path = temp("bound");
        let j = Journal::open(&path).expect("open");
        j.accepted(&call("open")).expect("accepted");
        j.accepted(&call("done")).expect("accepted");
        j.finished("done", "completed", None).expect("finished");
        j.sync().expect("sync");
        // As if the file had grown to the bound.
        j.lock().size = ROTATE_BYTES;
        j.dispatched("open").expect("dispatched");
        j.sync().expect("synced after rotation");
        let now = read_records(&path).expect("records");
        let steps: Vec<_> = now
            .iter()
            .map(|r| (r["step"].clone(), r["call"].clone()))
            .collect();
        assert_eq!(
            steps,
            [
                (json!("accepted"), json!("open")),
                (json!("dispatched"), json!("open"))
            ],
            "only the open call is carried over"
        );
        let mut old = path.clone().into_os_string();
        old.push(".1");
        assert_eq!(read_records(Path::new(&old)).expect("old").len(), 3);
        drop(j);
        assert_eq!(Journal::open(&path).expect("reopen").interrupted().len(), 1);
    }

    #[test]
    fn a_second_host_is_refused_and_a_bad_line_is_named() {
        let path = temp("lock");
        let j = Journal::open(&path).expect("open");
        let err = Journal::open(&path).expect_err("locked");
        assert!(
            err.contains("in use by another host") && err.contains("lock"),
            "{err}"
        );
        drop(j);
        std::fs::write(
            &path,
            "{\"step\":\"dispatched\",\"call\":\"a\"}\nnot json\n{}\n",
        )
        .unwrap();
        let err = Journal::open(&path).expect_err("bad line");
        assert!(err.contains("line 2"), "{err}");
        std::fs::write(
            &path,
            "{\"step\":\"accepted\",\"call\":\"a\",\"tool\":\"t\"}\n{\"step\":\"fini",
        )
        .unwrap();
        let j = Journal::open(&path).expect("torn last line");
        assert_eq!(j.interrupted().len(), 1);
        assert!(
            j.notes()[0].contains("last line was cut short"),
            "{:?}",
            j.notes()
        );
        j.finished_now("a", "abandoned", None)
            .expect("write after the torn line");
        drop(j);
        let j = Journal::open(&path).expect("repaired");
        assert!(j.interrupted().is_empty());
        drop(j);
        // A last line whole but for its newline counts, and gets one.
        let whole = "{\"step\":\"accepted\",\"call\":\"b\",\"tool\":\"t\"}";
        std::fs::write(&path, whole).unwrap();
        let j = Journal::open(&path).expect("open");
        j.dispatched("b").expect("dispatched");
        j.sync().expect("sync");
        drop(j);
        let j = Journal::open(&path).expect("reopen");
        assert!(j.interrupted()[0].dispatched);
    }

    #[test]
    fn a_failed_sync_names_the_file_and_the_calls_and_applies_nothing() {
        let j = Journal::open(Path::new("/dev/full")).expect("open");
        j.accepted(&call("x")).expect("buffered");
        j.dispatched("x").expect("buffered");
        let failed = j.sync().expect_err("no space");
        assert!(failed.error.contains("/dev/full"), "{}", failed.error);
        assert_eq!(failed.keys, ["x"]);
        assert!(!j.has_pending());
        assert_eq!(j.counts(), (0, 0));
        assert!(j.lock().open.get("x").is_none(), "not known as open");
    }

    #[test]
    fn a_big_result_is_cut_with_its_size() {
        let path = temp("big");
        let j = Journal::open(&path).expect("open");
        let big = json!("x".repeat(RESULT_LIMIT * 2)).to_string();
        j.finished("k", "completed", Some(&big)).expect("finished");
        j.finished("k2", "completed", Some(r#"{"a":[1]}"#))
            .expect("finished");
        j.sync().expect("sync");
        let records = read_records(&path).expect("records");
        assert_eq!(records[0]["truncated"], true);
        assert_eq!(records[0]["size"], RESULT_LIMIT * 2 + 2);
        assert_eq!(
            records[0]["result_text"].as_str().map(str::len),
            Some(RESULT_LIMIT)
        );
    }
}
