//! Files a user (or an attacker) puts in front of `zot`: manifests that
//! are not plain files, manifests symlinked out of their directory,
//! scratch directories left by a killed install, identity options, bare
//! git repositories, and the README's own examples. Everything through
//! the real binary.

mod common;

use common::{
    assert_fails_naming, assert_ok, git, manifest_text, mkfifo, run_bounded, status_of, stderr_of,
    Project, Rpc, DEADLINE, MEMORY_LIMIT_KB, STARTUP,
};
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Project extensions that must not be read: `evil` (a symlink to
/// /dev/zero), `fifo` (a FIFO), `big` (over 1 MiB); and `bom`, a good
/// one whose manifest starts with a UTF-8 byte order mark.
fn hostile_project(w: &Project) {
    let evil = w.project_ext("evil");
    fs::create_dir_all(&evil).expect("evil dir");
    std::os::unix::fs::symlink("/dev/zero", evil.join("extension.json")).expect("symlink");
    let fifo = w.project_ext("fifo");
    fs::create_dir_all(&fifo).expect("fifo dir");
    mkfifo(&fifo.join("extension.json"));
    let big = w.project_ext("big");
    fs::create_dir_all(&big).expect("big dir");
    let padded = format!(
        "{}{}",
        manifest_text("big"),
        " ".repeat(2 << 20) // valid JSON, just too large
    );
    fs::write(big.join("extension.json"), padded).expect("big manifest");
    let bom = w.project_ext("bom");
    fs::create_dir_all(&bom).expect("bom dir");
    let with_bom = format!("\u{feff}{}", manifest_text("bom"));
    fs::write(bom.join("extension.json"), with_bom).expect("bom manifest");
}

#[test]
fn ext_list_refuses_manifests_that_are_not_small_regular_files() {
    let w = Project::new("list-hostile");
    hostile_project(&w);
    // Trusting every project extension reads the same hostile files: it
    // skips the invalid ones and trusts the rest, without hanging.
    let trusted = w.zot(&["ext", "trust", "--yes"]);
    assert_ok(&trusted);
    assert!(
        stderr_of(&trusted).contains("skipped (invalid manifest)"),
        "{trusted:?}"
    );
    let statuses = w.statuses();
    let evil = status_of(&statuses, "evil");
    assert!(
        evil.starts_with("invalid: ") && evil.contains("not a regular file (a device)"),
        "{evil}"
    );
    let fifo = status_of(&statuses, "fifo");
    assert!(fifo.contains("not a regular file (a FIFO)"), "{fifo}");
    let big = status_of(&statuses, "big");
    assert!(big.contains("larger than 1048576 bytes"), "{big}");
    assert_eq!(status_of(&statuses, "bom"), "ok");
    // The text listing names the file too.
    let out = w.zot(&["ext", "list"]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("not a regular file"), "{text}");
}

#[test]
fn rpc_list_reports_hostile_manifests_and_starts_the_rest() {
    let w = Project::new("rpc-hostile");
    hostile_project(&w);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -d {MEMORY_LIMIT_KB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_zot"))
        .args(["rpc", "--trust-project"])
        .current_dir(w.proj())
        .env("ZOT_HOME", w.home())
        .env("ZOT_STARTUP_TIMEOUT", STARTUP);
    let mut rpc = Rpc::spawn(&mut cmd);
    let ready = rpc.until("ready event", |v| v["type"] == "ready");
    assert_eq!(ready["extensions"], json!(["bom"]), "{ready}");
    let list = rpc.call("1", json!({"type": "list"}));
    assert_eq!(list["success"], true, "{list}");
    let exts = list["data"]["extensions"].as_array().expect("extensions");
    let find = |name: &str| {
        exts.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from list: {list}"))
    };
    for (name, why) in [
        ("evil", "not a regular file (a device)"),
        ("fifo", "not a regular file (a FIFO)"),
        ("big", "larger than 1048576 bytes"),
    ] {
        let e = find(name);
        assert_eq!(e["state"], "failed", "{e}");
        let error = e["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(why) && error.contains("extension.json"),
            "{name}: {e}"
        );
    }
    assert_eq!(find("bom")["state"], "ready", "{list}");
    // SIGTERM still works: the host was never stuck in discovery.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(rpc.child.id().to_string())
        .status();
    assert_eq!(rpc.wait(), Some(0), "zot rpc should stop on SIGTERM");
}

#[test]
fn ext_install_refuses_a_manifest_that_is_not_a_small_regular_file() {
    let w = Project::new("install-hostile");
    let src = w.tmp.join("src-zero");
    fs::create_dir_all(&src).expect("src");
    std::os::unix::fs::symlink("/dev/zero", src.join("extension.json")).expect("symlink");
    let out = w.zot(&["ext", "install", src.to_str().expect("utf-8 path")]);
    assert_fails_naming(
        &out,
        &[
            "extension.json",
            "not a regular file",
            "nothing was installed",
        ],
    );

    let big = w.tmp.join("src-big");
    fs::create_dir_all(&big).expect("src");
    fs::write(big.join("extension.json"), " ".repeat(2 << 20)).expect("big");
    let out = w.zot(&["ext", "install", big.to_str().expect("utf-8 path")]);
    assert_fails_naming(&out, &["extension.json", "larger than 1048576 bytes"]);

    let fifo = w.tmp.join("src-fifo");
    fs::create_dir_all(&fifo).expect("src");
    mkfifo(&fifo.join("extension.json"));
    let out = w.zot(&["ext", "install", fifo.to_str().expect("utf-8 path")]);
    assert_fails_naming(&out, &["extension.json", "nothing was installed"]);
    assert!(w.installed().is_empty(), "left behind: {:?}", w.installed());

    let bom = w.tmp.join("src-bom");
    fs::create_dir_all(&bom).expect("src");
    let text = format!("\u{feff}{}", manifest_text("bommed"));
    fs::write(bom.join("extension.json"), text).expect("bom manifest");
    assert_ok(&w.zot(&["ext", "install", bom.to_str().expect("utf-8 path")]));
    assert_eq!(w.installed(), ["bommed"]);
    // And disable keeps the mark while editing the field.
    assert_ok(&w.zot(&["ext", "disable", "bommed"]));
    let edited = fs::read(w.global_ext("bommed").join("extension.json")).expect("manifest");
    assert!(
        edited.starts_with(b"\xEF\xBB\xBF"),
        "byte order mark dropped"
    );
    let statuses = w.statuses();
    assert_eq!(status_of(&statuses, "bommed"), "disabled");
}

#[test]
fn disable_never_writes_through_a_symlink_out_of_the_extension() {
    let w = Project::new("symlink-write");
    let outside = w.tmp.join("precious.json");
    fs::write(&outside, manifest_text("linky")).expect("outside file");
    let before = fs::read(&outside).expect("read");
    let inode = fs::metadata(&outside).expect("stat").ino();
    let dir = w.global_ext("linky");
    fs::create_dir_all(&dir).expect("dir");
    std::os::unix::fs::symlink(&outside, dir.join("extension.json")).expect("symlink");

    let out = w.zot(&["ext", "disable", "linky"]);
    assert_fails_naming(
        &out,
        &[
            "refusing to edit",
            "outside the extension directory",
            "precious.json",
        ],
    );
    assert_eq!(
        fs::read(&outside).expect("read"),
        before,
        "outside file changed"
    );
    assert_eq!(
        fs::metadata(&outside).expect("stat").ino(),
        inode,
        "replaced"
    );
    let leftovers: Vec<_> = fs::read_dir(w.tmp.path())
        .expect("read tmp")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary files outside: {leftovers:?}"
    );

    // A symlink that stays inside the directory is edited where it points.
    let inside = w.global_ext("inside");
    fs::create_dir_all(inside.join("conf")).expect("dir");
    fs::write(inside.join("conf/real.json"), manifest_text("inside")).expect("real");
    std::os::unix::fs::symlink("conf/real.json", inside.join("extension.json")).expect("link");
    assert_ok(&w.zot(&["ext", "disable", "inside"]));
    let real: Value =
        serde_json::from_slice(&fs::read(inside.join("conf/real.json")).expect("read"))
            .expect("json");
    assert_eq!(real["enabled"], false);
    assert!(fs::symlink_metadata(inside.join("extension.json"))
        .expect("stat")
        .file_type()
        .is_symlink());
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait for true");
    pid
}

#[test]
fn stale_scratch_directories_of_dead_processes_are_cleaned_up() {
    let w = Project::new("scratch");
    let root = w.home().join("extensions");
    let dead = dead_pid();
    let mut live = Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let scratch = |name: String| {
        let dir = root.join(name);
        fs::create_dir_all(dir.join("sub")).expect("scratch dir");
        fs::write(dir.join("sub/blob"), "half a copy").expect("scratch file");
    };
    scratch(format!(".install-{dead}-0"));
    scratch(format!(".remove-{dead}-3"));
    scratch(format!(".install-{}-0", live.id())); // a running install
    scratch(".cache".into()); // not ours
                              // `install --force` killed after moving the old copy aside: it comes back.
    let old = root.join(format!(".old-{dead}-0-weather"));
    fs::create_dir_all(&old).expect("old dir");
    fs::write(old.join("extension.json"), manifest_text("weather")).expect("old manifest");
    // Killed after the new copy went in: the old one is just deleted.
    fs::create_dir_all(w.global_ext("sun")).expect("sun");
    fs::write(
        w.global_ext("sun").join("extension.json"),
        manifest_text("sun"),
    )
    .expect("sun manifest");
    scratch(format!(".old-{dead}-1-sun"));

    let out = w.zot(&["ext", "list"]);
    assert_ok(&out);
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!(".install-{dead}-0"))
            && err.contains(&format!("left by process {dead}, which no longer runs")),
        "the cleanup should be reported: {err}"
    );
    let mut want = vec![
        ".cache".to_string(),
        format!(".install-{}-0", live.id()),
        "sun".into(),
        "weather".into(),
    ];
    want.sort();
    assert_eq!(w.installed(), want);
    assert!(w.global_ext("sun").join("extension.json").is_file());
    let statuses = w.statuses();
    assert_eq!(status_of(&statuses, "weather"), "ok");
    let _ = live.kill();
    let _ = live.wait();
}

