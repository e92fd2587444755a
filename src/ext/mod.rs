//! What an extension is on disk: its manifest (`manifest`), what it
//! ships besides a process (`bundle`), where extensions are found and
//! which run (`discovery`), and whether a project's own may run
//! (`trust`).

pub(crate) mod bundle;
pub(crate) mod discovery;
pub(crate) mod manifest;
pub(crate) mod trust;
