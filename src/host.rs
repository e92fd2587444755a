//! The embedder's view: [`Host`] starts the loop thread (`engine`),
//! [`HostHandle`] sends it requests; the blocking calls wait for replies.

use crate::config::HostConfig;
use crate::engine;
use crate::intercept::InterceptOutcome;
use crate::protocol::EventPayload;
use crate::types::{
    CommandOutcome, HostError, HostEvent, InterceptRequest, ReadyLatch, ReloadReport, Reply,
    Request, Snapshot, Ticket, ToolOutcome, ToolRequest,
};
use crossbeam_channel::{Receiver, Sender};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A cheap, cloneable way to send requests from any thread. Every
/// blocking call blocks its caller only.
#[derive(Clone)]
pub struct HostHandle {
    tx: Sender<Request>,
    ready: Arc<ReadyLatch>,
    events_sent: Arc<AtomicU64>,
    tickets: Arc<AtomicU64>,
    spin: Duration,
}

impl HostHandle {
    /// Events put into [`Host::events`] so far. Read inside a reply callback,
    /// it says how many events to take before acting on the reply (SPEC 3.17;
    /// [`crate::order`] does the rest).
    pub fn events_sent(&self) -> u64 {
        self.events_sent.load(Ordering::SeqCst)
    }

    /// Blocks until every extension is ready or failed, or the startup
    /// grace ran out; returns the names of the ready ones.
    pub fn wait_ready(&self) -> Vec<String> {
        self.ready.wait()
    }

    /// Queues a request; after the host stopped it fails at once.
    pub fn submit(&self, request: Request) {
        if let Err(e) = self.tx.send(request) {
            e.into_inner().fail(HostError::Stopped);
        }
    }

    /// A fresh ticket: submit a tool call under it
    /// ([`HostHandle::call_tool_as`], [`Request::Cancellable`]) to be
    /// able to [`cancel`](HostHandle::cancel) it from another thread.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.tickets.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a request and blocks for its reply.
    pub fn call<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, HostError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.submit(make(Box::new(move |r| {
            let _ = tx.send(r);
        })));
        engine::poll_briefly(self.spin, || !rx.is_empty());
        rx.recv().unwrap_or(Err(HostError::Stopped))
    }
}

/// The requests, the same on [`Host`] and [`HostHandle`]: each builds a
/// [`Request`] and hands it to the type's own `call` or `submit`.
macro_rules! request_methods {
    () => {
        /// Runs a slash command (name without `/`).
        pub fn command(&self, name: &str, args: &str) -> Result<CommandOutcome, HostError> {
            let (name, args) = (name.into(), args.into());
            self.call(|reply| Request::Command { name, args, reply })
        }

        /// Runs a tool after its `tool_call` event and interception chain;
        /// a built-in one only gets the verdict and final `args` (SPEC 7).
        pub fn call_tool(&self, call: ToolRequest) -> Result<ToolOutcome, HostError> {
            self.tool(call, true)
        }

        /// Runs a tool directly, without event or interception.
        pub fn call_tool_direct(&self, call: ToolRequest) -> Result<ToolOutcome, HostError> {
            self.tool(call, false)
        }

        /// [`HostHandle::call_tool`], cancellable under `ticket`.
        pub fn call_tool_as(
            &self,
            ticket: Ticket,
            call: ToolRequest,
        ) -> Result<ToolOutcome, HostError> {
            self.call(|reply| Request::Cancellable {
                ticket,
                request: Box::new(Request::Tool {
                    call,
                    pipeline: true,
                    reply,
                }),
            })
        }

        /// Cancels the tool call submitted under `ticket`: it answers
        /// [`HostError::CallCancelled`], and its extension gets `tool_cancel`
        /// when it asked for that (SPEC 13.2). False when nothing under that
        /// ticket runs (finished already, or never submitted).
        pub fn cancel(&self, ticket: Ticket) -> Result<bool, HostError> {
            self.call(|reply| Request::Cancel { ticket, reply })
        }

        fn tool(&self, call: ToolRequest, pipeline: bool) -> Result<ToolOutcome, HostError> {
            self.call(|reply| Request::Tool {
                call,
                pipeline,
                reply,
            })
        }

        /// Asks the guards about an event the embedder is about to act on.
        pub fn intercept(&self, request: InterceptRequest) -> Result<InterceptOutcome, HostError> {
            self.call(|reply| Request::Intercept { request, reply })
        }

        /// Runs `before_agent_start` (SPEC 14.3) on `system_prompt`: every
        /// guard in turn may replace it; returns the prompt after the last.
        /// Answers that cannot be used keep the prompt and come as
        /// [`HostEvent::HostNote`]s before the reply.
        pub fn before_agent_start(&self, system_prompt: &str) -> Result<String, HostError> {
            let payload = EventPayload {
                system_prompt: Some(system_prompt.to_string()),
                ..Default::default()
            };
            let request = InterceptRequest {
                event: crate::intercept::InterceptEvent::BeforeAgentStart,
                payload,
            };
            let outcome = self.intercept(request)?;
            Ok(outcome.system_prompt.unwrap_or_default())
        }

        /// Emits a lifecycle event; returns the subscribers it was queued to.
        pub fn emit(&self, event: &str, payload: EventPayload) -> Result<Vec<String>, HostError> {
            let event = event.into();
            self.call(|reply| Request::Emit {
                event,
                payload,
                reply,
            })
        }

        /// Queues a lifecycle event without waiting, in order with other requests.
        pub fn emit_nowait(&self, event: &str, payload: EventPayload) {
            let (event, reply) = (event.into(), Box::new(|_| {}));
            self.submit(Request::Emit {
                event,
                payload,
                reply,
            });
        }

        /// Forwards a key pressed in `panel_id` to `extension`.
        pub fn panel_key(
            &self,
            extension: &str,
            panel_id: &str,
            key: &str,
            text: Option<&str>,
        ) -> Result<(), HostError> {
            let (extension, panel_id, key) = (extension.into(), panel_id.into(), key.into());
            let text = text.map(str::to_string);
            self.call(|reply| Request::PanelKey {
                extension,
                panel_id,
                key,
                text,
                reply,
            })
        }

        /// Tells `extension` that its panel `panel_id` has `width` columns and
        /// `height` rows (when it opens, and when the screen changes size).
        pub fn panel_resize(
            &self,
            extension: &str,
            panel_id: &str,
            width: u32,
            height: u32,
        ) -> Result<(), HostError> {
            let (extension, panel_id) = (extension.into(), panel_id.into());
            self.call(|reply| Request::PanelResize {
                extension,
                panel_id,
                width,
                height,
                reply,
            })
        }

        /// Tells `extension` its panel `panel_id` was closed.
        pub fn panel_close(&self, extension: &str, panel_id: &str) -> Result<(), HostError> {
            let (extension, panel_id) = (extension.into(), panel_id.into());
            self.call(|reply| Request::PanelClose {
                extension,
                panel_id,
                reply,
            })
        }

        /// Extensions and registries as they are now.
        pub fn list(&self) -> Result<Snapshot, HostError> {
            self.call(|reply| Request::List { reply })
        }

        /// Stops every extension, rediscovers and starts them again.
        pub fn reload(&self) -> Result<ReloadReport, HostError> {
            self.call(|reply| Request::Reload { reply })
        }
    };
}

