//! `zot ext list`: every project and global extension with its status.

use super::common::{failed, out, raw_manifest, Ctx};
use crate::cli::common::CliError;
use serde::Serialize;
use serde_json::Value;
#[cfg(feature = "bundles")]
use std::path::PathBuf;
use zot_host::internal::discovery::{self, Found, Status};
use zot_host::internal::log::inert;
use zot_host::internal::manifest::Manifest;
use zot_host::Scope;

/// One line of the listing; `--json` prints its fields in this order,
/// an absent manifest field as `null`.
#[derive(Serialize)]
struct Row {
    scope: Scope,
    name: String,
    version: Option<String>,
    enabled: bool,
    language: Option<String>,
    description: Option<String>,
    protocol: String,
    prefix: Option<String>,
    /// `process`, skills and theme (docs/PROTOCOL.md#bundles).
    provides: String,
    #[cfg(feature = "bundles")]
    skills: Vec<PathBuf>,
    #[cfg(feature = "bundles")]
    theme: Option<PathBuf>,
    dir: String,
    status: String,
}

/// Runs `zot ext list [--json]`.
pub(super) fn run(ctx: &Ctx, as_json: bool) -> Result<i32, CliError> {
    let found = discovery::discover(&[], &ctx.cwd, &ctx.home, true);
    for line in discovery::trust_notices(&found, &ctx.cwd) {
        eprintln!("{line}");
    }
    // Project before global (as discovered), then by name within a scope.
    // Each row goes in after the rows it does not precede: the order of
    // a stable sort, without compiling std's sort for `Row` into the
    // binary for a list that is short.
    let mut rows: Vec<Row> = Vec::new();
    for next in found.iter().map(row) {
        let at = rows.partition_point(|r| r.order_key() <= next.order_key());
        rows.insert(at, next);
    }
    if rows.is_empty() {
        eprintln!(
            "zot: no extensions installed (looked in {} and {}); \
             add one with: zot ext install <path|git-url>",
            ctx.project().display(),
            ctx.global().display()
        );
    }
    if as_json {
        // Fails only on a skill or theme path that is not UTF-8.
        let json = serde_json::to_string(&rows)
            .map_err(|e| failed(format!("cannot print the list as JSON: {e}")))?;
        out(&format!("{json}\n"))?;
    } else if !rows.is_empty() {
        out(&table(&rows))?;
    }
    Ok(0)
}

fn row(f: &Found) -> Row {
    let dir = f.dir.display().to_string();
    if let Some(m) = &f.manifest {
        return Row {
            scope: f.scope,
            name: m.name.clone(),
            version: m.version.clone(),
            enabled: m.enabled,
            language: m.language.clone(),
            description: m.description.clone(),
            protocol: m.protocol.as_str().into(),
            prefix: m.prefix.clone(),
            provides: provides(m),
            #[cfg(feature = "bundles")]
            skills: m.provides.skills.clone(),
            #[cfg(feature = "bundles")]
            theme: m.provides.theme.clone(),
            dir,
            status: status(&f.status),
        };
    }
    // Invalid: show whatever the file does say, the directory name otherwise.
    let raw = raw_manifest(&f.dir);
    let text = |key: &str| raw.get(key).and_then(Value::as_str).map(str::to_string);
    let dir_name = f.dir.file_name().unwrap_or_default().to_string_lossy();
    Row {
        scope: f.scope,
        name: text("name").unwrap_or_else(|| dir_name.into_owned()),
        version: text("version"),
        enabled: raw.get("enabled").and_then(Value::as_bool).unwrap_or(true),
        language: text("language"),
        description: text("description"),
        protocol: text("protocol").unwrap_or_else(|| "zot".into()),
        prefix: text("prefix"),
        provides: "-".into(),
        #[cfg(feature = "bundles")]
        skills: Vec::new(),
        #[cfg(feature = "bundles")]
        theme: None,
        dir,
        status: status(&f.status),
    }
}

/// `process` when it has an `exec`, then its skills and theme.
#[cfg(feature = "bundles")]
fn provides(m: &Manifest) -> String {
    let bundle = m.provides.summary();
    match (m.is_bundle(), bundle.is_empty()) {
        (true, _) => bundle,
        (false, true) => "process".into(),
        (false, false) => format!("process, {bundle}"),
    }
}

/// `process`: a build without bundles says when it ignores `skills`.
#[cfg(not(feature = "bundles"))]
fn provides(m: &Manifest) -> String {
    if m.skills.is_empty() {
        return "process".into();
    }
    "process (`skills` ignored: built without the `bundles` feature)".into()
}

fn status(status: &Status) -> String {
    match status {
        Status::Start => "ok".into(),
        Status::Disabled => "disabled".into(),
        Status::Shadowed { .. } => "shadowed".into(),
        Status::Invalid(e) => format!("invalid: {}", e.reason),
        Status::Untrusted(_) => "untrusted".into(),
    }
}

impl Row {
    /// What `zot ext list` orders rows by.
    fn order_key(&self) -> (bool, &str, &str) {
        (self.scope != Scope::Project, &self.name, &self.dir)
    }

    fn cells(&self) -> [String; 11] {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        [
            self.scope.as_str().into(),
            self.name.clone(),
            opt(&self.version),
            if self.enabled { "yes" } else { "no" }.into(),
            opt(&self.language),
            opt(&self.description),
            self.protocol.clone(),
            opt(&self.prefix),
            self.provides.clone(),
            self.dir.clone(),
            self.status.clone(),
        ]
    }
}

/// Aligned columns. Control characters from manifests and directory
/// names are shown [`inert`] (tabs as spaces, to keep the columns).
fn table(rows: &[Row]) -> String {
    const HEADER: [&str; 11] = [
        "SCOPE",
        "NAME",
        "VERSION",
        "ENABLED",
        "LANGUAGE",
        "DESCRIPTION",
        "PROTOCOL",
        "PREFIX",
        "PROVIDES",
        "DIR",
        "STATUS",
    ];
    let clean = |s: &str| inert(s).replace('\t', " ");
    let mut lines: Vec<Vec<String>> = vec![HEADER.iter().map(|h| h.to_string()).collect()];
    lines.extend(
        rows.iter()
            .map(|r| r.cells().iter().map(|c| clean(c)).collect()),
    );
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for line in &lines {
        let last = line.len() - 1;
        for (i, cell) in line.iter().enumerate() {
            text.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 2;
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        text.push('\n');
    }
    text
}
