//! Bundles without a process (docs/PROTOCOL.md#bundles), `zot ext doctor`
//! (docs/PROTOCOL.md#zot-ext) and `$XDG_STATE_HOME` (docs/PROTOCOL.md#discovery),
//! through the real binary and the library. The build without the
//! `bundles` feature is tested in `tests/minimal_build.rs`.

// Some tests need the `mcp`, `author` or `bundles` feature; their helpers are unused without it.
#![cfg_attr(
    not(all(feature = "mcp", feature = "author", feature = "bundles")),
    allow(dead_code, unused_imports)
)]

mod common;

use common::{
    assert_fails_naming, assert_ok, fixture_path, run_fed, stderr_of, stdout_of, write_manifest,
    write_manifest_text, zot, Rpc, TempDir, DEADLINE,
};
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use zot_host::ExtensionState;

/// `zot ext <args>` with `$ZOT_HOME` = `t/home`, run in the project `t/proj`.
fn ext(t: &TempDir, args: &[&str]) -> Output {
    ext_cmd(t, args).output().expect("run zot ext")
}

fn ext_cmd(t: &TempDir, args: &[&str]) -> Command {
    let proj = t.join("proj");
    fs::create_dir_all(&proj).expect("project dir");
    let mut cmd = zot();
    cmd.arg("ext")
        .args(args)
        .current_dir(proj)
        .env("ZOT_HOME", t.join("home"))
        .env("ZOT_HELLO_TIMEOUT", "60")
        .stdin(Stdio::null());
    cmd
}

fn list_json(t: &TempDir) -> Vec<Value> {
    let out = ext(t, &["list", "--json"]);
    assert_ok(&out);
    let rows: Value = serde_json::from_slice(&out.stdout).expect("list --json is JSON");
    rows.as_array().expect("an array").clone()
}

fn row<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    (rows.iter())
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name} in {rows:?}"))
}

/// The paths of a JSON array of strings.
fn paths(v: &Value) -> Vec<PathBuf> {
    let items = v.as_array().unwrap_or_else(|| panic!("not an array: {v}"));
    items
        .iter()
        .map(|p| PathBuf::from(p.as_str().expect("a path string")))
        .collect()
}

