//! `zot ext trust` and `zot ext untrust`: record which of the project's
//! own extensions may start (docs/PROTOCOL.md#trust).

use super::common::{failed, out, say, Ctx};
use crate::cli::common::CliError;
use crate::cli::common::{absolute, string};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use zot_host::internal::discovery::{self, Found, Status};
use zot_host::internal::log::inert;
use zot_host::internal::manifest::{self, Manifest, MANIFEST_FILE};
use zot_host::internal::trust::{self, Record, Snapshot, Untrusted};
use zot_host::Scope;

const TRUST_HELP: &str = "\
usage: zot ext trust [NAME...] [--yes] [--cwd DIR]

Let the project's own extensions (.zot/extensions/*; all untrusted ones
when no NAME is given, else those whose directory or manifest name is
given) start in zot, zot rpc and zot mcp. Each is shown first: its
directory, exec, args, protocol, the files trust binds and, in a build
that confines, the permissions it declares (zot --confine); on a
terminal you are asked, elsewhere --yes is required. Trust is recorded
for this project directory in $ZOT_HOME/trust.json and lapses when the
manifest or a file its exec or args name in the extension directory
changes.

options:
  -y, --yes      trust without asking
      --cwd DIR  project directory (default: the current directory)
  -h, --help     show this help
";

const UNTRUST_HELP: &str = "\
usage: zot ext untrust [NAME...] [--cwd DIR]

Remove the recorded trust of the project's extensions (all of this
project's when no NAME is given): they no longer start.

options:
      --cwd DIR  project directory (default: the current directory)
  -h, --help     show this help
";

/// Runs `zot ext trust ...` (`trusting`) or `zot ext untrust ...`.
pub(super) fn run(
    cwd: Option<PathBuf>,
    args: Vec<OsString>,
    trusting: bool,
) -> Result<i32, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let (mut names, mut yes, mut cwd) = (Vec::new(), false, cwd);
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => {
                out(if trusting { TRUST_HELP } else { UNTRUST_HELP })?;
                return Ok(0);
            }
            Short('y') | Long("yes") if trusting => yes = true,
            Long("cwd") => cwd = Some(absolute(parser.value()?.into())?),
            Value(v) => names.push(string(v)?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let ctx = Ctx::new(cwd)?;
    if trusting {
        trust(&ctx, &names, yes)
    } else {
        untrust(&ctx, &names)
    }
}

/// One project extension as it is now.
struct Candidate<'a> {
    found: &'a Found,
    /// Its directory's name, the key of its trust.
    key: String,
    /// Trusted as it is now, or why not.
    verdict: Result<(), Untrusted>,
}

impl Candidate<'_> {
    fn trusted(&self) -> bool {
        self.verdict.is_ok()
    }
}

fn trust(ctx: &Ctx, names: &[String], yes: bool) -> Result<i32, CliError> {
    let record = Record::load(&ctx.home).map_err(failed)?;
    let found = discovery::discover(&[], &ctx.cwd, &ctx.home, true);
    let candidates: Vec<Candidate> = found
        .iter()
        .filter(|f| f.scope == Scope::Project)
        .map(|f| Candidate {
            found: f,
            key: trust::entry_key(&f.dir),
            verdict: verdict(&record, &ctx.cwd, f),
        })
        .collect();
    let project = ctx.project();
    if candidates.is_empty() {
        eprintln!(
            "zot: no project extensions in {}; nothing to trust",
            inert(&project.display().to_string())
        );
        return Ok(if names.is_empty() { 0 } else { 1 });
    }
    let chosen = choose(&candidates, names, &project)?;
    if chosen.is_empty() {
        if (candidates.iter()).any(|c| matches!(c.verdict, Err(Untrusted::Unbindable(_)))) {
            return Err(failed("nothing was trusted (see above)".into()));
        }
        say(&format!(
            "every project extension in {} is trusted already",
            project.display()
        ))?;
        return Ok(0);
    }
    // Copied before they are shown: what is trusted is what was shown.
    let mut snapshots = Vec::new();
    for c in &chosen {
        let snapshot = Snapshot::take(&ctx.home, &ctx.cwd, &c.found.dir).map_err(|e| {
            let name = c.found.manifest.as_ref().map_or(&c.key, |m| &m.name);
            failed(format!("cannot trust {name}: {e}"))
        })?;
        say(&describe(&snapshot, &c.verdict))?;
        snapshots.push(snapshot);
    }
    let shown: Vec<String> = snapshots.iter().map(|s| s.manifest.name.clone()).collect();
    if !yes && !confirm(&shown, &ctx.cwd)? {
        return Err(failed("nothing was trusted".into()));
    }
    let cwd = ctx.cwd.clone();
    trust::update(&ctx.home, move |record| {
        snapshots
            .into_iter()
            .try_for_each(|snapshot| record.trust(&cwd, snapshot))
    })
    .map_err(failed)?;
    say(&format!(
        "trusted {} in {}",
        shown.join(", "),
        ctx.cwd.display()
    ))?;
    Ok(0)
}

