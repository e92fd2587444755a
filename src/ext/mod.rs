//! What an extension is on disk: its manifest (`manifest`), what it
//! ships besides a process (`bundle`), where extensions are found and
//! which run (`discovery`), whether a project's own may run (`trust`),
//! and what a confined one may touch (`permissions`).

#[cfg(feature = "bundles")]
pub(crate) mod bundle;
pub(crate) mod discovery;
pub(crate) mod manifest;
#[cfg(any(feature = "confine", feature = "author"))]
pub(crate) mod permissions;
pub(crate) mod trust;
