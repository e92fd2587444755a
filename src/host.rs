//! The embedder's view: [`Host`] starts the loop thread (`engine`),
//! [`HostHandle`] sends it requests; the blocking calls wait for replies.

use crate::config::HostConfig;
use crate::engine;
use crate::intercept::InterceptOutcome;
use crate::protocol::EventPayload;
use crate::types::{
    CommandOutcome, HostError, HostEvent, InterceptRequest, ReadyLatch, ReloadReport, Reply,
    Request, Snapshot, ToolOutcome, ToolRequest,
};
use crossbeam_channel::{Receiver, Sender};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A cheap, cloneable way to send requests from any thread.
///
/// Ordering: everything one extension writes reaches the embedder in
/// the order written (SPEC 3.17). An event is in [`Host::events`] before
/// the reply to a request that the extension answered after it is
/// delivered. Events written after the answer may be there too by the
/// time the consumer sees the reply: a consumer that reads
/// [`HostHandle::events_sent`] inside the reply callback and, before
/// acting on the reply, takes events until it has taken that many in
/// all, keeps the exact order.
#[derive(Clone)]
pub struct HostHandle {
    tx: Sender<Request>,
    ready: Arc<ReadyLatch>,
    events_sent: Arc<AtomicU64>,
    /// [`HostConfig::spin_before_sleep`], for [`HostHandle::call`].
    spin: Duration,
}

impl HostHandle {
    /// Events put into [`Host::events`] so far (see [`HostHandle`] on ordering).
    pub fn events_sent(&self) -> u64 {
        self.events_sent.load(Ordering::SeqCst)
    }

    /// Blocks until startup readiness (see [`Host::wait_ready`]).
    pub fn wait_ready(&self) -> Vec<String> {
        self.ready.wait()
    }

    /// Queues a request; after the host stopped it fails at once.
    pub fn submit(&self, request: Request) {
        if let Err(e) = self.tx.send(request) {
            e.into_inner().fail(HostError::Stopped);
        }
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

/// A running extension host. Dropping it shuts it down gracefully.
pub struct Host {
    handle: HostHandle,
    events: Receiver<HostEvent>,
    thread: Option<JoinHandle<()>>,
}

impl Host {
    /// Starts the extensions on a new loop thread; returns at once.
    pub fn start(config: HostConfig) -> io::Result<Host> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (event_tx, events) = crossbeam_channel::unbounded();
        let handle = HostHandle {
            tx,
            ready: Arc::default(),
            events_sent: Arc::default(),
            spin: config.spin_before_sleep,
        };
        let (sent, latch) = (handle.events_sent.clone(), handle.ready.clone());
        let thread = std::thread::Builder::new()
            .name("zot-host".into())
            .spawn(move || engine::run(config, rx, event_tx, sent, latch))?;
        Ok(Host {
            handle,
            events,
            thread: Some(thread),
        })
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

    /// Blocks until every extension is ready or failed, or the startup
    /// grace ran out; returns the names of the ready ones.
    pub fn wait_ready(&self) -> Vec<String> {
        self.handle.wait_ready()
    }

    /// Runs a slash command (name without `/`).
    pub fn command(&self, name: &str, args: &str) -> Result<CommandOutcome, HostError> {
        let (name, args) = (name.to_string(), args.to_string());
        self.handle
            .call(|reply| Request::Command { name, args, reply })
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

    fn tool(&self, call: ToolRequest, pipeline: bool) -> Result<ToolOutcome, HostError> {
        let request = |reply| Request::Tool {
            call,
            pipeline,
            reply,
        };
        self.handle.call(request)
    }

    /// Asks the guards about an event the embedder is about to act on.
    pub fn intercept(&self, request: InterceptRequest) -> Result<InterceptOutcome, HostError> {
        self.handle
            .call(|reply| Request::Intercept { request, reply })
    }

    /// Emits a lifecycle event; returns the subscribers it was queued to.
    pub fn emit(&self, event: &str, payload: EventPayload) -> Result<Vec<String>, HostError> {
        let event = event.to_string();
        self.handle.call(|reply| Request::Emit {
            event,
            payload,
            reply,
        })
    }

    /// Queues a lifecycle event without waiting, in order with other requests.
    pub fn emit_nowait(&self, event: &str, payload: EventPayload) {
        self.handle.submit(Request::Emit {
            event: event.to_string(),
            payload,
            reply: Box::new(|_| {}),
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
        let (extension, panel_id, key) =
            (extension.to_string(), panel_id.to_string(), key.to_string());
        let text = text.map(str::to_string);
        self.handle.call(|reply| Request::PanelKey {
            extension,
            panel_id,
            key,
            text,
            reply,
        })
    }

    /// Tells `extension` its panel `panel_id` was closed.
    pub fn panel_close(&self, extension: &str, panel_id: &str) -> Result<(), HostError> {
        let (extension, panel_id) = (extension.to_string(), panel_id.to_string());
        self.handle.call(|reply| Request::PanelClose {
            extension,
            panel_id,
            reply,
        })
    }

    /// Extensions and registries as they are now.
    pub fn list(&self) -> Result<Snapshot, HostError> {
        self.handle.call(|reply| Request::List { reply })
    }

    /// Stops every extension, rediscovers and starts them again.
    pub fn reload(&self) -> Result<ReloadReport, HostError> {
        self.handle.call(|reply| Request::Reload { reply })
    }

    /// Graceful shutdown (SPEC 3.14); returns when every extension is gone.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let _ = self.handle.call(|reply| Request::Shutdown { reply });
        let _ = thread.join();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop();
    }
}