#[cfg(all(feature = "author", feature = "bundles"))]
#[test]
fn a_skill_bundle_installs_lists_its_skill_files_and_checks_without_a_process() {
    let t = TempDir::new("bundle-install");
    let out = ext(
        &t,
        &[
            "install",
            fixture_path("bundles/writing-skills").to_str().unwrap(),
        ],
    );
    assert_ok(&out);

    let rows = list_json(&t);
    let r = row(&rows, "writing-skills");
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["provides"], "2 skills", "{r}");
    let installed = t.join("home/extensions/writing-skills");
    assert_eq!(
        paths(&r["skills"]),
        [
            installed.join("skills/commit-message/SKILL.md"),
            installed.join("skills/review/checklist/SKILL.md"),
        ],
        "skills are the absolute SKILL.md paths, README.md left out"
    );
    assert_eq!(r["theme"], Value::Null);
    let table = stdout_of(&ext(&t, &["list"]));
    assert!(
        table.contains("PROVIDES") && table.contains("2 skills"),
        "{table}"
    );

    let check = ext(&t, &["check", installed.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_slice(&check.stdout).expect("check --json");
    assert_eq!(check.status.code(), Some(0), "{report}");
    let rules = report["checks"].to_string();
    assert!(rules.contains("never started"), "{report}");
    assert!(!rules.contains("\"hello\""), "a bundle was run: {report}");
}

#[cfg(feature = "bundles")]
#[test]
fn a_theme_bundle_and_an_extension_with_a_skill_through_rpc_and_the_library() {
    let t = TempDir::new("bundle-rpc");
    let (theme, notes) = (
        fixture_path("bundles/dusk-theme"),
        fixture_path("bundles/notes-with-skill"),
    );
    let mut rpc = Rpc::start(&t, &[theme.clone(), notes.clone()]);
    let list = rpc.call("1", json!({"type": "list"}));
    let exts = list["data"]["extensions"].as_array().expect("extensions");
    let theme_info = exts
        .iter()
        .find(|e| e["name"] == "dusk-theme")
        .expect("theme");
    assert_eq!(theme_info["state"], "bundle", "{theme_info}");
    assert_eq!(theme_info["pid"], Value::Null, "a bundle has no process");
    assert_eq!(
        theme_info["theme"],
        theme.join("themes/theme.json").display().to_string()
    );
    assert_eq!(theme_info["skills"], json!([]));
    let notes_info = exts
        .iter()
        .find(|e| e["name"] == "notes-with-skill")
        .expect("notes");
    assert_eq!(paths(&notes_info["skills"]), [notes.join("SKILL.md")]);
    // Its process runs as well: the command answers.
    let ran = rpc.call("2", json!({"type": "command", "name": "note", "args": "x"}));
    assert_eq!(ran["data"]["display"], "noted", "{ran}");

    let host = common::start(common::config(&t, &[theme.clone(), notes]));
    let snap = host.list().expect("list");
    let info = snap.extension("dusk-theme").expect("the bundle is listed");
    assert_eq!((&info.state, info.pid), (&ExtensionState::Bundle, None));
    assert_eq!(
        info.theme.as_deref(),
        Some(&*theme.join("themes/theme.json"))
    );
    host.shutdown();
}

#[cfg(feature = "bundles")]
#[test]
fn the_session_lists_what_a_bundle_provides() {
    let t = TempDir::new("bundle-session");
    let skills = fixture_path("bundles/writing-skills");
    let args = ["--no-ext", "-e", skills.to_str().unwrap()];
    let (code, out) = common::run_zot(&t, &args, "/ext\n/quit\n");
    assert_eq!(code, Some(0), "{out:?}");
    let line = (out.iter())
        .find(|l| l.contains("writing-skills"))
        .unwrap_or_else(|| panic!("/ext does not list the bundle: {out:?}"));
    assert!(
        line.contains("bundle") && line.contains("2 skills"),
        "{line}"
    );
}

/// Writes a bundle in `dir` whose `skills` is `skills`.
fn skills_bundle(dir: &Path, skills: Value) -> PathBuf {
    fs::create_dir_all(dir.join("skills/ok")).unwrap();
    fs::write(dir.join("skills/ok/SKILL.md"), "---\nname: ok\n---\n").unwrap();
    let manifest = json!({"name": "bad-skills", "skills": skills});
    write_manifest(dir, &manifest);
    dir.to_path_buf()
}

/// A bundle's directory name, how to make it, and what its reason names.
type EscapeCase<'a> = (&'static str, Box<dyn Fn(&Path) + 'a>, Vec<String>);

#[cfg(all(feature = "author", feature = "bundles"))]
#[test]
fn skills_outside_the_extension_directory_make_the_manifest_invalid() {
    let t = TempDir::new("bundle-escape");
    let outside = t.join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("SKILL.md"), "secret\n").unwrap();
    let project = t.join("proj/.zot/extensions");
    let outside_str = outside.display().to_string();

    // Each: the bundle's directory, what it does, and what the reason names.
    let cases: Vec<EscapeCase> = vec![
        (
            "dotdot",
            Box::new(|d| drop(skills_bundle(d, json!(["skills", "../../../outside"])))),
            vec![
                "`skills` entry \"../../../outside\"".into(),
                "contains `..`".into(),
            ],
        ),
        (
            "absolute",
            Box::new(|d| drop(skills_bundle(d, json!([outside_str.clone()])))),
            vec![
                format!("`skills` entry \"{outside_str}\""),
                "outside the extension directory".into(),
            ],
        ),
        (
            "entry-link",
            Box::new(|d| {
                skills_bundle(d, json!(["linked"]));
                symlink(&outside, d.join("linked")).unwrap();
            }),
            vec![
                "`skills` entry \"linked\"".into(),
                "outside the extension directory".into(),
            ],
        ),
        (
            "inner-link",
            Box::new(|d| {
                skills_bundle(d, json!(["skills"]));
                symlink(&outside, d.join("skills/ok/more")).unwrap();
            }),
            vec![
                "`skills` entry \"skills\"".into(),
                "skills/ok/more is a symlink out of the extension directory".into(),
            ],
        ),
    ];
    for (name, make, _) in &cases {
        make(&project.join(name));
    }
    let rows = list_json(&t);
    for (name, _, want) in &cases {
        let r = (rows.iter())
            .find(|r| r["dir"] == project.join(name).display().to_string())
            .unwrap_or_else(|| panic!("{name} not listed: {rows:?}"));
        let status = r["status"].as_str().unwrap_or_default();
        assert!(status.starts_with("invalid: "), "{name}: {status}");
        for w in want {
            assert!(
                status.contains(w.as_str()),
                "{name}: {status:?} should name {w:?}"
            );
        }
        assert_eq!(r["skills"], json!([]), "{name}: nothing of it is offered");

        let check = ext(&t, &["check", project.join(name).to_str().unwrap()]);
        assert_eq!(check.status.code(), Some(1), "{name}: check passed");
        assert!(
            stdout_of(&check).contains(&want[0]),
            "{}",
            stdout_of(&check)
        );

        // Install refuses it too, and leaves nothing behind.
        let install = ext(&t, &["install", project.join(name).to_str().unwrap()]);
        assert_fails_naming(&install, &[&want[0]]);
    }
    assert!(!t.join("home/extensions/bad-skills").exists());

    // The host reports it and starts the rest.
    let mut rpc = Rpc::start(
        &t,
        &[project.join("dotdot"), fixture_path("bundles/dusk-theme")],
    );
    let list = rpc.call("1", json!({"type": "list"}));
    let exts = list["data"]["extensions"].to_string();
    assert!(
        exts.contains("contains `..`") && exts.contains("\"bundle\""),
        "{exts}"
    );
}

