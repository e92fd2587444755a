//! `zot ext new`: writes a working extension (manifest, one command, one
//! tool with a JSON Schema, `ready`, a clean `shutdown`, logs on stderr)
//! from templates compiled into the binary.

use super::common::{out, usage};
use crate::cli::common::{absolute, string, CliError};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use zot_host::internal::manifest::valid_name;

const HELP: &str = "\
usage: zot ext new NAME [--lang python|sh|node|go|rust] [--dir DIR]

Write a working extension called NAME into ./NAME (or DIR): a manifest,
one slash command (/NAME), one tool (NAME_echo, with a JSON Schema and
argument checking), ready, a clean shutdown and logging to stderr, with
comments that explain the protocol. Nothing existing is overwritten.

options:
      --lang LANG   python (default), sh (needs jq), node, go (Go 1.19+), rust
      --dir DIR     where to write it (a new or empty directory; default ./NAME)
  -h, --help        show this help
";

/// One file of a template: its path in the extension, its text (with
/// `{{name}}`, `{{tool}}` and `{{crate}}` to fill in), and whether it is
/// executable.
type File = (&'static str, &'static str, bool);

struct Template {
    lang: &'static str,
    files: &'static [File],
    /// What to run in the extension's directory before it can start.
    build: Option<&'static str>,
    /// The runtime it needs, for the message.
    needs: &'static str,
}

macro_rules! file {
    ($lang:literal, $template:literal, $path:literal, $exec:literal) => {
        (
            $path,
            include_str!(concat!("templates/", $lang, "/", $template)),
            $exec,
        )
    };
}

const TEMPLATES: [Template; 5] = [
    Template {
        lang: "python",
        files: &[
            file!("python", "extension.json", "extension.json", false),
            file!("python", "main.py", "main.py", true),
        ],
        build: None,
        needs: "python3",
    },
    Template {
        lang: "sh",
        files: &[
            file!("sh", "extension.json", "extension.json", false),
            file!("sh", "main.sh", "main.sh", true),
        ],
        build: None,
        needs: "a POSIX sh and jq",
    },
    Template {
        lang: "node",
        files: &[
            file!("node", "extension.json", "extension.json", false),
            file!("node", "index.js", "index.js", false),
        ],
        build: None,
        needs: "node (Node.js 18 or newer)",
    },
    Template {
        lang: "go",
        files: &[
            file!("go", "extension.json", "extension.json", false),
            file!("go", "go.mod", "go.mod", false),
            file!("go", "main.go", "main.go", false),
            file!("go", "gitignore", ".gitignore", false),
        ],
        build: Some("go build -o {{name}} ."),
        needs: "Go 1.19 or newer to build",
    },
    Template {
        lang: "rust",
        files: &[
            file!("rust", "extension.json", "extension.json", false),
            file!("rust", "Cargo.toml.tmpl", "Cargo.toml", false),
            file!("rust", "main.rs", "src/main.rs", false),
            file!("rust", "gitignore", ".gitignore", false),
        ],
        // The manifest runs ./target/release/NAME: `--target-dir` beats a
        // CARGO_TARGET_DIR (or build.target-dir) that would build it elsewhere.
        build: Some("cargo build --release --target-dir target"),
        needs: "Rust (cargo) to build",
    },
];

/// Runs `zot ext new <args>`.
pub(super) fn run(args: Vec<OsString>) -> Result<i32, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let (mut name, mut lang, mut dir) = (None, "python".to_string(), None);
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => {
                out(HELP)?;
                return Ok(0);
            }
            Long("lang") => lang = string(parser.value()?)?,
            Long("dir") => dir = Some(PathBuf::from(parser.value()?)),
            Value(v) if name.is_none() => name = Some(string(v)?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let name = name.ok_or_else(|| usage("missing NAME (usage: zot ext new NAME [--lang LANG])"))?;
    if !valid_name(&name) {
        return Err(usage(&format!(
            "{name:?} is not a valid extension name (letters, digits, '.', '_', '-', starting \
             with a letter or digit, at most 64)"
        )));
    }
    let template = TEMPLATES.iter().find(|t| t.lang == lang).ok_or_else(|| {
        let langs: Vec<&str> = TEMPLATES.iter().map(|t| t.lang).collect();
        usage(&format!(
            "unknown --lang {lang:?}: one of {}",
            langs.join(", ")
        ))
    })?;
    // Shown as the user would type it; written at its absolute path.
    let shown = dir.unwrap_or_else(|| Path::new(".").join(&name));
    let target = absolute(shown.clone())?;
    let fill = Fill::new(&name);
    write_all(template, &fill, &target)?;
    out(&next_steps(template, &fill, &shown))?;
    Ok(0)
}

