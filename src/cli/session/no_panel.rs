//! The session's panels in a build without the `panels` feature: none is
//! ever open (the host drops panel frames, docs/PROTOCOL.md#panels), and
//! `/key` says which feature has them. The session's loop stays the same
//! in both builds.

use super::render::Out;
use std::convert::Infallible;
use std::time::Duration;
use zot_host::{HostHandle, Request};

/// The session looks at the terminal's size only while a panel is open:
/// none ever is, so this is never waited for.
pub const SIZE_POLL: Duration = Duration::from_secs(3600);

/// No panels: always empty.
#[derive(Default)]
pub struct Panels {
    _none: (),
}

/// What a `/key` line sends: never made in this build.
pub struct ToPanel(Infallible);

impl ToPanel {
    /// Unreachable: no `ToPanel` exists.
    pub fn request(self, _reply: zot_host::Reply<()>) -> Request {
        match self.0 {}
    }
}

impl Panels {
    pub fn is_empty(&self) -> bool {
        true
    }

    pub fn forget(&mut self, _extension: &str) {}

    pub fn clear(&mut self) {}

    pub fn poll_size(&mut self, _host: &HostHandle) {}

    /// `/key`: says that this build has no panels.
    pub fn key(&mut self, out: &mut Out, _args: &str) -> Option<ToPanel> {
        out.error(
            "/key: panels are not in this build: it needs the `panels` feature \
             (cargo build --release --features panels)",
        );
        None
    }
}