#[cfg(feature = "bundles")]
#[test]
fn a_manifest_with_neither_exec_skills_nor_theme_is_invalid() {
    let t = TempDir::new("bundle-empty");
    let dir = t.join("proj/.zot/extensions/empty");
    fs::create_dir_all(dir.join("skills")).unwrap();
    fs::write(dir.join("skills/README.md"), "no skill here\n").unwrap();
    write_manifest_text(
        &dir,
        r#"{"name":"empty","version":"1.0.0","skills":["skills"]}"#,
    );
    let rows = list_json(&t);
    let status = row(&rows, "empty")["status"].as_str().unwrap().to_string();
    assert!(
        status.contains("provides nothing: no `exec` to run, no SKILL.md under `skills`")
            && status.contains("theme.json"),
        "{status}"
    );
    let install = ext(&t, &["install", dir.to_str().unwrap()]);
    assert_fails_naming(&install, &["provides nothing"]);
}

#[test]
fn xdg_state_home_is_where_zot_home_defaults_to() {
    let t = TempDir::new("xdg");
    let state = t.join("state");
    let out = zot()
        .args(["ext", "install"])
        .arg(fixture_path("examples/hello-sh"))
        .env_remove("ZOT_HOME")
        .env("XDG_STATE_HOME", &state)
        .env("HOME", t.join("home-dir"))
        .stdin(Stdio::null())
        .output()
        .expect("run zot");
    assert_ok(&out);
    assert!(
        state
            .join("zot/extensions/hello-sh/extension.json")
            .is_file(),
        "not installed under $XDG_STATE_HOME/zot: {}",
        stderr_of(&out)
    );
}

fn copy_into(from: &Path, to: &Path) {
    fs::create_dir_all(to.parent().expect("a parent")).unwrap();
    let status = Command::new("cp")
        .arg("-R")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success(), "cp -R {from:?} {to:?}");
}

fn doctor_json(t: &TempDir, args: &[&str]) -> (Option<i32>, Value) {
    let out = ext(t, &[&["doctor", "--json"], args].concat());
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {}", stdout_of(&out)));
    (out.status.code(), report)
}

fn entry<'a>(report: &'a Value, name: &str, scope: &str) -> &'a Value {
    let all = report["extensions"].as_array().expect("extensions");
    (all.iter())
        .find(|e| e["name"] == name && e["scope"] == scope)
        .unwrap_or_else(|| panic!("no {scope} {name} in {report:#}"))
}

