//! Issue 9.2, reviewed (R10): the session's memory does not grow with
//! the number of notes an extension sends, even when its output is read.

mod common;

use common::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

/// Far below what one record per note would take (about 60 bytes each).
const NOTES: u64 = 1_000_000;
const RSS_BOUND_KB: u64 = 48 * 1024;

#[test]
fn the_session_keeps_no_record_per_note() {
    let t = TempDir::new("review-mem-notes");
    let done = t.join("flood.done");
    let ext = sdk_ext(
        &t.join("flood"),
        "flood",
        json!({"flood": {"count": NOTES, "size": 1, "done": done}}),
    );
    let mut child = zot()
        .args(["--no-ext", "-e"])
        .arg(&ext)
        .arg("--cwd")
        .arg(t.path())
        .env("ZOT_HOME", t.join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn zot");
    let pid = child.id();
    // Read everything, as a terminal would; say when `/ext` is answered.
    let stdout = child.stdout.take().expect("stdout");
    let (tx, answered) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("extensions:") {
                let _ = tx.send(());
            }
        }
    });
    let mut stdin = child.stdin.take().expect("stdin");
    // The flood is written by the time `done` exists; what the host has
    // not handled yet comes before the answer to `/ext`.
    let end = std::time::Instant::now() + Duration::from_secs(120);
    while !done.exists() {
        assert!(std::time::Instant::now() < end, "the flood was not written");
        std::thread::sleep(Duration::from_millis(100));
    }
    writeln!(stdin, "/ext").expect("write /ext");
    answered
        .recv_timeout(Duration::from_secs(120))
        .expect("the session answers /ext after the flood");
    let peak = peak_rss_kb(pid).expect("VmHWM");
    drop(stdin);
    let _ = child.wait();
    assert!(
        peak < RSS_BOUND_KB,
        "zot peaked at {peak} kB after {NOTES} notes: memory grows per note"
    );
}
