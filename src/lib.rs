//! zot-host: a small synchronous host for zot extensions.
pub mod discovery;
pub mod log;
pub mod manifest;
pub mod protocol;