#[test]
fn install_from_a_local_bare_repository_clones_it() {
    let w = Project::new("bare");
    let work = w.tmp.join("work");
    fs::create_dir_all(&work).expect("work dir");
    fs::write(work.join("extension.json"), manifest_text("weather")).expect("manifest");
    fs::write(work.join("README"), "a weather extension\n").expect("readme");
    git(&work, &["init", "-q"]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "init"]);
    let repos = w.tmp.join("repos");
    fs::create_dir_all(&repos).expect("repos dir");
    git(&repos, &["clone", "-q", "--bare", "../work", "weather.git"]);

    // As a user types it: a path (here relative) to the bare repository.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zot"));
    cmd.args(["ext", "install", "weather.git"])
        .current_dir(&repos)
        .env("ZOT_HOME", w.home());
    let out = run_bounded(&mut cmd, "ext install weather.git");
    assert_ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("installed weather 1.0.0"), "{said}");
    assert_eq!(w.installed(), ["weather"]);
    let dest = w.global_ext("weather");
    assert_eq!(
        fs::read_to_string(dest.join("README")).expect("cloned file"),
        "a weather extension\n"
    );
    assert!(dest.join(".git").is_dir(), "a clone keeps its .git");
    let statuses = w.statuses();
    assert_eq!(status_of(&statuses, "weather"), "ok");

    // A bare repository without a manifest leaves nothing behind.
    let empty = w.tmp.join("empty");
    fs::create_dir_all(&empty).expect("empty dir");
    fs::write(empty.join("README"), "no manifest\n").expect("readme");
    git(&empty, &["init", "-q"]);
    git(&empty, &["add", "-A"]);
    git(&empty, &["commit", "-q", "-m", "init"]);
    git(&repos, &["clone", "-q", "--bare", "../empty", "empty.git"]);
    let bare = repos.join("empty.git");
    let out = w.zot(&["ext", "install", bare.to_str().expect("utf-8 path")]);
    assert_fails_naming(
        &out,
        &["extension.json at the top of", "nothing was installed"],
    );
    assert_eq!(w.installed(), ["weather"]);
}

