//! A shutdown asked for during startup (SPEC 12: "Shutdown and reload
//! cancel pending restarts at once"): the shutdown itself waits for the
//! startup to end (SPEC 3.14), but pending restarts end when it arrives,
//! and a crash after it is not restarted.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use zot_host::{Host, HostEvent, Request};

/// `fixtures/supervision/ext.py` as extension `name` configured by `cfg`;
/// its starts are counted in `t/name.starts`.
fn ext(t: &TempDir, name: &str, cfg: Value) -> PathBuf {
    let dir = t.join(name);
    std::fs::create_dir_all(&dir).expect("create ext dir");
    let mut cfg = cfg;
    cfg["name"] = json!(name);
    cfg["starts"] = json!(t.join(&format!("{name}.starts")));
    let exec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/supervision/ext.py");
    let manifest = json!({"name": name, "exec": exec, "args": [cfg.to_string()]});
    std::fs::write(dir.join("extension.json"), manifest.to_string()).expect("write manifest");
    dir
}

fn starts(t: &TempDir, name: &str) -> Vec<u32> {
    std::fs::read_to_string(t.join(&format!("{name}.starts")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[test]
fn a_shutdown_during_startup_cancels_restarts_at_once() {
    let t = TempDir::new("life-shutdown");
    // `held` holds the startup open until `release` exists: the fixture
    // waits for it at any start but the first, and a line already in its
    // starts file makes its first start count as the second.
    let release = t.join("release");
    std::fs::write(t.join("held.starts"), "0\n").expect("seed starts");
    let held = ext(&t, "held", json!({"hold_restarts": release}));
    let crasher = ext(&t, "a", json!({"crash_starts": 1}));
    let victim = ext(&t, "b", json!({}));
    let mut cfg = config(&t, &[held, crasher, victim]);
    // Far longer than the test: a restart only happens if nothing cancels
    // it, and the startup ends only when `held` is released.
    cfg.timeouts.restart_backoff = Duration::from_secs(600);
    cfg.timeouts.startup = Duration::from_secs(600);
    let host = Host::start(cfg).expect("start host");
    wait_event(
        &host,
        "a exited",
        |e| matches!(e, HostEvent::ExtensionExited { extension, .. } if extension == "a"),
    );
    wait_for("b started", || !starts(&t, "b").is_empty());

    let (tx, rx) = crossbeam_channel::bounded(1);
    host.handle().submit(Request::Shutdown {
        reply: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    });
    wait_for("a's restart cancelled while the startup still runs", || {
        log_of(&t, "a").contains("pending restart cancelled")
    });
    // SAFETY: kill(2) on a process this test's host started.
    unsafe {
        libc::kill(starts(&t, "b")[0] as i32, libc::SIGKILL);
    }
    wait_for("b's crash logged", || log_of(&t, "b").contains("crashed ("));
    let log = log_of(&t, "b");
    assert!(
        log.contains("not restarted: the host is stopping or reloading"),
        "{log}"
    );

    std::fs::write(&release, "").expect("release held");
    let reply = rx.recv_timeout(DEADLINE).expect("shutdown reply");
    assert!(reply.is_ok(), "{reply:?}");
    let restarted = host
        .events()
        .try_iter()
        .any(|e| matches!(e, HostEvent::ExtensionRestarted { .. }));
    host.shutdown();
    assert!(!restarted, "an extension restarted after the shutdown");
    assert_eq!((starts(&t, "a").len(), starts(&t, "b").len()), (1, 1));
}
