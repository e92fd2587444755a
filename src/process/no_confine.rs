//! Confinement for the author tools in a build without the `confine`
//! feature: nothing can be confined. `zot ext check --confine` is told so
//! by the error that names the feature (the host refuses
//! [`crate::HostConfig::confine`] with the same words); no extension is
//! ever started unconfined in its place. The types are uninhabited, so no
//! value of them exists. The minimal build, without the author tools,
//! has no confinement code at all.

use crate::build::needs_feature;
use crate::ext::manifest::Manifest;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Landlock ABI that can deny TCP connect and bind.
pub const NET_ABI: u32 = 4;

/// The Landlock ABI this build can use: none.
pub fn kernel_abi() -> u32 {
    0
}

/// What a `$VAR` in a permission path stands for.
#[derive(Debug, Clone)]
pub struct Places {
    /// `$EXT`: the extension's directory.
    pub ext: PathBuf,
    /// `$CWD`: the project directory.
    pub cwd: PathBuf,
    /// `$ZOT_HOME`.
    pub zot_home: PathBuf,
    /// Where the data directories are.
    pub data: PathBuf,
}

impl Places {
    /// `$EXT` is `ext`, `$CWD` is `cwd`.
    pub fn new(ext: &Path, cwd: &Path, zot_home: &Path) -> Places {
        Places {
            ext: ext.to_path_buf(),
            cwd: cwd.to_path_buf(),
            zot_home: zot_home.to_path_buf(),
            data: zot_home.join("data"),
        }
    }
}

/// A private `TMPDIR`: never made in this build.
#[derive(Debug)]
pub(crate) struct PrivateTmp(Infallible);

/// A confinement: never constructed in this build.
#[derive(Debug)]
pub struct Confinement {
    pub(crate) tmp: PrivateTmp,
    /// What it may do, in one line.
    pub summary: String,
    /// Its data directory.
    pub data_dir: PathBuf,
}

impl Confinement {
    /// Always the error that names the feature.
    pub fn new(
        _m: &Manifest,
        _exe: &Path,
        _places: &Places,
        _key: u64,
    ) -> Result<Confinement, String> {
        Err(needs_feature("confinement", "confine"))
    }

    /// Unreachable: no confinement exists.
    pub fn apply_to(&self, _command: &mut Command) {
        match self.tmp.0 {}
    }
}
