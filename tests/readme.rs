//! README.md's own examples, run as written: `make demo`, the `zot rpc`
//! and panel examples (with this build's `zot` on the PATH), and the
//! embedding example, which must be the crate's doctest.

mod common;

use common::{assert_ok, repo_path, run_bounded, Project, STARTUP};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

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
    let readme = fs::read_to_string(repo_path("README.md")).expect("read README.md");
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

    // The panel example, exactly (a build with panels).
    #[cfg(feature = "panels")]
    {
        let console = readme_block("**Panels**, as in upstream", 0);
        let (command, shown) = console
            .strip_prefix("$ ")
            .and_then(|c| c.split_once('\n'))
            .expect("a `$ command` line");
        let out = run_readme_shell(&w, command);
        assert_ok(&out);
        assert_eq!(String::from_utf8_lossy(&out.stdout), shown);
    }
}

#[test]
fn the_readme_embedding_example_is_the_crate_doctest() {
    let lib = fs::read_to_string(repo_path("src/lib.rs")).expect("read src/lib.rs");
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
