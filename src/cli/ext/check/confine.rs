//! The permission rules of `zot ext check` (docs/PROTOCOL.md#confinement): what the manifest
//! declares, and with `--confine` a run under those permissions and the
//! denials its stderr reports.

use super::opts::Opts;
use super::report::Report;
use std::path::Path;
use std::time::{Duration, Instant};
use zot_host::internal::confine::{Confinement, Places};
use zot_host::internal::manifest::{Manifest, Permissions};

/// Denials shown one by one; the rest are counted.
const DENIALS_SHOWN: usize = 3;

/// Words with which programs report a denied file or network operation
/// (the EACCES and EPERM messages of libc, Python, Node and Go).
const DENIAL_WORDS: [&str; 4] = [
    "Permission denied",
    "Operation not permitted",
    "EACCES",
    "EPERM",
];

/// Reports the declared permissions and, when the check confines, builds
/// the confinement, its data directory in `scratch` (a check leaves
/// `$ZOT_HOME` as it was); `Err` when this kernel cannot confine it
/// (reported as a failure: it is not run unconfined instead).
pub(super) fn prepare(
    opts: &Opts,
    manifest: &Manifest,
    (dir, exe): (&Path, &Path),
    scratch: &Path,
    report: &mut Report,
) -> Result<Option<Confinement>, ()> {
    let declared = match &manifest.permissions {
        Some(p) => format!("declared: {}", p.describe()),
        None => format!(
            "none declared: confined it may {}",
            Permissions::default().describe()
        ),
    };
    report.pass("permissions", Duration::ZERO, declared);
    if !opts.config.confine {
        return Ok(None);
    }
    let t = Instant::now();
    let mut places = Places::new(dir, &opts.cwd, &opts.config.zot_home);
    places.data = scratch.join("data");
    match Confinement::new(manifest, exe, &places, 0) {
        Ok(c) => {
            report.pass(
                "confine",
                t.elapsed(),
                format!("runs confined: {}", c.summary),
            );
            Ok(Some(c))
        }
        Err(why) => {
            let f = report.fail("confine", t.elapsed(), why);
            f.hint("the host refuses to start it confined on this kernel too");
            Err(())
        }
    }
}

/// After a confined run: the lines of its stderr that report a denial,
/// as a warning (the extension may need a permission it does not
/// declare), or a pass saying none was seen. Only what it wrote is
/// known: a denial it kept to itself is not.
pub(super) fn denials(log: &Path, report: &mut Report) {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let denied: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("[zot] "))
        .filter(|l| DENIAL_WORDS.iter().any(|w| l.contains(w)))
        .collect();
    if denied.is_empty() {
        let msg = "its stderr reports no denied operation while confined";
        report.pass("confine", Duration::ZERO, msg);
        return;
    }
    let mut msg = format!(
        "its stderr reports {} denied operation(s) while confined: ",
        denied.len()
    );
    msg.push_str(&denied[..denied.len().min(DENIALS_SHOWN)].join(" | "));
    let f = report.warn("confine", Duration::ZERO, msg);
    f.hint("declare what it needs in the manifest's \"permissions\" (write, read, network)");
}