fn identity_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/identity")
}

/// `hello_ack` as the echo extension reports it through `zot rpc`
/// started with `args` (options before and after `rpc`).
fn ack_over_rpc(w: &Project, before: &[&str], after: &[&str]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zot"));
    cmd.args(before)
        .arg("rpc")
        .args(after)
        .args(["--no-ext", "-e"])
        .arg(identity_fixture())
        .current_dir(w.proj())
        .env("ZOT_HOME", w.home());
    let mut rpc = Rpc::spawn(&mut cmd);
    let reply = rpc.call("1", json!({"type": "command", "name": "ack"}));
    assert_eq!(reply["success"], true, "{reply}");
    let display = reply["data"]["display"].as_str().expect("display");
    let note = rpc.until("the note", |v| v["type"] == "notify");
    assert_eq!(
        note["message"].as_str(),
        Some(display),
        "note and display agree"
    );
    let ack = serde_json::from_str(display).expect("the ack as JSON");
    rpc.close_stdin();
    assert_eq!(rpc.wait(), Some(0), "zot rpc should end at EOF");
    ack
}

#[test]
fn provider_and_model_reach_hello_ack() {
    let w = Project::new("identity");
    let ack = ack_over_rpc(&w, &[], &["--provider", "anthropic", "--model", "claude-x"]);
    assert_eq!(ack, json!({"provider": "anthropic", "model": "claude-x"}));
    // Before `rpc` too, as every shared option.
    let ack = ack_over_rpc(&w, &["--model", "m2", "--provider", "p2"], &[]);
    assert_eq!(ack, json!({"provider": "p2", "model": "m2"}));
    // Not given: empty strings, as upstream sends.
    let ack = ack_over_rpc(&w, &[], &[]);
    assert_eq!(ack, json!({"provider": "", "model": ""}));

    // The interactive session.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("printf '/ack\\n' | \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_zot"))
        .args(["--no-ext", "--provider", "openai", "--model", "gpt-y", "-e"])
        .arg(identity_fixture())
        .current_dir(w.proj())
        .env("ZOT_HOME", w.home());
    let out = run_bounded(&mut cmd, "--provider openai --model gpt-y");
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r#"[/ack] {"model": "gpt-y", "provider": "openai"}"#),
        "{text}"
    );
    // A missing value is a usage error.
    let out = w.zot(&["rpc", "--model"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
}

#[test]
fn help_names_the_session_commands_zot_home_and_the_logs() {
    let w = Project::new("help");
    let out = w.zot(&["--help"]);
    assert_ok(&out);
    let help = String::from_utf8_lossy(&out.stdout);
    for want in [
        "/help",
        "/call TOOL [JSON]",
        "/key [EXT PANEL] KEY [TEXT]",
        "/key esc closes",
        "/reload-ext",
        "/quit",
        "$ZOT_HOME/extensions",
        "$ZOT_HOME/logs/ext-NAME.log",
        "ZOT_HOME defaults to",
        "--provider NAME",
        "--model NAME",
    ] {
        assert!(
            help.contains(want),
            "zot --help should mention {want:?}:\n{help}"
        );
    }
    let rpc = w.zot(&["rpc", "--help"]);
    let rpc = String::from_utf8_lossy(&rpc.stdout);
    assert!(rpc.contains("[--provider NAME] [--model NAME]"), "{rpc}");
}

#[test]
fn make_demo_runs_the_binary_cargo_built_wherever_that_is() {
    let w = Project::new("make-demo");
    // A stand-in for cargo: `run ... -- ARGS` runs this build's zot with
    // ARGS and leaves a mark; anything else (a build) does nothing.
    let mark = w.tmp.join("ran");
    let fake = w.tmp.join("fake-cargo");
    fs::write(
        &fake,
        format!(
            "#!/bin/sh\n[ \"$1\" = run ] || exit 0\nwhile [ \"$1\" != -- ]; do shift; done\nshift\n\
             : > '{}'\nexec '{}' \"$@\"\n",
            mark.display(),
            env!("CARGO_BIN_EXE_zot")
        ),
    )
    .expect("fake cargo");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(&fake)
        .status()
        .expect("chmod");
    assert!(status.success());
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("printf '/hello Ada\\n' | make -s demo CARGO=\"$0\"")
        .arg(&fake)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", w.tmp.join("elsewhere"))
        .env("ZOT_HOME", w.home())
        .env("ZOT_STARTUP_TIMEOUT", STARTUP);
    let out = run_bounded(&mut cmd, "make demo");
    assert_ok(&out);
    assert!(
        mark.exists(),
        "make demo did not run the binary through cargo"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ready: hello-py, hello-sh, weather, guard")
            && text.contains("[/hello] Hello, Ada!"),
        "{text}"
    );
}

/// The `nth` fenced block after the first line of README.md containing
/// `marker`, without its fences.
fn readme_block(marker: &str, nth: usize) -> String {
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read README.md");
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README.md no longer contains {marker:?}"));
    let mut blocks = Vec::new();
    let mut body: Option<String> = None;
    for line in readme[at..].lines() {
        match (&mut body, line.trim_start().starts_with("```")) {
            (None, true) => body = Some(String::new()),
            (Some(_), true) => blocks.extend(body.take()),
            (Some(text), false) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, false) => {}
        }
        if blocks.len() > nth {
            break;
        }
    }
    blocks
        .into_iter()
        .nth(nth)
        .unwrap_or_else(|| panic!("no block {nth} after {marker:?} in README.md"))
}