impl HostHandle {
    request_methods!();
}

impl Host {
    request_methods!();
}

/// A running extension host. Its calls block the calling thread only;
/// [`Host::handle`] gives other threads the same calls. Dropping it shuts
/// it down gracefully.
pub struct Host {
    handle: HostHandle,
    events: Receiver<HostEvent>,
    thread: Option<JoinHandle<()>>,
}

impl Host {
    /// Starts the extensions on a new loop thread; returns at once.
    pub fn start(mut config: HostConfig) -> io::Result<Host> {
        config.make_paths_absolute();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (event_tx, events) = crossbeam_channel::unbounded();
        let handle = HostHandle {
            tx,
            ready: Arc::default(),
            events_sent: Arc::default(),
            tickets: Arc::default(),
            spin: config.spin_before_sleep,
        };
        let (sent, latch) = (handle.events_sent.clone(), handle.ready.clone());
        let thread = std::thread::Builder::new()
            .name("zot-host".into())
            .spawn(move || engine::run(config, rx, event_tx, sent, latch))?;
        let thread = Some(thread);
        Ok(Host {
            handle,
            events,
            thread,
        })
    }

    /// Events put into [`Host::events`] so far ([`HostHandle::events_sent`]).
    pub fn events_sent(&self) -> u64 {
        self.handle.events_sent()
    }

    /// Blocks until every extension is ready or failed, or the startup
    /// grace ran out; returns the names of the ready ones.
    pub fn wait_ready(&self) -> Vec<String> {
        self.handle.wait_ready()
    }

    /// Queues a request; after the host stopped it fails at once.
    pub fn submit(&self, request: Request) {
        self.handle.submit(request)
    }

    /// Sends a request and blocks for its reply.
    pub fn call<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Request,
    ) -> Result<T, HostError> {
        self.handle.call(make)
    }

    /// A fresh ticket ([`HostHandle::ticket`]).
    pub fn ticket(&self) -> Ticket {
        self.handle.ticket()
    }

    /// Unasked events. Notes and panel updates beyond
    /// [`HostConfig::event_budget`] waiting bytes are dropped (counted).
    pub fn events(&self) -> &Receiver<HostEvent> {
        &self.events
    }

    /// A handle for submitting requests from other threads.
    pub fn handle(&self) -> HostHandle {
        self.handle.clone()
    }

    /// Graceful shutdown (SPEC 3.14); returns when every extension is gone.
    pub fn shutdown(self) {
        drop(self)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.call(|reply| Request::Shutdown { reply });
            let _ = thread.join();
        }
    }
}
