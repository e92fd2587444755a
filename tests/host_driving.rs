//! Who runs the host loop: inline, the thread whose call waits (nothing
//! runs between calls; `poll` and `next_event` run it); threaded, a loop
//! thread of the host's own. The rest of the suite runs inline, and
//! threaded with `ZOT_TEST_HOST=threaded`.

mod common;

use common::*;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;
use zot_host::{Host, HostEvent, HostHandle, Request};

/// The thread a `list` reply callback ran on: the one that ran the loop.
fn reply_thread(host: &HostHandle) -> ThreadId {
    let ran_on: Arc<Mutex<Option<ThreadId>>> = Arc::default();
    let seen = ran_on.clone();
    host.call(|reply| Request::List {
        reply: Box::new(move |r| {
            *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::thread::current().id());
            reply(r)
        }),
    })
    .expect("list");
    let ran_on = ran_on.lock().unwrap_or_else(|p| p.into_inner());
    ran_on.expect("the reply callback ran")
}

#[test]
fn an_inline_call_runs_the_loop_on_the_callers_thread() {
    let t = TempDir::new("drive-thread");
    let a = ext_dir(&t.join("a"), "a", json!({}));
    // Inline whatever ZOT_TEST_HOST says: this is about the inline host.
    let host = Host::start(config(&t, &[a])).expect("start host");
    host.wait_ready();
    assert_eq!(reply_thread(&host.handle()), std::thread::current().id());
    // A call from another thread runs the loop there while none else does.
    let handle = host.handle();
    let other = std::thread::spawn(move || (reply_thread(&handle), std::thread::current().id()));
    let (ran_on, caller) = other.join().expect("calling thread");
    assert_eq!(ran_on, caller);
    host.shutdown();
}

#[test]
fn a_threaded_call_waits_for_the_loop_thread() {
    let t = TempDir::new("drive-threaded");
    let a = ext_dir(&t.join("a"), "a", json!({}));
    let host = Host::start_threaded(config(&t, &[a])).expect("start host");
    host.wait_ready();
    assert_ne!(reply_thread(&host.handle()), std::thread::current().id());
    host.shutdown();
}

#[test]
fn an_inline_host_waits_for_a_call_or_poll_to_run() {
    let t = TempDir::new("drive-poll");
    let pid = t.join("a.pid");
    let note = json!({"type": "notify", "level": "info", "message": "up"});
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"pid_file": pid, "on_ready": [note]}),
    );
    let host = Host::start(config(&t, &[a])).expect("start host");
    // The extension runs and has said hello and ready, but no thread ran
    // the loop since the host started: nothing was handled.
    read_pid(&pid);
    std::thread::sleep(Duration::from_millis(300));
    assert!(host.events().is_empty(), "events came without a call");
    // poll runs the loop: startup ends, then the note comes.
    let ready = host.next_event(DEADLINE).expect("the ready event");
    assert_eq!(
        ready,
        HostEvent::Ready {
            extensions: vec!["a".into()]
        }
    );
    wait_event(&host, "the note", |e| matches!(e, HostEvent::Notify { .. }));
    host.shutdown();
}

#[test]
fn poll_returns_at_its_timeout_when_nothing_comes() {
    let t = TempDir::new("drive-idle");
    let a = ext_dir(&t.join("a"), "a", json!({}));
    let host = start_ready(config(&t, &[a]));
    while host.events().try_recv().is_ok() {}
    assert!(!host.poll(Duration::from_millis(50)));
    assert!(host.next_event(Duration::ZERO).is_none());
    host.shutdown();
}

#[test]
fn the_core_calls_answer_inline_and_threaded() {
    both(|| {
        let t = TempDir::new("drive-both");
        let a = ext_dir(
            &t.join("a"),
            "a",
            json!({"register": [command("x")],
                   "commands": {"x": {"action": "display", "display": "ok"}}}),
        );
        let host = start_ready(config(&t, &[a]));
        assert_eq!(display_of(&host, "x").as_deref(), Some("ok"));
        let report = host.reload().expect("reload");
        assert_eq!((report.stopped, report.loaded), (1, 1));
        wait_ext_ready(&host, "a");
        assert_eq!(display_of(&host, "x").as_deref(), Some("ok"));
        host.shutdown();
    });
}

/// The `step`s of the `turn_start` events an extension recorded.
fn steps_recorded(record: &std::path::Path) -> Vec<u64> {
    recorded(record)
        .iter()
        .filter(|f| f["type"] == "event" && f["event"] == "turn_start")
        .filter_map(|f| f["step"].as_u64())
        .collect()
}

#[test]
fn an_inline_host_writes_submitted_events_at_the_next_call_in_one_batch() {
    let t = TempDir::new("drive-batch");
    let record = t.join("a.record");
    let a = ext_dir(
        &t.join("a"),
        "a",
        json!({"register": [subscribe(&["turn_start"], &[])], "record": record}),
    );
    let host = Host::start(config(&t, &[a])).expect("start host");
    host.wait_ready();
    let step = |n: u64| zot_host::EventPayload {
        step: Some(n),
        ..Default::default()
    };
    for n in 0..10 {
        host.emit_nowait("turn_start", step(n));
    }
    // Queued, not run: nothing was written to the extension.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        steps_recorded(&record),
        Vec::<u64>::new(),
        "submitted events were written before a call ran the loop"
    );
    // The next call hands them over, in order, before its own.
    assert_eq!(host.emit("turn_start", step(10)).expect("emit"), ["a"]);
    wait_for("11 events recorded", || steps_recorded(&record).len() >= 11);
    assert_eq!(steps_recorded(&record), (0..11).collect::<Vec<_>>());
    // A batch's worth waiting (256) runs the loop at the submit that
    // completes it, without a call: the queue stays bounded.
    for n in 11..11 + 256 {
        host.emit_nowait("turn_start", step(n));
    }
    wait_for("267 events recorded without a call", || {
        steps_recorded(&record).len() >= 267
    });
    assert_eq!(steps_recorded(&record), (0..267).collect::<Vec<_>>());
    host.shutdown();
}

#[test]
fn an_owned_host_runs_only_on_its_thread_while_it_waits_on_its_own_channel() {
    use zot_host::internal::surface;
    let t = TempDir::new("drive-owned");
    let a = ext_dir(&t.join("a"), "a", json!({}));
    let host = surface::start(config(&t, &[a])).expect("start host");
    // The loop selects on it with everything else.
    let (own_tx, own) = crossbeam_channel::unbounded();
    // Another thread's call does not run the loop: the owner's poll does,
    // and the other thread's message ends that poll.
    let handle = host.handle();
    let other = std::thread::spawn(move || {
        let ran_on = reply_thread(&handle);
        own_tx.send("done").expect("the owner listens");
        ran_on
    });
    let end = std::time::Instant::now() + DEADLINE;
    let came = poll_until(DEADLINE, || {
        surface::poll_with(&host, &own, Some(end))
            .ok_or_else(|| "no message before the deadline".to_string())
    });
    assert_eq!(came, Ok("done"));
    let ran_on = other.join().expect("calling thread");
    assert_eq!(ran_on, std::thread::current().id());
    // Once every sender is gone, it says so at once.
    assert_eq!(
        surface::poll_with(&host, &own, None),
        Some(Err(crossbeam_channel::RecvError))
    );
    host.shutdown();
}