/// The values put into a template.
struct Fill {
    name: String,
    /// The tool's name: letters, digits and `_` only, as model APIs want.
    tool: String,
    /// A Cargo package (and binary) name.
    krate: String,
}

impl Fill {
    fn new(name: &str) -> Fill {
        let ident: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let starts_with_digit = ident.starts_with(|c: char| c.is_ascii_digit());
        let krate = if starts_with_digit {
            format!("ext_{ident}")
        } else {
            ident.clone()
        };
        let mut tool = ident;
        tool.truncate(59); // room for `_echo` within 64
        Fill {
            name: name.to_string(),
            tool: format!("{tool}_echo"),
            krate,
        }
    }

    fn apply(&self, text: &str) -> String {
        text.replace("{{name}}", &self.name)
            .replace("{{tool}}", &self.tool)
            .replace("{{crate}}", &self.krate)
    }
}

/// Writes the template's files into `target`, a new or empty directory.
/// Never replaces anything; on a failure, what it wrote is removed.
fn write_all(template: &Template, fill: &Fill, target: &Path) -> Result<(), CliError> {
    let fail = |msg: String| CliError::Failed(msg);
    let created = match std::fs::read_dir(target) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(fail(format!(
                    "{} already exists and is not empty: nothing was written (choose another \
                     NAME or --dir)",
                    target.display()
                )));
            }
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(_) if target.exists() => {
            return Err(fail(format!(
                "{} already exists: nothing was written (choose another NAME or --dir)",
                target.display()
            )))
        }
        Err(e) => return Err(fail(format!("cannot read {}: {e}", target.display()))),
    };
    let written = template.files.iter().try_for_each(|&(path, text, exec)| {
        let path = target.join(path);
        write_new(&path, &fill.apply(text), exec)
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))
    });
    if written.is_err() {
        if created {
            let _ = std::fs::remove_dir_all(target);
        } else {
            for (path, _, _) in template.files {
                let _ = std::fs::remove_file(target.join(path));
            }
        }
    }
    written
}

/// Creates `path` (and its directory); fails if it exists.
fn write_new(path: &Path, text: &str, exec: bool) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if exec { 0o755 } else { 0o644 })
        .open(path)?;
    file.write_all(text.as_bytes())
}

fn next_steps(template: &Template, fill: &Fill, dir: &Path) -> String {
    let dir = dir.display();
    let (name, tool) = (&fill.name, &fill.tool);
    let files: Vec<&str> = template.files.iter().map(|f| f.0).collect();
    let mut text = format!(
        "created {dir} ({} extension {name}): {}\n",
        template.lang,
        files.join(", ")
    );
    text += &format!("it needs {}\n\n", template.needs);
    let mut step = 1;
    if let Some(build) = template.build {
        text += &format!("{step}. build it:    (cd {dir} && {})\n", fill.apply(build));
        step += 1;
    }
    text += &format!(
        "{step}. try it:      zot -e {dir}      then  /{name} you  and  /call {tool} {{\"text\": \"hi\"}}\n"
    );
    text += &format!(
        "{}. check it:    zot ext check {dir} --strict --call {tool} '{{\"text\": \"hi\"}}'\n",
        step + 1
    );
    text += &format!(
        "{}. install it:  zot ext install {dir}      (then every zot session loads it)\n",
        step + 2
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_for_tools_and_crates() {
        let f = Fill::new("my-ext.2");
        assert_eq!(
            (f.tool.as_str(), f.krate.as_str()),
            ("my_ext_2_echo", "my_ext_2")
        );
        assert_eq!(Fill::new("9lives").krate, "ext_9lives");
        assert!(Fill::new(&"x".repeat(64)).tool.len() <= 64);
    }

    #[test]
    fn every_template_fills_in_a_valid_manifest() {
        for t in &TEMPLATES {
            let fill = Fill::new("demo-1");
            for (path, text, _) in t.files {
                let text = fill.apply(text);
                // `{{word}}` left over (Go's `{{"type": ...}}` is code).
                let unfilled = text.split("{{").skip(1).find_map(|rest| {
                    let word = rest.split("}}").next()?;
                    let placeholder =
                        word.len() < rest.len() && word.chars().all(|c| c.is_ascii_lowercase());
                    placeholder.then_some(word)
                });
                assert_eq!(unfilled, None, "{} {path}: unfilled placeholder", t.lang);
                if *path == "extension.json" {
                    let m = zot_host::internal::manifest::Manifest::parse(text.as_bytes())
                        .unwrap_or_else(|e| panic!("{} manifest: {e}", t.lang));
                    assert_eq!(m.name, "demo-1");
                }
            }
        }
    }
}
