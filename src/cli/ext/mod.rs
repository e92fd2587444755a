//! `zot ext`: manage installed extensions (docs/PROTOCOL.md#zot-ext).
//!
//! Global extensions live in `$ZOT_HOME/extensions/<name>/`, project
//! ones in `./.zot/extensions/<name>/`. `install` only writes the global
//! directory; `list` shows both; `remove`, `enable` and `disable` act on
//! the one installation, project or global, a name means.

#[cfg(feature = "author")]
mod check;
mod common;
#[cfg(feature = "author")]
mod doctor;
mod install;
mod list;
mod logs;
mod manage;
#[cfg(feature = "author")]
mod new;
mod scratch;
mod trust;

use super::common::{absolute, string, CliError};
use common::{out, usage, Ctx};
use std::ffi::OsString;
use std::path::PathBuf;
use zot_host::Scope;

const HELP: &str = "\
zot ext: manage installed extensions

usage:
  zot ext list [--json]                     list project and global extensions
  zot ext install <path|git-url> [--force]  copy or clone into $ZOT_HOME/extensions/<name>
  zot ext remove|rm <name> [--yes]          delete an installed extension (project or global)
  zot ext enable <name>                     set \"enabled\": true in its extension.json
  zot ext disable <name>                    set \"enabled\": false (stays installed)
  zot ext logs <name> [-f]                  print, or follow, the extension's log
  zot ext doctor [--json]                   start the extensions as zot would and report on each
  zot ext trust [NAME...] [--yes]           let the project's own extensions start
  zot ext untrust [NAME...]                 remove that trust
  zot ext check [PATH] [--json] [--strict] [--call TOOL JSON]... [--command NAME ARGS]...
                                            run one extension alone and report each rule
  zot ext new NAME [--lang python|sh|node|go|rust] [--dir DIR]
                                            write a working extension to start from

options:
      --cwd DIR   project directory holding .zot/extensions (default: current directory)
  -h, --help      show this help; `zot ext <command> --help` for one command
";

/// One subcommand: its flags (short, long) and its positional argument.
struct Sub {
    name: &'static str,
    usage: &'static str,
    about: &'static str,
    flags: &'static [(Option<char>, &'static str)],
    arg: Option<&'static str>,
}

const SUBS: &[Sub] = &[
    Sub {
        name: "list",
        usage: "zot ext list [--json] [--cwd DIR]",
        about: "List project-local then global extensions, sorted by name, with what\n\
                they provide (a process, skills, a theme) and their status: ok,\n\
                disabled, shadowed (another copy wins), untrusted (a project extension\n\
                not trusted as it is now: zot ext trust) or invalid: <reason>.\n\
                --json prints one JSON array of objects with the keys scope, name,\n\
                version, enabled, language, description, protocol (zot or mcp),\n\
                prefix, provides, skills (absolute paths of its SKILL.md files) and\n\
                theme (the theme file's path or null) in a build with bundles, dir\n\
                and status.",
        flags: &[(None, "json")],
        arg: None,
    },
    Sub {
        name: "install",
        usage: "zot ext install <path|git-url> [--force]",
        about: "Copy a local extension directory (modes and symlinks kept), or clone a git\n\
                URL (https://, ssh://, git@host:path, file://, *.git) or a local bare\n\
                repository with depth 1, into $ZOT_HOME/extensions/<manifest name>.\n\
                Scratch directories left by a killed install are removed by the next\n\
                zot ext command. The manifest is validated first;\n\
                on any failure nothing is installed. --force replaces an existing copy.",
        flags: &[(Some('f'), "force")],
        arg: Some("<path|git-url>"),
    },
    Sub {
        name: "remove",
        usage: "zot ext remove|rm <name> [--yes] [--project|--global] [--cwd DIR]",
        about: "Delete the extension's directory, project or global. <name> is its manifest\n\
                name or its directory name; a name that matches several installations lists\n\
                them and removes nothing (--project or --global narrows the search).\n\
                Asks for confirmation on a terminal; elsewhere --yes is required.",
        flags: &[(Some('y'), "yes"), (None, "project"), (None, "global")],
        arg: Some("<name>"),
    },
    Sub {
        name: "enable",
        usage: "zot ext enable <name> [--project|--global] [--cwd DIR]",
        about: "Set \"enabled\": true in the extension's manifest, changing nothing else.\n\
                <name> is looked up as for remove: manifest or directory name, project\n\
                and global, and a name matching several installations changes nothing.",
        flags: &[(None, "project"), (None, "global")],
        arg: Some("<name>"),
    },
    Sub {
        name: "disable",
        usage: "zot ext disable <name> [--project|--global] [--cwd DIR]",
        about: "Set \"enabled\": false in the extension's manifest, changing nothing else.\n\
                <name> is looked up as for remove: manifest or directory name, project\n\
                and global, and a name matching several installations changes nothing.",
        flags: &[(None, "project"), (None, "global")],
        arg: Some("<name>"),
    },
    Sub {
        name: "logs",
        usage: "zot ext logs <name> [-f]",
        about: "Print $ZOT_HOME/logs/ext-<name>.log. With -f/--follow, keep printing what\n\
                is appended, also across log rotation, until interrupted.",
        flags: &[(Some('f'), "follow")],
        arg: Some("<name>"),
    },
];

/// A parsed command line.
struct Parsed {
    sub: &'static Sub,
    flags: Vec<&'static str>,
    arg: Option<OsString>,
    cwd: Option<PathBuf>,
}

impl Parsed {
    fn has(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
    }