/// Whether the extension `f` of project `cwd` is trusted as it is now.
fn verdict(record: &Record, cwd: &Path, f: &Found) -> Result<(), Untrusted> {
    let Some(m) = &f.manifest else {
        return Err(Untrusted::New);
    };
    let text = manifest::read_file(&f.dir.join(MANIFEST_FILE)).map_err(Untrusted::Changed)?;
    record.check(cwd, &f.dir, &text, m)
}

/// The candidates `names` mean (every untrusted valid one when none is
/// given), each name matching one directory or manifest name.
fn choose<'a, 'f>(
    candidates: &'a [Candidate<'f>],
    names: &[String],
    project: &Path,
) -> Result<Vec<&'a Candidate<'f>>, CliError> {
    let name_of = |c: &Candidate| c.found.manifest.as_ref().map(|m| m.name.clone());
    if names.is_empty() {
        for c in candidates {
            if let Status::Invalid(e) = &c.found.status {
                eprintln!(
                    "zot: {}",
                    inert(&format!("skipped (invalid manifest): {e}"))
                );
            }
            if let (Some(name), Err(why @ Untrusted::Unbindable(_))) = (name_of(c), &c.verdict) {
                eprintln!("zot: {}", inert(&format!("skipped {name}: {why}")));
            }
        }
        let unbindable = |c: &Candidate| matches!(c.verdict, Err(Untrusted::Unbindable(_)));
        return Ok(candidates
            .iter()
            .filter(|c| c.found.manifest.is_some() && !c.trusted() && !unbindable(c))
            .collect());
    }
    let mut chosen: Vec<&Candidate> = Vec::new();
    for name in names {
        let matches: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| c.key == *name || name_of(c).as_deref() == Some(name))
            .collect();
        let c = match matches[..] {
            [] => {
                return Err(failed(format!(
                    "no project extension named {name} in {} (see zot ext list)",
                    project.display()
                )))
            }
            [c] => c,
            _ => {
                let dirs: Vec<String> = matches
                    .iter()
                    .map(|c| c.found.dir.display().to_string())
                    .collect();
                return Err(failed(format!(
                    "several project extensions are named {name}: {}; use the directory name",
                    dirs.join(", ")
                )));
            }
        };
        if let Status::Invalid(e) = &c.found.status {
            return Err(failed(format!(
                "cannot trust {name}: invalid manifest: {e}"
            )));
        }
        if c.trusted() {
            say(&format!("{name} is trusted already"))?;
        } else if !chosen.iter().any(|o| std::ptr::eq(*o, c)) {
            chosen.push(c);
        }
    }
    Ok(chosen)
}

/// What the user is asked to trust: where it is, what it runs, what trust binds.
fn describe(snapshot: &Snapshot, verdict: &Result<(), Untrusted>) -> String {
    let m: &Manifest = &snapshot.manifest;
    let b = &snapshot.binding;
    let args = serde_json::to_string(&m.args).unwrap_or_default();
    let files: Vec<String> = b.files.iter().map(|f| b.show(f)).collect();
    let mut text = format!(
        "{}\n  directory: {}\n  exec:      {}\n  args:      {args}\n  protocol:  {}\n  bound:     {}\n",
        m.name,
        b.dir.display(),
        m.exec.as_deref().unwrap_or("(none: skills and a theme only)"),
        m.protocol.as_str(),
        files.join(", "),
    );
    // What it may touch once it runs confined (docs/PROTOCOL.md#confinement).
    #[cfg(feature = "confine")]
    text.push_str(&format!("  permissions: {}\n", permissions(m)));
    if let Err(why @ Untrusted::Changed(_)) = verdict {
        text.push_str(&format!("  ({why})\n"));
    }
    text
}

/// The permissions `m` declares, or those of none, in one line.
#[cfg(feature = "confine")]
fn permissions(m: &Manifest) -> String {
    use zot_host::internal::manifest::Permissions;
    match &m.permissions {
        Some(p) => p.describe(),
        None => format!(
            "none declared ({} when confined)",
            Permissions::default().describe()
        ),
    }
}

/// Asks whether to trust `names` in `cwd`.
fn confirm(names: &[String], cwd: &Path) -> Result<bool, CliError> {
    let what = format!(
        "{} project extension(s) ({})",
        names.len(),
        names.join(", ")
    );
    super::common::confirm(
        &format!("trust {what} in {}?", cwd.display()),
        format!(
            "refusing to trust {what} without confirmation: stdin is not a terminal; \
             review them, then pass --yes"
        ),
    )
}

fn untrust(ctx: &Ctx, names: &[String]) -> Result<i32, CliError> {
    let cwd = ctx.cwd.clone();
    let removed = trust::update(&ctx.home, |record| {
        let removed = record.untrust(&cwd, names);
        for name in names {
            if !removed.iter().any(|(k, e)| k == name || e.name == *name) {
                return Err(format!(
                    "{name} is not trusted in {} (see zot ext list)",
                    cwd.display()
                ));
            }
        }
        Ok(removed)
    })
    .map_err(failed)?;
    if removed.is_empty() {
        say(&format!("nothing is trusted in {}", cwd.display()))?;
        return Ok(0);
    }
    let names: Vec<&str> = removed.iter().map(|(_, e)| e.name.as_str()).collect();
    say(&format!(
        "no longer trusted in {}: {}",
        cwd.display(),
        names.join(", ")
    ))?;
    Ok(0)
}