/// Runs README shell text in the repository's root, as a user who did
/// `cargo install --path .` would: with this build's `zot` on the PATH.
fn run_readme_shell(w: &Project, script: &str) -> Output {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_zot"))
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATH", path)
        .env("ZOT_HOME", w.home())
        .env("ZOT_STARTUP_TIMEOUT", STARTUP);
    run_bounded(&mut cmd, script)
}

#[test]
fn readme_examples_run_as_written() {
    let w = Project::new("readme");
    // The zot rpc example: same lines (concurrent answers may swap),
    // `ready` first and the shutdown response last.
    let script = readme_block("An example that runs as written", 0);
    let shown = readme_block("An example that runs as written", 1);
    let out = run_readme_shell(&w, &script);
    assert_ok(&out);
    let parse = |text: &str| -> Vec<Value> {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let (got, want) = (parse(&String::from_utf8_lossy(&out.stdout)), parse(&shown));
    assert_eq!(got.first(), want.first(), "ready first: {got:#?}");
    assert_eq!(got.last(), want.last(), "shutdown last: {got:#?}");
    let sorted = |v: &[Value]| {
        let mut s: Vec<String> = v.iter().map(Value::to_string).collect();
        s.sort();
        s
    };
    assert_eq!(sorted(&got), sorted(&want), "README's rpc output");

    // The panel example, exactly.
    let console = readme_block("**Panels**, as in upstream", 0);
    let (command, shown) = console
        .strip_prefix("$ ")
        .and_then(|c| c.split_once('\n'))
        .expect("a `$ command` line");
    let out = run_readme_shell(&w, command);
    assert_ok(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), shown);
}

