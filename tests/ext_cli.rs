//! `zot ext ...` driven through the real binary, with a temporary
//! `$ZOT_HOME` and a temporary project directory as the working directory.

mod common;

use common::{
    append, assert_fails_naming, assert_ok, git, git_repo, installed, list_rows, manifest_text,
    poll_every, run_bounded, status_of, stderr_of, stdout_of, write_manifest_text, Project,
    TempDir, DEADLINE,
};
use serde_json::Value;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A scratch world: `root/home` is `$ZOT_HOME`, `root/proj` the project.
struct World {
    root: TempDir,
    home: PathBuf,
    proj: PathBuf,
}

impl World {
    fn new(test: &str) -> World {
        let root = TempDir::new(&format!("ext-cli-{test}"));
        let (home, proj) = (root.join("home"), root.join("proj"));
        fs::create_dir_all(&home).unwrap();
        fs::create_dir_all(&proj).unwrap();
        World { root, home, proj }
    }

    fn global(&self) -> PathBuf {
        self.home.join("extensions")
    }

    fn project(&self) -> PathBuf {
        self.proj.join(".zot/extensions")
    }

    fn command(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_zot"));
        cmd.arg("ext")
            .args(args)
            .current_dir(cwd)
            .env("ZOT_HOME", &self.home)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `zot ext <args>` in the project directory.
    fn zot(&self, args: &[&str]) -> Output {
        self.zot_in(&self.proj, args)
    }

    fn zot_in(&self, cwd: &Path, args: &[&str]) -> Output {
        self.command(cwd, args).output().expect("run zot")
    }

    /// Entries of `$ZOT_HOME/extensions`, sorted (hidden ones included).
    fn installed(&self) -> Vec<String> {
        installed(&self.home)
    }

    fn list_json(&self) -> Vec<Value> {
        list_rows(&self.zot(&["list", "--json"]))
    }
}

/// An extension directory: manifest, an executable script, a symlink.
fn make_ext(dir: &Path, name: &str) {
    fs::create_dir_all(dir).unwrap();
    let manifest =
        format!(r#"{{"name":"{name}","version":"1.0.0","exec":"./run.sh","language":"sh"}}"#);
    write_manifest_text(dir, &manifest);
    fs::write(dir.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(dir.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("run.sh", dir.join("start")).unwrap();
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Exit status 1 and a `zot: ` message mentioning `want`.
fn assert_fails(out: &Output, want: &str) {
    assert_fails_naming(out, &[want]);
    assert!(stderr_of(out).starts_with("zot: "), "{}", stderr_of(out));
}

#[test]
fn install_from_dot_uses_the_manifest_name() {
    let w = World::new("dot");
    let src = w.root.join("some-checkout");
    make_ext(&src, "hello");
    let out = w.zot_in(&src, &["install", "."]);
    assert_ok(&out);
    assert!(
        stdout_of(&out).contains("installed hello 1.0.0"),
        "{}",
        stdout_of(&out)
    );
    assert_eq!(w.installed(), ["hello"]);
    let dest = w.global().join("hello");
    assert_eq!(
        fs::read_to_string(dest.join("run.sh")).unwrap(),
        "#!/bin/sh\necho hi\n"
    );
    assert_eq!(mode(&dest.join("run.sh")), 0o755);
}

#[test]
fn install_from_a_path_with_another_directory_name() {
    let w = World::new("path");
    let src = w.root.join("zot-weather-v2");
    make_ext(&src, "weather");
    assert_ok(&w.zot(&["install", src.to_str().unwrap()]));
    assert_eq!(w.installed(), ["weather"]);
    let rows = w.list_json();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["name"], "weather");
    assert_eq!(rows[0]["status"], "ok");
}

#[test]
fn install_keeps_modes_and_symlinks_without_following_them_out() {
    let w = World::new("modes");
    let src = w.root.join("src");
    make_ext(&src, "m");
    fs::write(src.join("secret"), "s").unwrap();
    fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(src.join("bin")).unwrap();
    fs::write(src.join("bin/tool"), "t").unwrap();
    fs::set_permissions(src.join("bin/tool"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::set_permissions(src.join("bin"), fs::Permissions::from_mode(0o700)).unwrap();
    let outside = w.root.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("big"), "not part of the extension").unwrap();
    std::os::unix::fs::symlink(&outside, src.join("out")).unwrap();
    std::os::unix::fs::symlink("bin/tool", src.join("tool")).unwrap();

    assert_ok(&w.zot(&["install", src.to_str().unwrap()]));
    let dest = w.global().join("m");
    assert_eq!(mode(&dest.join("run.sh")), 0o755);
    assert_eq!(mode(&dest.join("secret")), 0o600);
    assert_eq!(mode(&dest.join("bin")), 0o700);
    assert_eq!(mode(&dest.join("bin/tool")), 0o750);
    let links = [
        ("start", Path::new("run.sh")),
        ("tool", Path::new("bin/tool")),
        ("out", &outside),
    ];
    for (link, target) in links {
        let meta = fs::symlink_metadata(dest.join(link)).unwrap();
        assert!(
            meta.file_type().is_symlink(),
            "{link} should stay a symlink"
        );
        assert_eq!(fs::read_link(dest.join(link)).unwrap(), target);
    }
}

#[test]
fn install_over_an_existing_one_needs_force() {
    let w = World::new("force");
    let v1 = w.root.join("v1");
    make_ext(&v1, "x");
    assert_ok(&w.zot(&["install", v1.to_str().unwrap()]));
    let v2 = w.root.join("v2");
    make_ext(&v2, "x");
    fs::write(v2.join("NEW"), "2").unwrap();

    let out = w.zot(&["install", v2.to_str().unwrap()]);
    assert_fails(&out, "--force");
    assert!(stderr_of(&out).contains(&w.global().join("x").display().to_string()));
    assert!(
        !w.global().join("x/NEW").exists(),
        "the old copy must be untouched"
    );
    assert_eq!(w.installed(), ["x"]);

    let out = w.zot(&["install", "--force", v2.to_str().unwrap()]);
    assert_ok(&out);
    assert!(
        stdout_of(&out).contains("replaced x"),
        "{}",
        stdout_of(&out)
    );
    assert!(w.global().join("x/NEW").exists());
    assert_eq!(w.installed(), ["x"], "no scratch or old copies left");
}

#[test]
fn install_from_a_file_git_url() {
    let w = World::new("git");
    let url = git_repo(&w.root.join("repo-dir"), |d| make_ext(d, "gitext"));
    let out = w.zot(&["install", &url]);
    assert_ok(&out);
    assert_eq!(w.installed(), ["gitext"]);
    let dest = w.global().join("gitext");
    assert_eq!(mode(&dest.join("run.sh")), 0o755);
    assert!(fs::symlink_metadata(dest.join("start"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        dest.join(".git").is_dir(),
        "git installs keep their shallow .git"
    );
}

#[test]
fn a_git_install_runs_no_hook_from_the_users_template_or_hooks_path() {
    let w = World::new("git-hooks");
    let url = git_repo(&w.root.join("repo-dir"), |d| make_ext(d, "hooked"));
    // A post-checkout hook that would run in the unvalidated checkout.
    let hook_in = |dir: &Path, marker: &Path| {
        fs::create_dir_all(dir).unwrap();
        let hook = dir.join("post-checkout");
        let script = format!("#!/bin/sh\necho ran > '{}'\n", marker.display());
        fs::write(&hook, script).unwrap();
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    };
    // The hook in DIR/hooks: DIR as the template, DIR/hooks as the hooks path.
    let settings = [
        ("template", "[init]\n\ttemplateDir = {}\n"),
        ("hooks-path", "[core]\n\thooksPath = {}/hooks\n"),
    ];
    for (tag, config) in settings {
        let marker = w.root.join(&format!("{tag}-hook-ran"));
        let dir = w.root.join(tag);
        hook_in(&dir.join("hooks"), &marker);
        let global = w.root.join(&format!("{tag}.gitconfig"));
        fs::write(&global, config.replace("{}", &dir.to_string_lossy())).unwrap();
        let out = w
            .command(&w.proj, &["install", "--force", &url])
            .env("GIT_CONFIG_GLOBAL", &global)
            .output()
            .expect("run zot");
        assert_ok(&out);
        assert_eq!(w.installed(), ["hooked"]);
        assert!(!marker.exists(), "{tag}: the user's post-checkout hook ran");
        let hooks = w.global().join("hooked/.git/hooks");
        assert!(
            !hooks.join("post-checkout").exists(),
            "{tag}: a hook was copied in"
        );
    }
}

#[test]
fn git_repository_without_a_manifest_leaves_nothing_behind() {
    let w = World::new("git-nomanifest");
    let url = git_repo(&w.root.join("repo"), |d| {
        fs::write(d.join("README"), "no manifest").unwrap()
    });
    let out = w.zot(&["install", &url]);
    assert_fails(&out, "extension.json");
    assert!(
        stderr_of(&out).contains("nothing was installed"),
        "{}",
        stderr_of(&out)
    );
    assert!(w.installed().is_empty(), "left behind: {:?}", w.installed());
}

#[test]
fn local_directory_with_a_broken_manifest_leaves_nothing_behind() {
    let w = World::new("broken-src");
    let src = w.root.join("src");
    write_manifest_text(&src, r#"{"name":"no exec"}"#);
    let out = w.zot(&["install", src.to_str().unwrap()]);
    assert_fails(&out, &src.join("extension.json").display().to_string());
    assert!(w.installed().is_empty(), "left behind: {:?}", w.installed());
}

#[test]
fn other_git_transports_are_refused_without_running_anything() {
    let w = World::new("ext-transport");
    let marker = w.root.join("marker");
    let evil = format!("ext::sh -c \"touch {}\"", marker.display());
    let other = [
        "fd::3",
        "git://example.invalid/x.git",
        "http://example.invalid/x.git",
    ];
    for url in std::iter::once(evil.as_str()).chain(other) {
        let out = w.zot(&["install", url]);
        assert_fails(&out, "not allowed");
    }
    assert!(!marker.exists(), "the ext:: command ran");
    assert!(w.installed().is_empty(), "left behind: {:?}", w.installed());
}

#[test]
fn list_shows_invalid_disabled_and_shadowed_extensions() {
    let w = World::new("list");
    let g = w.global();
    write_manifest_text(
        &g.join("a"),
        r#"{"name":"a","exec":"./a","version":"1","description":"global a"}"#,
    );
    write_manifest_text(&g.join("b"), r#"{"name":"b","exec":"./b","enabled":false}"#);
    write_manifest_text(&g.join("broken"), "{ not json");
    write_manifest_text(&g.join("noexec"), r#"{"name":"noexec","version":"0.1"}"#);
    write_manifest_text(
        &w.project().join("a"),
        r#"{"name":"a","exec":"./a","language":"go"}"#,
    );
    // The project's own copy runs (and lists as ok) once trusted.
    assert_ok(&w.zot(&["trust", "--yes", "a"]));

    let rows = w.list_json();
    let field = |i: usize, k: &str| rows[i][k].as_str().unwrap_or("").to_string();
    let summary: Vec<[String; 3]> = (0..rows.len())
        .map(|i| [field(i, "scope"), field(i, "name"), field(i, "status")])
        .collect();
    assert_eq!(rows.len(), 5, "{summary:?}");
    assert_eq!(summary[0], ["project", "a", "ok"]);
    assert_eq!(summary[1], ["global", "a", "shadowed"]);
    assert_eq!(summary[2], ["global", "b", "disabled"]);
    assert_eq!(summary[3][..2], ["global", "broken"]);
    assert!(
        summary[3][2].starts_with("invalid: invalid JSON"),
        "{summary:?}"
    );
    assert_eq!(summary[4][1], "noexec");
    assert!(
        summary[4][2].starts_with("invalid: ") && summary[4][2].contains("`exec`"),
        "{summary:?}"
    );

    let keys: Vec<&str> = rows[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = vec![
        "scope",
        "name",
        "version",
        "enabled",
        "language",
        "description",
        "protocol",
        "prefix",
        "provides",
    ];
    // Only a build with bundles hands over skill and theme files.
    if cfg!(feature = "bundles") {
        want.extend(["skills", "theme"]);
    }
    want.extend(["dir", "status"]);
    assert_eq!(keys, want);
    assert_eq!(rows[0]["language"], "go");
    assert_eq!(rows[0]["provides"], "process");
    assert_eq!(rows[0]["version"], Value::Null);
    assert_eq!(rows[0]["dir"], w.project().join("a").display().to_string());
    assert_eq!(rows[1]["description"], "global a");
    assert_eq!(rows[2]["enabled"], false);
    assert_eq!(rows[4]["version"], "0.1");

    let out = w.zot(&["list"]);
    assert_ok(&out);
    let table = stdout_of(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 6, "{table}");
    assert!(
        lines[0].starts_with("SCOPE") && lines[0].ends_with("STATUS"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("project") && lines[1].ends_with(" ok"),
        "{table}"
    );
    assert!(
        lines[2].contains("global a") && lines[2].ends_with(" shadowed"),
        "{table}"
    );
}

#[test]
fn list_with_nothing_installed_hints_and_succeeds() {
    let w = World::new("empty");
    let out = w.zot(&["list"]);
    assert_ok(&out);
    assert_eq!(stdout_of(&out), "");
    assert!(
        stderr_of(&out).contains("zot ext install"),
        "{}",
        stderr_of(&out)
    );
    assert!(w.list_json().is_empty());
}

#[test]
fn enable_and_disable_change_only_the_enabled_field() {
    let w = World::new("enable");
    let dir = w.global().join("keep");
    let original = r#"{
  "zzz_first": {
    "nested": [
      1,
      2
    ]
  },
  "name": "keep",
  "enabled": true,
  "exec": "./run",
  "custom": "value",
  "args": [
    "--x"
  ]
}
"#;
    write_manifest_text(&dir, original);
    let path = dir.join("extension.json");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();

    assert_ok(&w.zot(&["disable", "keep"]));
    let disabled = original.replace(r#""enabled": true"#, r#""enabled": false"#);
    assert_eq!(fs::read_to_string(&path).unwrap(), disabled);
    assert_eq!(mode(&path), 0o640);
    assert_eq!(w.list_json()[0]["status"], "disabled");

    let out = w.zot(&["disable", "keep"]);
    assert_ok(&out);
    assert!(
        stdout_of(&out).contains("already disabled"),
        "{}",
        stdout_of(&out)
    );

    assert_ok(&w.zot(&["enable", "keep"]));
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
    assert_eq!(w.list_json()[0]["status"], "ok");
    let files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files, ["extension.json"], "no temporary files left");
}

#[test]
fn enable_and_disable_edit_the_text_in_place() {
    // Compact, with values parsing and re-encoding JSON would change (a big
    // integer, `1.10`, a `\u00e9` escape), an `enabled` in nested
    // objects and inside a string, and odd spacing around the real one.
    let w = World::new("enable-in-place");
    let dir = w.global().join("keep");
    let original = concat!(
        r#"{"name":"keep","exec":"./run","big":123456789012345678901234567890,"#,
        r#""ratio":1.10,"who":"caf\u00e9 \"q\" \\","nested":{"enabled":true,"#,
        r#""list":[{"enabled":true},[1,{"enabled":true}]]},"#,
        r#""text":"\"enabled\": true,","enabled" :  true ,"args":["--x"]}"#
    );
    write_manifest_text(&dir, original);
    let path = dir.join("extension.json");

    assert_ok(&w.zot(&["disable", "keep"]));
    let disabled = original.replace(r#""enabled" :  true"#, r#""enabled" :  false"#);
    assert_eq!(fs::read_to_string(&path).unwrap(), disabled);
    assert_eq!(w.list_json()[0]["status"], "disabled");

    assert_ok(&w.zot(&["enable", "keep"]));
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
    assert_eq!(w.list_json()[0]["status"], "ok");
}

#[test]
fn disable_without_an_enabled_field_adds_it_and_finds_manifest_names() {
    let w = World::new("enable-append");
    let path = w.global().join("dir-name/extension.json");
    let compact = r#"{"name":"real","exec":"x","q":null,"o":{"enabled":true}}"#;
    write_manifest_text(&w.global().join("dir-name"), compact);
    // Already enabled by default: nothing to write.
    let out = w.zot(&["enable", "real"]);
    assert_ok(&out);
    assert!(
        stdout_of(&out).contains("already enabled"),
        "{}",
        stdout_of(&out)
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), compact);

    assert_ok(&w.zot(&["disable", "real"]));
    let want = r#"{"name":"real","exec":"x","q":null,"o":{"enabled":true},"enabled":false}"#;
    assert_eq!(fs::read_to_string(&path).unwrap(), want);

    // Indented: the new member copies the first one's indentation.
    let pretty = "{\n    \"name\": \"real\",\n    \"exec\": \"x\"\n}\n";
    fs::write(&path, pretty).unwrap();
    assert_ok(&w.zot(&["disable", "real"]));
    let want = "{\n    \"name\": \"real\",\n    \"exec\": \"x\",\n    \"enabled\": false\n}\n";
    assert_eq!(fs::read_to_string(&path).unwrap(), want);

    assert_fails(
        &w.zot(&["enable", "nothing-here"]),
        "no extension named nothing-here",
    );
}

#[test]
fn enable_uses_the_project_copy_when_there_is_no_global_one() {
    let w = World::new("enable-project");
    write_manifest_text(
        &w.project().join("p"),
        r#"{"name":"p","exec":"x","enabled":false}"#,
    );
    assert_ok(&w.zot(&["enable", "p"]));
    let text = fs::read_to_string(w.project().join("p/extension.json")).unwrap();
    assert_eq!(text, r#"{"name":"p","exec":"x","enabled":true}"#);
}

#[test]
fn remove_needs_confirmation_or_yes() {
    let w = World::new("remove");
    make_ext(&w.global().join("gone"), "gone");
    let out = w.zot(&["remove", "gone"]);
    assert_fails(&out, "--yes");
    assert!(
        stderr_of(&out).contains("not a terminal"),
        "{}",
        stderr_of(&out)
    );
    assert!(w.global().join("gone").exists());

    assert_ok(&w.zot(&["remove", "gone", "--yes"]));
    assert!(w.installed().is_empty(), "left behind: {:?}", w.installed());
    assert_fails(
        &w.zot(&["remove", "gone", "--yes"]),
        "no extension named gone",
    );
}

#[test]
fn remove_finds_manifest_and_directory_names_in_project_and_global() {
    let w = World::new("remove-by-name");
    make_ext(&w.global().join("checkout-dir"), "named");
    assert_ok(&w.zot(&["remove", "-y", "named"]));
    assert!(w.installed().is_empty());

    // A project copy is found too, by its directory name, and `rm` is
    // upstream's alias of `remove`.
    make_ext(&w.project().join("local-dir"), "local");
    let out = w.zot(&["rm", "--yes", "local-dir"]);
    assert_ok(&out);
    assert!(
        stdout_of(&out).contains("removed local-dir"),
        "{}",
        stdout_of(&out)
    );
    assert!(!w.project().join("local-dir").exists());
}

#[test]
fn a_name_shared_by_two_installations_changes_nothing() {
    let w = World::new("ambiguous");
    // The same extension in the project and globally, and a global
    // directory whose manifest name is another one's directory name.
    make_ext(&w.project().join("twin"), "twin");
    make_ext(&w.global().join("twin"), "twin");
    make_ext(&w.global().join("other"), "tool");
    make_ext(&w.global().join("tool"), "something-else");
    let manifests = |w: &World| {
        [
            w.project().join("twin"),
            w.global().join("twin"),
            w.global().join("tool"),
        ]
        .map(|d| fs::read_to_string(d.join("extension.json")).unwrap())
    };
    let before = manifests(&w);
    for args in [
        &["remove", "--yes", "twin"][..],
        &["rm", "--yes", "tool"],
        &["disable", "twin"],
        &["disable", "tool"],
    ] {
        let out = w.zot(args);
        let name = args.last().unwrap();
        assert_fails(&out, &format!("{name} matches 2 installations"));
        assert_fails(&out, "nothing was changed");
        let err = stderr_of(&out);
        let (a, b) = match *name {
            "twin" => (w.project().join("twin"), w.global().join("twin")),
            _ => (w.global().join("other"), w.global().join("tool")),
        };
        for dir in [a, b] {
            assert!(
                err.contains(&dir.display().to_string()),
                "{args:?} should list {dir:?}: {err}"
            );
        }
    }
    assert_eq!(
        manifests(&w),
        before,
        "a refused command changed a manifest"
    );
    assert_eq!(w.installed(), ["other", "tool", "twin"]);
    assert!(w.project().join("twin").exists());

    // --global / --project pick one of them (the project copy, trusted,
    // lists as ok).
    assert_ok(&w.zot(&["trust", "--yes", "twin"]));
    assert_ok(&w.zot(&["disable", "--global", "twin"]));
    let global_twin = w.global().join("twin").display().to_string();
    let rows = w.list_json();
    let row = rows
        .iter()
        .find(|r| r["dir"] == global_twin.as_str())
        .unwrap();
    assert_eq!(row["enabled"], false, "{rows:?}");
    assert_eq!(
        rows[0]["status"], "ok",
        "the project copy changed: {rows:?}"
    );
    assert_ok(&w.zot(&["rm", "--yes", "--project", "twin"]));
    assert!(!w.project().join("twin").exists());
    let both = w.zot(&["enable", "--project", "--global", "twin"]);
    assert_eq!(both.status.code(), Some(2), "{}", stderr_of(&both));
    assert!(
        stderr_of(&both).contains("exclude each other"),
        "{}",
        stderr_of(&both)
    );
}

#[test]
fn remove_rejects_names_that_leave_the_extensions_directory() {
    let w = World::new("traversal");
    make_ext(&w.home.join("x"), "x");
    make_ext(&w.global().join("a"), "a");
    for name in ["../x", "a/b", "..", ".", "", "a\\b", "../extensions/a"] {
        assert_fails(&w.zot(&["remove", "--yes", name]), "invalid extension name");
    }
    assert!(w.home.join("x").exists() && w.global().join("a").exists());
    assert_fails(&w.zot(&["logs", "../x"]), "invalid extension name");
    assert_fails(&w.zot(&["disable", "../x"]), "invalid extension name");
}

#[test]
fn logs_prints_the_log_file() {
    let w = World::new("logs");
    fs::create_dir_all(w.home.join("logs")).unwrap();
    fs::write(w.home.join("logs/ext-x.log"), "line one\n[zot] line two\n").unwrap();
    let out = w.zot(&["logs", "x"]);
    assert_ok(&out);
    assert_eq!(stdout_of(&out), "line one\n[zot] line two\n");
    assert_fails(&w.zot(&["logs", "missing"]), "ext-missing.log");
}

/// Runs `cmd` on a new pseudo-terminal (its stdin, stdout and stderr):
/// the bytes it wrote there, and its exit code.
fn on_a_terminal(cmd: &Command) -> (Vec<u8>, Option<i32>) {
    const DRIVE: &str = "import os, pty, sys\n\
        pid, fd = pty.fork()\n\
        if pid == 0:\n    os.execvp(sys.argv[1], sys.argv[1:])\n\
        out = b''\n\
        while True:\n\
        \x20   try:\n        chunk = os.read(fd, 65536)\n\
        \x20   except OSError:\n        break\n\
        \x20   if not chunk:\n        break\n\
        \x20   out += chunk\n\
        _, status = os.waitpid(pid, 0)\n\
        sys.stdout.buffer.write(out)\n\
        sys.exit(os.waitstatus_to_exitcode(status))\n";
    let mut driver = Command::new("python3");
    driver
        .arg("-c")
        .arg(DRIVE)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        driver.current_dir(dir);
    }
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => driver.env(key, value),
            None => driver.env_remove(key),
        };
    }
    let out = driver.output().expect("run the pty driver");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stdout, out.status.code())
}

#[test]
fn logs_on_a_terminal_show_escape_sequences_inert_and_piped_copy_them_raw() {
    let w = World::new("logs-tty");
    fs::create_dir_all(w.home.join("logs")).unwrap();
    let raw =
        "clean line\nretitled \x1b]0;pwned\x07 cleared \x1b[2J\x1b[H done\rover\n\u{9b}31mred\n";
    fs::write(w.home.join("logs/ext-x.log"), raw).unwrap();
    let piped = w.zot(&["logs", "x"]);
    assert_ok(&piped);
    assert_eq!(
        stdout_of(&piped),
        raw,
        "piped output must be the log as it is"
    );

    let (shown, code) = on_a_terminal(&w.command(&w.proj, &["logs", "x"]));
    assert_eq!(code, Some(0), "{shown:?}");
    // The terminal turns "\n" into "\r\n" on output.
    let shown = String::from_utf8_lossy(&shown).replace("\r\n", "\n");
    assert_eq!(
        shown,
        "clean line\nretitled ^[]0;pwned^G cleared ^[[2J^[[H done^Mover\n\\u{9b}31mred\n"
    );
}

#[test]
fn help_and_version_on_a_closed_pipe_or_a_full_disk_exit_cleanly() {
    let runs: &[&[&str]] = &[
        &["--help"],
        &["--version"],
        &["rpc", "--help"],
        #[cfg(feature = "mcp")]
        &["mcp", "--help"],
        &["ext", "--help"],
    ];
    for args in runs {
        let zot = || {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_zot"));
            cmd.args(*args).stdin(Stdio::null());
            cmd
        };
        // The reader has gone: a quiet end.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = zot().stdout(writer).output().expect("run zot");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "zot {args:?} on a closed pipe: {stderr}"
        );
        assert!(stderr.is_empty(), "zot {args:?} on a closed pipe: {stderr}");
        // A full disk: said, exit 1.
        let full = fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = zot().stdout(full).output().expect("run zot");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "zot {args:?} on /dev/full: {stderr}"
        );
        assert!(
            stderr.contains("zot: cannot write to stdout: No space left on device"),
            "zot {args:?} on /dev/full: {stderr}"
        );
    }
}

/// Kills the follower even when an assertion fails.
struct Follower(Child);

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn logs_follow_prints_appended_lines_across_rotation() {
    let w = World::new("follow");
    let logs = w.home.join("logs");
    fs::create_dir_all(&logs).unwrap();
    let log = logs.join("ext-x.log");
    fs::write(&log, "first\n").unwrap();

    let mut child = w
        .command(&w.proj, &["logs", "x", "-f"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut follower = Follower(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let next = || {
        rx.recv_timeout(DEADLINE)
            .expect("zot ext logs -f printed nothing in time")
    };

    assert_eq!(next(), "first");
    append(&log, "second\n");
    assert_eq!(next(), "second");

    fs::rename(&log, logs.join("ext-x.log.1")).unwrap();
    fs::write(&log, "after rotation\n").unwrap();
    assert_eq!(next(), "after rotation");
    append(&log, "and more\n");
    assert_eq!(next(), "and more");

    assert!(
        follower.0.try_wait().unwrap().is_none(),
        "follow must keep running"
    );
}

#[test]
fn help_and_usage_errors() {
    let w = World::new("help");
    for args in [
        &["--help"][..],
        &["-h"],
        &["install", "--help"],
        &["logs", "-h"],
    ] {
        let out = w.zot(args);
        assert_ok(&out);
        let text = stdout_of(&out);
        assert!(
            text.starts_with("usage:") || text.contains("\nusage:"),
            "{args:?}: {text}"
        );
        assert!(text.contains("zot ext "), "{args:?}: {text}");
    }
    for args in [
        &[][..],
        &["bogus"],
        &["list", "--bogus"],
        &["install"],
        &["remove", "a", "b"],
        &["list", "--force"],
    ] {
        let out = w.zot(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).starts_with("zot: "),
            "{args:?}: {}",
            stderr_of(&out)
        );
    }
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
    write_manifest_text(&old, &manifest_text("weather"));
    // Killed after the new copy went in: the old one is just deleted.
    write_manifest_text(&w.global_ext("sun"), &manifest_text("sun"));
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
    git_repo(&work, |d| {
        write_manifest_text(d, &manifest_text("weather"));
        fs::write(d.join("README"), "a weather extension\n").expect("readme");
    });
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
    git_repo(&empty, |d| {
        fs::write(d.join("README"), "no manifest\n").expect("readme")
    });
    git(&repos, &["clone", "-q", "--bare", "../empty", "empty.git"]);
    let bare = repos.join("empty.git");
    let out = w.zot(&["ext", "install", bare.to_str().expect("utf-8 path")]);
    assert_fails_naming(
        &out,
        &["extension.json at the top of", "nothing was installed"],
    );
    assert_eq!(w.installed(), ["weather"]);
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
        write_manifest_text(&src, &manifest_text("big"));
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
        // Looked for without a pause: the copy may be over in moments.
        let seen = poll_every(Duration::ZERO, DEADLINE, || {
            if scratch().is_some() {
                return Ok(true);
            }
            match install.try_wait().expect("try_wait") {
                Some(_) => Ok(false),
                None => Err("no scratch directory appeared".to_string()),
            }
        });
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
