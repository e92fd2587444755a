//! Panels (docs/PROTOCOL.md#panels) and submits (docs/PROTOCOL.md#submits),
//! in builds with the `panels` feature: an extension's `panel_render`,
//! `panel_close`, `open_panel`, `submit` and `submit_slash` go to the
//! embedder as events; the embedder's keys, sizes and closes go to the
//! extension as frames that expect no answer.

use super::ext::Stage;
use super::requests::Lookup;
use super::Engine;
use crate::types::{HostError, HostEvent, Request};
use crate::wire::protocol::{ExtFrame, HostFrame};
use std::time::Instant;

impl Engine {
    /// A `submit` or `submit_slash` of extension `idx`, checked, then
    /// offered to the embedder.
    pub(super) fn submit_frame(&mut self, idx: usize, frame: ExtFrame) {
        let ext = &mut self.exts[idx];
        let kind = frame.kind();
        // Submits count from `ready` on.
        let ready = !matches!(ext.stage(), Some(Stage::Registering { .. }));
        match frame {
            ExtFrame::Submit { text } | ExtFrame::SubmitSlash { text }
                if text.trim().is_empty() =>
            {
                ext.log.line(&format!("{kind} with empty text: ignored"))
            }
            ExtFrame::Submit { .. } | ExtFrame::SubmitSlash { .. } if !ready => ext.log.line(
                &format!("{kind} before `ready`: ignored (send it after ready)"),
            ),
            ExtFrame::SubmitSlash { text } if !text.starts_with('/') => ext.log.line(&format!(
                "submit_slash text must start with `/`: {:?} ignored (send a prompt with `submit`)",
                crate::wire::protocol::snippet(text.as_bytes())
            )),
            ExtFrame::Submit { text } => {
                self.offer_event(idx, |extension| HostEvent::Submit { extension, text })
            }
            ExtFrame::SubmitSlash { text } => {
                self.offer_event(idx, |extension| HostEvent::SubmitSlash { extension, text })
            }
            // Only the submit frames come here.
            _ => {}
        }
    }

    /// A panel frame of extension `idx`, offered to the embedder.
    pub(super) fn panel_frame(&mut self, idx: usize, frame: ExtFrame) {
        match frame {
            ExtFrame::PanelRender(panel) => {
                self.offer_event(idx, |extension| HostEvent::PanelRender { panel, extension })
            }
            ExtFrame::PanelClose { panel_id } => {
                self.offer_event(idx, |extension| HostEvent::PanelClose {
                    panel_id,
                    extension,
                })
            }
            ExtFrame::OpenPanel(panel) if panel.id.trim().is_empty() => self.exts[idx]
                .log
                .line("open_panel with an empty `panel.id`: not opened"),
            ExtFrame::OpenPanel(panel) => {
                self.offer_event(idx, |extension| HostEvent::OpenPanel { extension, panel })
            }
            // Only the panel frames come here.
            _ => {}
        }
    }

    /// `panel_key`, `panel_resize` or `panel_close` from the embedder,
    /// answered once the frame is on its way.
    pub(super) fn panel_request(&mut self, req: Request, now: Instant) {
        let (sent, reply) = match req {
            Request::PanelKey {
                extension,
                panel_id,
                key,
                text,
                reply,
            } => {
                let (panel_id, text) = (&panel_id, text.as_deref());
                let frame = HostFrame::PanelKey {
                    panel_id,
                    key,
                    text,
                };
                let sent = self.send_to(&extension, frame, now);
                (sent, reply)
            }
            Request::PanelResize {
                extension,
                panel_id,
                width,
                height,
                reply,
            } => {
                let panel_id = &panel_id;
                let frame = HostFrame::PanelResize {
                    panel_id,
                    width,
                    height,
                };
                let sent = self.send_to(&extension, frame, now);
                (sent, reply)
            }
            Request::PanelClose {
                extension,
                panel_id,
                reply,
            } => {
                let frame = HostFrame::PanelClose {
                    panel_id: &panel_id,
                };
                let sent = self.send_to(&extension, frame, now);
                (sent, reply)
            }
            // Only the panel requests come here; another runs as usual.
            other => return self.execute(other, Lookup::Now, now),
        };
        self.answer(reply, sent)
    }

    /// Sends a frame that expects no answer to the extension named
    /// `extension`, if it is serving.
    fn send_to(
        &mut self,
        extension: &str,
        frame: HostFrame,
        now: Instant,
    ) -> Result<(), HostError> {
        let ext = self
            .exts
            .iter_mut()
            .find(|e| e.name == extension && e.serving())
            .ok_or_else(|| HostError::NoSuchExtension(extension.to_string()))?;
        let sent = ext.send(&frame, now);
        sent.then_some(())
            .ok_or_else(|| HostError::NotServing(extension.to_string()))
    }
}