#[cfg(all(feature = "author", feature = "bundles"))]
#[test]
fn doctor_reports_every_extension_as_the_host_started_it() {
    let t = TempDir::new("doctor");
    let (global, project) = (t.join("home/extensions"), t.join("proj/.zot/extensions"));
    copy_into(&fixture_path("examples/hello-sh"), &global.join("hello-sh"));
    copy_into(&fixture_path("doctor/crashes"), &global.join("crashes"));
    copy_into(&fixture_path("doctor/quiet"), &global.join("quiet"));
    copy_into(&fixture_path("doctor/quiet"), &project.join("quiet"));
    copy_into(
        &fixture_path("bundles/writing-skills"),
        &global.join("writing-skills"),
    );
    fs::create_dir_all(global.join("broken")).unwrap();
    fs::write(global.join("broken/extension.json"), "{\"name\": ").unwrap();
    copy_into(&fixture_path("examples/hello-py"), &global.join("off"));
    common::set_manifest_field(&global.join("off"), "enabled", json!(false));

    // The project's own copy runs, as in zot, only when trusted.
    let (code, report) = doctor_json(&t, &["--trust-project"]);
    assert_eq!(
        code,
        Some(1),
        "a failed extension makes doctor fail: {report:#}"
    );
    assert_eq!(report["ok"], false);
    let problems = report["problems"].to_string();
    assert!(
        problems.contains("crashes (failed: exited before hello (exit code 3))")
            && problems.contains("broken (invalid manifest: invalid JSON"),
        "{problems}"
    );
    assert_eq!(
        report["problems"].as_array().map(Vec::len),
        Some(2),
        "{problems}"
    );

    // Ready by its frame, with its commands and the log it writes.
    let hello = entry(&report, "hello-sh", "global");
    assert_eq!(
        (&hello["status"], &hello["ready_via"]),
        (&json!("ready"), &json!("ready"))
    );
    assert_eq!(hello["commands"], json!(["today", "whereami"]), "{hello:#}");
    let log = t.join("home/logs/ext-hello-sh.log").display().to_string();
    assert_eq!(hello["log"], log.as_str());
    // The project's quiet wins /shout over it and loses bash to the built-in.
    let quiet = entry(&report, "quiet", "project");
    assert_eq!(quiet["ready_via"], "watchdog", "{quiet:#}");
    assert_eq!(quiet["commands"], json!(["hush", "shout"]));
    let conflicts = quiet["conflicts"].as_array().unwrap();
    let has = |kind: &str, name: &str, winner: &str, loser: &str| {
        conflicts
            .iter()
            .any(|c| c == &json!({"kind": kind, "name": name, "winner": winner, "loser": loser}))
    };
    assert!(has("tool", "bash", "built-in", "quiet"), "{conflicts:?}");
    assert!(
        has("command", "shout", "quiet", "hello-sh"),
        "{conflicts:?}"
    );
    let lost = hello["conflicts"].to_string();
    assert!(
        lost.contains(r#""winner":"quiet""#),
        "hello-sh lost /shout: {lost}"
    );
    let warnings = quiet["warnings"].to_string();
    assert!(
        warnings.contains("quiet-ext"),
        "the hello name is a warning: {warnings}"
    );
    // The global quiet is shadowed by the project's and never started.
    let shadowed = entry(&report, "quiet", "global");
    assert_eq!(shadowed["status"], "shadowed");
    assert_eq!(
        shadowed["shadowed_by"],
        project.join("quiet").display().to_string().as_str()
    );
    assert_eq!(shadowed["log"], Value::Null);
    // The handshake failure comes with the extension's own last words.
    let crashes = entry(&report, "crashes", "global");
    assert_eq!(crashes["status"], "failed");
    assert!(
        crashes["stderr_tail"]
            .to_string()
            .contains("cannot find its configuration file"),
        "{crashes:#}"
    );
    assert_eq!(entry(&report, "broken", "global")["status"], "invalid");
    assert_eq!(entry(&report, "hello-py", "global")["status"], "disabled");
    let skills = entry(&report, "writing-skills", "global");
    assert_eq!(skills["status"], "bundle");
    assert_eq!(skills["skills"].as_array().map(Vec::len), Some(2));

    // The text report says the same, one extension after another.
    let out = ext(&t, &["doctor", "--trust-project"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout_of(&out);
    for want in [
        "quiet  project  ready (by the watchdog: no ready frame, 250 ms of silence)",
        "conflict  tool bash: lost to the built-in tool",
        "conflict  command /shout: won over hello-sh",
        "conflict  command /shout: lost to extension quiet (higher precedence)",
        &format!(
            "quiet  global  shadowed by {}: not started",
            project.join("quiet").display()
        ),
        "hello-py  global  disabled",
        "crashes  global  failed: exited before hello (exit code 3)",
        "stderr    crashes: cannot find its configuration file settings.toml",
        &format!("log       {log}"),
        "2 failed: ",
    ] {
        assert!(
            text.contains(want),
            "doctor's report should say {want:?}:\n{text}"
        );
    }
}

#[cfg(all(feature = "author", feature = "bundles"))]
#[test]
fn doctor_passes_when_nothing_failed_and_names_a_late_starter() {
    let t = TempDir::new("doctor-ok");
    let slow = common::ext_dir(
        &t.join("slow"),
        "slow",
        json!({"hello_delay_ms": 1500, "register": [common::command("later")]}),
    );
    let theme_dir = fixture_path("bundles/dusk-theme");
    let args = [
        "--no-ext",
        "-e",
        slow.to_str().unwrap(),
        "-e",
        theme_dir.to_str().unwrap(),
        "--startup-timeout",
        "0.2",
    ];
    let (code, report) = doctor_json(&t, &args);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["ok"], true);
    let slow = entry(&report, "slow", "explicit");
    assert_eq!(
        slow["status"], "ready",
        "doctor waits for it as the host does: {slow:#}"
    );
    assert_eq!(slow["commands"], json!(["later"]));
    let warnings = slow["warnings"].to_string();
    assert!(
        warnings.contains("still loading when the 0.2 s startup grace ended (settled after"),
        "{warnings}"
    );
    let theme = entry(&report, "dusk-theme", "explicit");
    assert_eq!(
        theme["theme"],
        fixture_path("bundles/dusk-theme")
            .join("themes/theme.json")
            .display()
            .to_string()
            .as_str()
    );

    let out = ext(&t, &[&["doctor"], &args[..]].concat());
    assert_ok(&out);
    assert!(
        stdout_of(&out).ends_with("ok: nothing failed\n"),
        "{}",
        stdout_of(&out)
    );
}

/// A project bundle `name` (untrusted: a stranger's clone) whose `skills` directory holds `count` skills
/// (`skills/sNNNN/SKILL.md`); returns its directory.
fn many_skills(t: &TempDir, name: &str, count: usize) -> PathBuf {
    let dir = t.join("proj/.zot/extensions").join(name);
    for n in 0..count {
        let skill = dir.join(format!("skills/s{n:04}"));
        fs::create_dir_all(&skill).expect("skill dir");
        fs::write(skill.join("SKILL.md"), "# a skill\n").expect("skill");
    }
    dir
}

/// `zot ext list --json` within the harness's deadline: its rows.
fn list_json_within(t: &TempDir) -> Vec<Value> {
    let out = run_fed(
        &mut ext_cmd(t, &["list", "--json"]),
        None,
        DEADLINE * 3,
        "ext list",
    );
    assert_ok(&out);
    let rows: Value = serde_json::from_slice(&out.stdout).expect("list --json is JSON");
    rows.as_array().expect("an array").clone()
}

#[cfg(feature = "bundles")]
#[test]
fn a_skills_directory_listed_thousands_of_times_is_scanned_once() {
    let t = TempDir::new("bundle-dup");
    let dir = many_skills(&t, "dup", 1000);
    // 4,000 spellings of the same directory, and of a skill inside it.
    let spellings = ["skills", "./skills", "skills/", "./skills/."];
    let mut skills: Vec<String> = (0..4000).map(|n| spellings[n % 4].to_string()).collect();
    skills.push("skills/s0007/SKILL.md".into());
    skills.push("skills/s0007".into());
    write_manifest(&dir, &json!({"name": "dup", "skills": skills}));
    let rows = list_json_within(&t);
    let r = row(&rows, "dup");
    assert_eq!(r["status"], "untrusted", "{}", r["status"]);
    assert_eq!(r["provides"], "1000 skills", "{}", r["provides"]);
    let listed = paths(&r["skills"]);
    let mut once = listed.clone();
    once.dedup();
    assert_eq!(listed.len(), 1000);
    assert_eq!(once, listed, "a skill listed twice");
}

#[cfg(feature = "bundles")]
#[test]
fn a_skills_scan_past_its_bound_skips_the_rest_and_says_so() {
    let t = TempDir::new("bundle-bound");
    // More skill files than one manifest may provide.
    let many = many_skills(&t, "many", 1200);
    write_manifest(&many, &json!({"name": "many", "skills": ["skills"]}));
    // More entries than a scan looks at, after a few skills.
    let wide = many_skills(&t, "wide", 3);
    fs::create_dir_all(wide.join("junk")).expect("junk");
    for n in 0..10_001 {
        fs::write(wide.join(format!("junk/f{n}")), "").expect("junk file");
    }
    write_manifest(
        &wide,
        &json!({"name": "wide", "skills": ["skills", "junk"]}),
    );
    let rows = list_json_within(&t);
    let note = "the rest skipped (at most 1000 skills and 10000 entries looked at)";
    let r = row(&rows, "many");
    assert_eq!(r["status"], "untrusted", "{}", r["status"]);
    assert_eq!(r["provides"], format!("1000 skills, {note}"));
    assert_eq!(paths(&r["skills"]).len(), 1000);
    let r = row(&rows, "wide");
    assert_eq!(r["status"], "untrusted", "{}", r["status"]);
    assert_eq!(r["provides"], format!("3 skills, {note}"));
    // The human list says it too.
    let out = ext(&t, &["list"]);
    assert_ok(&out);
    assert!(stdout_of(&out).contains(note), "{}", stdout_of(&out));
}