    /// `--project` or `--global`: the one scope a name is looked up in.
    fn only(&self) -> Result<Option<Scope>, CliError> {
        match (self.has("project"), self.has("global")) {
            (true, true) => Err(usage("--project and --global exclude each other")),
            (true, false) => Ok(Some(Scope::Project)),
            (false, true) => Ok(Some(Scope::Global)),
            (false, false) => Ok(None),
        }
    }

    /// The positional argument as a string (present: checked by the parser).
    fn arg_string(&self) -> Result<String, CliError> {
        string(self.arg.clone().unwrap_or_default())
    }
}

/// What the command line asks for.
enum Request {
    Help(Option<&'static Sub>),
    Run(Parsed),
}

/// Runs `zot ext <args>`.
pub fn run(args: Vec<OsString>) -> Result<i32, CliError> {
    // `check`, `doctor` and `new` take options with values: they parse their own.
    let (cwd, at) = leading_cwd(&args)?;
    match args.get(at).and_then(|a| a.to_str()) {
        #[cfg(feature = "author")]
        Some("check") => return check::run(cwd, args[at + 1..].to_vec()),
        #[cfg(feature = "author")]
        Some("new") => return new::run(args[at + 1..].to_vec()),
        #[cfg(feature = "author")]
        Some("doctor") => return doctor::run(cwd, args[at + 1..].to_vec()),
        #[cfg(not(feature = "author"))]
        Some(sub @ ("check" | "new" | "doctor")) => {
            return Err(super::common::not_built(
                &format!("zot ext {sub}"),
                "author",
            ))
        }
        Some(sub @ ("trust" | "untrust")) => {
            return trust::run(cwd, args[at + 1..].to_vec(), sub == "trust")
        }
        _ => {}
    }
    let parsed = match parse(args)? {
        Request::Help(sub) => return print_help(sub),
        Request::Run(parsed) => parsed,
    };
    let ctx = Ctx::new(parsed.cwd.clone())?;
    // A killed install or remove leaves its scratch directory behind.
    scratch::clean_stale(&ctx.global());
    let sub = parsed.sub.name;
    match sub {
        "list" => list::run(&ctx, parsed.has("json")),
        "install" => install::run(
            &ctx,
            parsed.arg.as_deref().unwrap_or_default(),
            parsed.has("force"),
        ),
        "remove" => manage::remove(
            &ctx,
            &parsed.arg_string()?,
            parsed.only()?,
            parsed.has("yes"),
        ),
        "enable" | "disable" => {
            manage::set_enabled(&ctx, &parsed.arg_string()?, parsed.only()?, sub == "enable")
        }
        _ => logs::run(&ctx, &parsed.arg_string()?, parsed.has("follow")),
    }
}

/// `--cwd DIR` options before the subcommand: the last DIR, and where
/// the subcommand is.
fn leading_cwd(args: &[OsString]) -> Result<(Option<PathBuf>, usize), CliError> {
    let (mut cwd, mut at) = (None, 0);
    while let Some(arg) = args.get(at).and_then(|a| a.to_str()) {
        if let Some(dir) = arg.strip_prefix("--cwd=") {
            cwd = Some(absolute(dir.into())?);
            at += 1;
        } else if arg == "--cwd" && at + 1 < args.len() {
            cwd = Some(absolute(args[at + 1].clone().into())?);
            at += 2;
        } else {
            break;
        }
    }
    Ok((cwd, at))
}

fn print_help(sub: Option<&Sub>) -> Result<i32, CliError> {
    let text = match sub {
        None => HELP.to_string(),
        Some(s) => format!("usage: {}\n\n{}\n", s.usage, s.about),
    };
    out(&text)?;
    Ok(0)
}

fn parse(args: Vec<OsString>) -> Result<Request, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let mut cwd = None;
    let sub = loop {
        match parser.next()? {
            Some(Short('h') | Long("help")) => return Ok(Request::Help(None)),
            Some(Long("cwd")) => cwd = Some(absolute(parser.value()?.into())?),
            Some(Value(name)) => break string(name)?,
            Some(other) => return Err(other.unexpected().into()),
            None => return Err(usage("missing command")),
        }
    };
    // `rm` is upstream's alias of `remove`.
    let sub = if sub == "rm" { "remove".into() } else { sub };
    let sub = SUBS
        .iter()
        .find(|s| s.name == sub)
        .ok_or_else(|| usage(&format!("unknown command `{sub}`")))?;
    let mut parsed = Parsed {
        sub,
        flags: Vec::new(),
        arg: None,
        cwd,
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Request::Help(Some(sub))),
            Long("cwd") => parsed.cwd = Some(absolute(parser.value()?.into())?),
            Value(v) if sub.arg.is_some() && parsed.arg.is_none() => parsed.arg = Some(v),
            Short(_) | Long(_) => match flag_of(sub, &arg) {
                Some(flag) => parsed.flags.push(flag),
                None => return Err(arg.unexpected().into()),
            },
            Value(_) => return Err(arg.unexpected().into()),
        }
    }
    if let (Some(what), None) = (sub.arg, &parsed.arg) {
        return Err(usage(&format!("missing {what} (usage: {})", sub.usage)));
    }
    Ok(Request::Run(parsed))
}

/// The long name of `sub`'s flag matching `arg`, if it has one.
fn flag_of(sub: &Sub, arg: &lexopt::Arg) -> Option<&'static str> {
    sub.flags.iter().find_map(|&(short, long)| match arg {
        lexopt::Arg::Short(c) if Some(*c) == short => Some(long),
        lexopt::Arg::Long(l) if *l == long => Some(long),
        _ => None,
    })
}
