//! Memory bounds: the session's memory does not grow with
//! the number of notes an extension sends, even when its output is read.

mod common;

use common::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
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
    let mut child = spawn_raw(&t, &[], &ext);
    let pid = child.id();
    let answered = ext_answers(child.stdout.take().expect("stdout"));
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

/// Lines piped in faster than the session runs them.
const LINES: usize = 1_000_000;
const INPUT_RSS_BOUND_KB: u64 = 40 * 1024;

#[test]
fn the_session_does_not_read_its_input_far_ahead() {
    let t = TempDir::new("review-mem-input");
    // `/x` takes 5 s; the lines behind it wait.
    let ext = sdk_ext(
        &t.join("slow"),
        "slow",
        json!({"commands": ["x"], "delay_ms": 5000}),
    );
    let mut child = spawn_raw(&t, &[], &ext);
    let pid = child.id();
    let answered = ext_answers(child.stdout.take().expect("stdout"));
    let mut stdin = child.stdin.take().expect("stdin");
    let (wrote_tx, wrote) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        // Blank lines: nothing to run, but each one waits its turn.
        let mut input = b"/x\n".to_vec();
        input.extend(b" \n".repeat(LINES));
        input.extend(b"/ext\n");
        let _ = stdin.write_all(&input);
        let _ = wrote_tx.send(stdin);
    });
    answered
        .recv_timeout(Duration::from_secs(120))
        .expect("the session answers /ext after the blank lines");
    let peak = peak_rss_kb(pid).expect("VmHWM");
    drop(wrote.recv_timeout(Duration::from_secs(20)));
    let _ = child.wait();
    assert!(
        peak < INPUT_RSS_BOUND_KB,
        "zot peaked at {peak} kB with {LINES} lines piped in: input is read without bound"
    );
}

/// Reads the session's stdout to its end, as a terminal would; the
/// receiver gets one message per answer to `/ext`.
fn ext_answers(stdout: std::process::ChildStdout) -> crossbeam_channel::Receiver<()> {
    let (tx, answered) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("extensions:") {
                let _ = tx.send(());
            }
        }
    });
    answered
}
