//! What the session does with each host event: notes, panels and
//! submissions from extensions, readiness, and their exits and restarts.

use super::jobs::Job;
use super::state::Session;
use zot_host::HostEvent;

impl Session {
    /// Shows a host event, and keeps what the session must know of it.
    pub(super) fn on_event(&mut self, event: HostEvent) {
        match event {
            HostEvent::Ready { extensions } => {
                self.ready = true;
                if extensions.is_empty() {
                    self.out.line("ready: no extensions");
                } else {
                    self.out.line(&format!("ready: {}", extensions.join(", ")));
                }
                self.out
                    .hint("/help lists commands; plain text is a prompt; /quit or Ctrl-D leaves");
            }
            HostEvent::Notify {
                extension,
                level,
                message,
            } => {
                self.out.note(&extension, level.as_str(), &message);
                *self.notes.entry(extension).or_default() += 1;
            }
            HostEvent::HostNote { level, message } => {
                self.out.note("zot", level.as_str(), &message)
            }
            HostEvent::ClearNotes { extension } => {
                let n = self.notes.remove(&extension).unwrap_or(0);
                self.out
                    .line(&format!("notes cleared for {extension} ({n} removed)"));
            }
            #[cfg(feature = "panels")]
            event @ (HostEvent::PanelRender { .. }
            | HostEvent::OpenPanel { .. }
            | HostEvent::PanelClose { .. }) => {
                self.panels.on_event(&mut self.out, &self.host, event)
            }
            #[cfg(feature = "panels")]
            HostEvent::Submit { extension, text } => self.submitted(extension, text, false),
            #[cfg(feature = "panels")]
            HostEvent::SubmitSlash { extension, text } => self.submitted(extension, text, true),
            HostEvent::Registered { extension } => {
                // During /reload-ext the report counts it.
                if !matches!(self.jobs.current(), Some(Job::Reload)) {
                    self.out.line(&format!("registered: {extension}"))
                }
            }
            #[cfg(feature = "tool-extras")]
            HostEvent::ToolsActivated { extension, names } => self.out.line(&format!(
                "tools activated by {extension}: {}",
                names.join(", ")
            )),
            HostEvent::ExtensionExited { extension, status } => {
                self.panels.forget(&extension);
                self.out
                    .error(&format!("extension {extension} exited ({status})"));
            }
            HostEvent::ExtensionFailed { extension, error } => {
                self.panels.forget(&extension);
                if matches!(self.jobs.current(), Some(Job::Reload)) {
                    return; // the reload's report lists it
                }
                self.out
                    .error(&format!("extension {extension} failed: {error}"));
            }
            HostEvent::ExtensionRestarted {
                extension,
                attempt,
                status,
            } => self.out.line(&format!(
                "restarted: {extension} (attempt {attempt}: {status})"
            )),
            HostEvent::EventsDropped { count } => self.out.error(&format!(
                "{count} notes or panel updates dropped: output was not read fast enough"
            )),
            // Never sent: the session's host runs no built-ins.
            #[cfg(feature = "ext-calls")]
            HostEvent::BuiltinCall { .. } => {}
        }
    }
}