#[test]
fn an_install_killed_mid_copy_is_cleaned_up_by_the_next_command() {
    let w = Project::new("killed-install");
    let root = w.home().join("extensions");
    let scratch = || {
        fs::read_dir(&root)
            .expect("read extensions dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with(".install-"))
    };
    // Big enough that the copy is still running when we look; more
    // files on each try if a fast machine finished it anyway.
    for files in [4_000, 20_000, 60_000] {
        let src = w.tmp.join(&format!("big-{files}"));
        fs::create_dir_all(src.join("data")).expect("src");
        fs::write(src.join("extension.json"), manifest_text("big")).expect("manifest");
        for i in 0..files {
            fs::write(src.join("data").join(i.to_string()), "x").expect("file");
        }
        let mut install = Command::new(env!("CARGO_BIN_EXE_zot"))
            .args(["ext", "install", "--force"])
            .arg(&src)
            .env("ZOT_HOME", w.home())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn zot ext install");
        let end = std::time::Instant::now() + DEADLINE;
        let seen = loop {
            if scratch().is_some() {
                break true;
            }
            if install.try_wait().expect("try_wait").is_some() {
                break false;
            }
            assert!(
                std::time::Instant::now() < end,
                "no scratch directory appeared"
            );
            std::thread::yield_now();
        };
        let _ = install.kill(); // SIGKILL: no handler runs
        let status = install.wait().expect("wait");
        if !seen || status.success() {
            continue; // the copy won the race; try a bigger tree
        }
        let left = scratch().expect("the killed install leaves its scratch directory");
        let out = w.zot(&["ext", "list"]);
        assert_ok(&out);
        assert!(
            stderr_of(&out).contains(&format!("removed stale {}", root.join(&left).display())),
            "{}",
            stderr_of(&out)
        );
        assert_eq!(scratch(), None, "scratch directory still there");
        return;
    }
    panic!("every install finished before it could be killed");
}

#[test]
fn the_readme_embedding_example_is_the_crate_doctest() {
    let lib = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("read src/lib.rs");
    let doc: Vec<&str> = (lib.lines())
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let open = doc
        .iter()
        .position(|l| *l == "```")
        .expect("a doctest in src/lib.rs");
    let close = open
        + 1
        + doc[open + 1..]
            .iter()
            .position(|l| *l == "```")
            .expect("its end");
    let doctest: String = doc[open + 1..close]
        .iter()
        .filter(|l| !l.starts_with("# "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(readme_block("## Embedding the host", 0), doctest);
}
