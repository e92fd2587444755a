//! The host loop: one thread that owns every extension, pending request
//! and deadline, and waits for the extensions' frames and the
//! embedder's requests (SPEC 3). The other files add one concern each.
//!
//! # How the host works
//!
//! ```text
//!  embedder / zot rpc / session
//!         │  Request (+ reply callback)          HostEvent (notes, panels, exits)
//!         ▼                                               ▲
//!   ┌─ the thread that runs the loop: one Select, ────────┴──┐
//!   │  timeout = the engine's next deadline                  │
//!   │ registries · pending requests · interception chains    │
//!   └──┬───────────────────────────────▲─────────────────────┘
//!      │ outbox channel (counted)      │ bounded channel: frames, Eof, WriteFailed
//!   writer thread ──► stdin   stdout ──► reader thread (parses)     (per extension)
//!                      extension process (own process group)
//!                      stderr ──► stderr thread ──► $ZOT_HOME/logs/ext-<name>.log
//! ```
//!
//! The code has the same shape, and its imports run one way:
//!
//! - `src/host.rs` is the facade: `Host` runs the loop on its callers'
//!   threads (inline), on the CLI surface's main thread (owned) or on a
//!   loop thread (threaded); its calls and `HostHandle`'s (one macro
//!   defines both) send `Request`s and wait for replies.
//!   It depends on the engine; nothing depends on it.
//! - `src/engine/` is the loop. `driver.rs` owns the one wait, a
//!   crossbeam `Select` over the requests and each extension's channel:
//!   a `Driver` holds the engine, its channels and the extensions'
//!   processes, and `Driver::turn` waits once (until a frame, a request,
//!   the engine's next deadline or the caller's), hands the engine what
//!   came and carries out what it decided, so whichever thread waits for
//!   an answer can run the loop; the host thread runs it until shutdown.
//!   `mod.rs` holds the engine's state; `lifecycle.rs` (start, readiness, exits, stopping), `frames.rs`
//!   (what extensions send), `requests.rs` (what the embedder asks, the
//!   interception chain), `jobs.rs` (tool pipeline runs that can be
//!   cancelled, `call_tool`, SPEC 13), `exposure.rs` (deferred tools),
//!   `oversize.rs` (answers over the frame limit), `time.rs` (deadlines),
//!   `supervise.rs` (restarts, SPEC 12), `mcp.rs` (driving the client of
//!   each MCP server, SPEC 11) and `embedder.rs` (the bounded event
//!   queue) each add one concern, and each names what it imports.
//! - The host's own life is one `HostState` (`state.rs`): `Starting`
//!   (requests held, in order, until every extension is ready or the
//!   startup grace ends), `Running` (requests run; commands and tools
//!   whose name may still come are parked), `Reloading` (waits for what
//!   was accepted, stops every extension, starts them again), `Draining`
//!   (a shutdown waits for what was accepted), `Stopping` (every
//!   extension was sent `shutdown`) and `Done`. Each state holds exactly
//!   its data (held requests, parked ones, the replies owed), and
//!   `Engine::advance`, one `match` on it after each turn, is where the
//!   state moves on by itself.
//! - An extension's life is one `Phase` (in `src/engine/mod.rs`): either
//!   `Running`, with its process, its exit sub-state (`ExitWatch` in
//!   `exit.rs`: the poll for an exit, the drain of its last frames, the
//!   grace after its stdout closed and after a failed write to its
//!   stdin, each from `Timeouts`) and one stage:
//!   `AwaitingHello` (until the hello deadline),
//!   `Registering` (ready after 250 ms of silence unless `ready` comes
//!   first), `Ready`, `Killed` (it failed; its exit is awaited)
//!   or `Stopping` (sent `shutdown`; SIGTERM, then SIGKILL, each at its
//!   time); or `Gone`: disabled, failed or exited, with the time of its
//!   restart while one is pending (SPEC 12). Each phase holds exactly its
//!   own deadline, so the loop sleeps until the earliest of them
//!   (`time.rs`), and only a running extension has a process to write to
//!   or signal.
//! - The engine does no I/O and reads no clock. What it learns comes
//!   in as inputs, each with the time: a request (`Engine::request`),
//!   what an extension's reader sent (`Engine::inbound`: a frame, the
//!   end of its stdout with a look at its process, a failed write), the
//!   extensions a discovery found (`Engine::discovered`), the results of
//!   a batch of starts (`Engine::spawned`) and the pass after each turn
//!   (`Engine::settle`, with a look at each process whose exit it
//!   watches). What it decides is queued as `Action`s (`action.rs`) in
//!   the order decided: discover, write these lines to extension i (one
//!   write per extension and turn), start this batch, close a stdin,
//!   signal a group, reap, call a reply, send a host event, release
//!   `wait_ready`. The driver keeps the processes in a table indexed like
//!   the engine's extensions and carries the actions out in that order,
//!   so a reply comes after the events decided before it (SPEC 3.17),
//!   and an exited extension is reaped (its log complete) before what
//!   waited on it fails. The file system is the driver's too: it
//!   discovers (reading the manifests and the trust store, at the first
//!   startup and at each reload once every extension stopped), says the
//!   trust notices on stderr, opens the log files, resolves `exec` on
//!   `$PATH` and builds the confinement; a start that cannot be prepared
//!   comes back as a failed start, with the same message. So the rules
//!   above are tested with made-up times, manifests found in memory and
//!   no processes: feed inputs, look at the actions (`state.rs`,
//!   `exit.rs`, `supervise.rs`, `rules.rs`). One sink stays injected:
//!   each extension's log (`ExtLog`, opened by the driver), which the
//!   engine writes its `[zot]` lines to. They are diagnostics in no
//!   order with anything else, one line of text each, written from the
//!   extension's own threads and the MCP client too; as actions they would cost
//!   an allocation and a hand-over per line for nothing a test asserts.
//!   And it reads one counter the process layer updates: the bytes an
//!   extension's writer thread has not written yet (`Backlog`), which
//!   bounds the events queued to a subscriber that stops reading.
//! - `src/config.rs` (`HostConfig`, `Timeouts`) and `src/types.rs`
//!   (requests with their replies, outcomes, `HostEvent`, `Snapshot`,
//!   `HostError`) are plain data shared by the facade and the engine; they
//!   depend on neither. `zot_host::*` re-exports them.
//! - Every request sent to an extension and not answered yet is one entry
//!   in one table, `src/engine/pending.rs` (the shape of lsp-server's
//!   `req_queue.rs`): registered under a fresh id with its extension, its
//!   deadline and its `Waiter` (the embedder's reply, or the interception
//!   chain and position of a guard); taken by (extension, id, kind) when
//!   the answer comes, so an answer with a wrong id or from the wrong
//!   extension is dropped and logged without touching the entry; taken
//!   when it expires; failed all at once when its extension exits or fails,
//!   or on a reload or a shutdown that does not wait. `Waiter::fail` is
//!   the only way an exchange fails. In `requests.rs` each exchange sits
//!   whole: `command_invoked` with `command_response`, `event_intercept`
//!   with its response, and the timeouts; a tool call is a job of
//!   `jobs.rs` from its `tool_call` event to its result.
//! - Below the loop: `process.rs` (one extension process with its
//!   reader, writer and stderr threads; it knows nothing of MCP: an MCP
//!   server's stdout is handed over as lines), `spawner.rs` (starting a
//!   batch of them), `sys.rs` (the raw libc calls: a signal to a process
//!   group, the parent-death signal), `protocol.rs` (frames), `mcp_client.rs` (the MCP client, SPEC 11,
//!   no I/O: the loop hands it lines, frames and the time) and `jsonrpc.rs` (its messages, shared with `zot
//!   mcp`), `registry.rs`, `intercept.rs`, `discovery.rs`,
//!   `manifest.rs`, `log.rs`, `trust.rs` (SPEC 15), `confine.rs`
//!   (SPEC 16), `bundle.rs`. The CLI is `src/cli/`.
//! - Every CLI surface (the session, `zot rpc`, `zot mcp`, `zot ext
//!   install`, `zot ext check`) takes SIGINT, SIGTERM and SIGHUP through
//!   the `ctrlc` crate (`cli::on_signal`), which calls the surface's
//!   callback on a thread of its own without saying which signal it was:
//!   each surface treats the three alike.
//!   The session, `zot rpc` and `zot mcp` run the host loop on their main
//!   thread (`zot_host::internal::surface`: an owned host, `host.rs`),
//!   whose own channel the loop's one wait (`Driver::turn_with`) selects
//!   on with the rest, so that it also ends for it;
//!   their stdin reader and signal handler only submit, and stdout is
//!   written by a thread of its own (`src/cli/stdout.rs`; `zot mcp` has
//!   its writer), so a client that stops reading never stops the loop.
//!   The session's host commands (`/help`, `/quit`...) are defined once, in
//!   `src/cli/session/mod.rs`; every surface reserves them through
//!   `HostConfig::builtin_commands`, which the library leaves empty. The
//!   session waits for one job at a time, kept by id in
//!   `src/cli/session/jobs.rs`; each reply carries the code for its answer.
//!   The session and `zot rpc` put replies and host events back in the
//!   host's order (SPEC 3.17) through one module, `src/cli/ordered.rs`.
//!
//! - **Discovery and precedence.** `-e/--ext PATH` in the order given, then
//!   `./.zot/extensions/*` sorted by directory name, then
//!   `$ZOT_HOME/extensions/*` sorted. The first manifest with a name claims
//!   it; later copies are not started (logged in that extension's log).
//!   A disabled winning copy disables the name. `--no-ext` skips the two
//!   directories. Hidden directories (`.name`) are skipped. Project
//!   extensions start only once trusted (README: Security model).
//! - **`$ZOT_HOME`**: `$ZOT_HOME`, else `$XDG_STATE_HOME/zot` (any platform), else
//!   `~/.local/state/zot` (Linux), `~/Library/Application Support/zot` (macOS).
//! - **Processes.** `exec` absolute as-is, containing `/` relative to the
//!   manifest, bare names from `$PATH`; no shell. The child runs in its
//!   extension directory as the leader of its own process group. Its stderr
//!   and the host's `[zot] <UTC timestamp>` diagnostics go to
//!   `$ZOT_HOME/logs/ext-<name>.log` (rotated to `.log.1` at 8 MiB, when
//!   the extension starts and while it runs).
//! - **Handshake.** The first frame must be `hello` with a non-empty name,
//!   within 10 s; otherwise the extension is marked failed (`no hello within
//!   10 s`, `exited before hello (exit code N)`, `closed its stdout before
//!   hello`, ``first frame was `x`, expected `hello` ``), its process group
//!   killed, and the rest of the host goes on. Lines that are not JSON are logged and skipped even
//!   before `hello`. `hello_ack` is sent at once and carries
//!   `protocol_version`, `zot_version`, `provider`, `model`, `cwd`,
//!   `extension_dir` and `data_dir`.
//! - **Ready.** On the `ready` frame, or 250 ms after the last frame when an
//!   extension never sends one (logged), or when it exits. Startup waits
//!   for all, at most 3 s (`--startup-timeout SECS` or `ZOT_STARTUP_TIMEOUT`
//!   on `zot`, `zot rpc` and `zot mcp`); late extensions keep loading and
//!   announce themselves with a `registered` event. Every request that
//!   arrives during startup or a reload (`list` included) is held in order
//!   and runs once it is done. A command or tool name that is unknown while
//!   some extension is still starting (no `hello` yet, or registering) waits
//!   until none is (at most the hello timeout) and is then looked up again,
//!   so `printf '/cmd\n' | zot -e slow-npx-ext` works however long `npx`
//!   takes to say hello. Such a request also waits while an extension that
//!   was never ready is restarted after missing its hello limit (each
//!   restart gives it its hello limit again); an error that does come says
//!   why (`extension scratchpad failed: no hello within 10 s`). A reload
//!   stops extensions as a shutdown does: requests already accepted finish
//!   first (later ones are held for after it), and an extension that has
//!   not said `hello` has nothing to finish: it is stopped at once
//!   (SIGTERM), on reload and shutdown alike, not at its hello deadline.
//! - **Bad input never ends a stream.** Invalid JSON, a missing or unknown
//!   `type`, a wrong-typed field that the frame's type uses (other fields
//!   are ignored), lines over 16 MiB, responses with unknown
//!   or already-answered ids: each is dropped with one line in the
//!   extension's log naming the reason.
//! - **Registries.** A command or tool belongs to its highest-precedence
//!   registrant whatever the arrival order; built-in names always win
//!   (host commands; tools `read write edit bash skill`). Shadowing is
//!   logged in the shadowed extension's log. Names must be non-empty and
//!   without whitespace; a tool `schema`, when present, must be an object.
//! - **Exits.** An extension that exits is reaped (noticed at stdout EOF,
//!   or by a liveness check every 100 ms while answers are awaited and
//!   every second otherwise, for when a grandchild keeps stdout open). Frames
//!   it wrote before it exited are delivered first: an exit found by that
//!   check waits for the stdout EOF. While something (a child) can still
//!   write to that stdout (its reader has not met the EOF), the wait ends
//!   after 250 ms of silence or 2 s in all, so a child that keeps writing
//!   does not hold the exit off. Then every request pending on
//!   it fails at once with `extension <name> exited (exit code N)` (or
//!   `signal N`), its guards count as allow (or block, for a guard that
//!   fails closed), its names leave the registries,
//!   anything left in its process group is killed, and the embedder gets
//!   `extension_exited`. A crash is then followed by a restart (see
//!   Supervision).
//! - **Timeouts** (all in `zot_host::Timeouts`): command 30 s, tool 60 s,
//!   each intercept 5 s (SPEC 8; timeout = allow), hello 10 s, startup 3 s,
//!   shutdown grace 2 s, then SIGTERM to the process group, SIGKILL 1 s later;
//!   and the graces of an exit (see Exits, a mute and a deaf extension):
//!   `eof_before_hello` 100 ms, `eof_after_hello` 2 s, `exit_silence`
//!   250 ms, `exit_drain` 2 s, `stdin_closed` 2 s. The CLI sets all five
//!   from `$ZOT_EXIT_GRACE` (seconds), so exit tests need not wait them out,
//!   `restart_backoff` (500 ms) from `$ZOT_RESTART_BACKOFF`, and an MCP
//!   server's `server/discover` limit `mcp_probe` (3 s) from
//!   `$ZOT_MCP_PROBE_TIMEOUT`, the guards' answer limit for an
//!   intercepted event (SPEC 3.8) from `$ZOT_INTERCEPT_TIMEOUT`, and both
//!   graces of a stop (`shutdown_grace`, `term_grace`) from
//!   `$ZOT_SHUTDOWN_GRACE`.
//! - **Shutdown** (`Host::shutdown`, rpc `shutdown` or EOF, the session's
//!   end, Ctrl-C/SIGTERM): requests already accepted finish first, each
//!   within its own timeout (an extension built on upstream's SDKs exits on
//!   `shutdown` without waiting for its handlers, so stopping it earlier
//!   would lose their answers); requests after that are refused with
//!   `the extension host is shutting down`; a second Ctrl-C
//!   (`Request::ShutdownNow`) skips the wait and fails them at once. Then
//!   every extension is sent `shutdown` in parallel, after every event
//!   already queued to it; stdin closes after its `shutdown_ack` or exit;
//!   holdouts get SIGTERM then SIGKILL to the whole process group. Every
//!   child is reaped and nothing of its group survives: about 3 s worst
//!   case after the last request, however many extensions there are. (A
//!   grandchild that leaves the group with `setsid` escapes this; run under
//!   a sandbox if that matters.)
//!
//! ## Tools, events and interception
//!
//! - **Tool pipeline** (`Host::call_tool`, `zot rpc` `tool_call`, the
//!   session's `/call`): the `tool_call` event goes to subscribers, then the
//!   interception chain runs, then the owning extension gets `tool_call`
//!   with the (possibly rewritten) args, `{}` when none. A block returns an
//!   error result whose text is the reason (`blocked: true`). A built-in
//!   tool name (`read write edit bash skill`) gets the same event and
//!   guards and is not executed (the embedder runs it): the outcome is a
//!   `ToolOutcome::Builtin` verdict, run with the final `args` or blocked
//!   with a `reason` (over rpc `builtin: true`, `blocked`, `reason`, `args`).
//!   `Host::call_tool_direct` skips event and chain.
//! - **Results**: text blocks and image blocks (`mime_type` + base64 `data`,
//!   validated) are kept; an invalid image or an unknown block type becomes
//!   an `error: ...` text block, and an invalid image makes the result
//!   `is_error` (as upstream); empty text blocks are dropped; no blocks become
//!   `(extension returned no content)`. `is_error` is kept and the owning
//!   extension's name is attached.
//! - **Events**: `subscribe.events` takes any names; `Host::emit` queues one
//!   serialised frame to every subscriber's writer queue, so each sees
//!   events in emission order and all of them before its `shutdown`. A
//!   subscriber that stops reading does not slow anyone: once more than
//!   `event_queue_limit` bytes (16 MiB) wait for it, further events to it
//!   are dropped and counted in its log.
//! - **Interception** (`tool_call`, `turn_start`, `assistant_message`; other
//!   names under `intercept` are ignored and logged): the outcome is that of
//!   asking the guards one after another in precedence order (first block
//!   wins with its reason; `modified_args` / `replace_text` chain, each later
//!   guard deciding on the rewritten value). To bound the stall the host
//!   asks all guards at once and walks their answers in order; when a guard
//!   rewrites, the guards after it are asked again. Each round has one 5 s
//!   deadline, so three silent guards cost 5 s, not 15 s. A guard that times
//!   out, has exited or cannot be written to counts as allow, unless its
//!   manifest says `"guard_failure": "block"` (see Supervision).
//!
//! ## Order and memory bounds
//!
//! - **Order.** Everything one extension writes (notes, panels, the answers
//!   to requests) reaches the embedder, the rpc client and the session in
//!   the order written. In the library an event is in `Host::events()`
//!   before the reply that the extension wrote after it is delivered; events
//!   written after the answer may be waiting too. For the exact order, read
//!   `HostHandle::events_sent()` inside the reply callback (it runs on the
//!   host loop) and take events until you have taken that many before
//!   acting on the reply (`zot rpc` and the session do exactly that, so a
//!   note written after an answer is printed after it).
//! - **Memory stays bounded whatever an extension does and whoever stops
//!   reading:**
//!   - *From extensions:* each reader sends on a bounded channel (64
//!     messages). When the loop falls behind (or no thread runs it), the
//!     reader waits in its send, the extension's stdout socket fills and
//!     the extension blocks in its write: backpressure, not memory. A line
//!     longer than 16 MiB is skipped and logged, never kept.
//!   - *To the embedder:* notes and panel updates wait in `Host::events()`
//!     within `HostConfig::event_budget` bytes (8 MiB). Beyond it they are
//!     dropped and counted: one line in that extension's log when dropping
//!     starts and ends, and a `HostEvent::EventsDropped { count }` (rpc
//!     event `{"type":"events_dropped","count":N}`, a session line) with
//!     the next event that gets through. Lifecycle events and responses
//!     are never dropped.
//!   - *To extensions:* events wait within `event_queue_limit` bytes per
//!     subscriber (16 MiB), beyond it dropped and counted in its log.
//!   - *MCP servers:* what waits for a server's stdin has the same 16 MiB
//!     bound; while more waits its stdout is not read (logged once), so a
//!     server that floods requests (`ping`, `roots/list`...) without
//!     reading blocks in its own write. A paged `tools/list` or
//!     `prompts/list` keeps only what is registered and stops at the
//!     registration caps below (logged), or after 1000 pages; at most 100
//!     notes sent before its handshake ends are kept.
//!   - *`zot rpc` and `zot mcp`, two bounds:* answers wait for stdout
//!     within 8 MiB; only while more waits is stdin not read (the client
//!     is not reading; stderr says so once). At most 256 requests are
//!     served at once; beyond that a request is answered at once with an
//!     error (`too many requests in flight`; MCP code -32000) and stdin is
//!     still read, so notifications, `ping` and cancellations are always
//!     handled. `zot mcp` notes that find 8 MiB waiting are dropped and
//!     counted on stderr, never answers; at most 100 notes wait for
//!     `notifications/initialized` and 64 listen streams are open. A
//!     request line longer than 16 MiB gets an error.
//!   - *The session (`zot`):* input lines are read only while fewer than
//!     64 lines (1 MiB) wait to run, so a fast pipe stays in the pipe; notes
//!     are counted per extension (for `/clear`), not kept.
//!   - *Registrations:* at most 10,000 commands, 10,000 tools and 10,000
//!     event subscriptions per extension, and at most 16 MiB of each kind
//!     (names, descriptions and schemas, counted as they sit in memory);
//!     the excess is ignored and logged. An MCP server's tool or prompt
//!     that leaves its list gives its share back.
//!     `subscribe` costs linear time whatever the number of names.
//!   - *`zot ext check`:* the stderr tail it shows is read from the last
//!     64 KiB of the log.
//! - **Exits are final.** Nothing an extension wrote is applied after its
//!   exit was handled: frames still queued from its reader are dropped, so
//!   a dead extension never owns a name.
//!
//! # Performance design
//!
//! What `make bench` measures, and the choices behind its figures.
//!
//! **How to read the latency lines.** `make bench` runs every scenario
//! unpinned, `make bench-pinned` all of it (bench, host threads,
//! extensions, floor) pinned to one CPU. Unpinned, waking a thread that
//! sleeps on the other CPU dominates every hand-over, for the host and
//! for the floor's two processes alike. Pinned, every hand-over is a
//! context switch, and the figures show the shape's own cost.
//!
//! **What a call costs pinned.** The floor is two processes
//! ping-ponging over pipes: two context switches per exchange. A call
//! through the host crosses caller -> writer thread -> extension ->
//! reader thread -> caller: the shape's threads are hand-overs the floor
//! does not have, and that is the limit the design accepts. The loop's
//! own work per call is the frame's serialization, the engine's
//! bookkeeping and the reply; the reader parses the answer on its own
//! thread. A tool's content blocks are read into `toolresult::Block`s
//! and handed over as [`crate::Content`], not as JSON objects (`Value`):
//! an object hashes each key it holds and is looked up by hash.
//!
//! **What startup20 times.** Mostly the extensions' own start: glibc's
//! start-up on a virtual machine traps to the hypervisor on each of its
//! CPUID instructions, so `make bench-ext` builds the bench extension
//! static for musl. The host's part per extension is three socket
//! pairs, the spawn, its log's open and its threads (reader, writer,
//! stderr), and a batch of starts tells the watchdog (`watchdog.rs`)
//! its groups in one write: the watchdog's `sh` reads its input a byte
//! at a time. `posix_spawn` holds its thread while the child execs
//! (vfork), hence several spawning threads.
//!
//! **What keeps it fast.**
//! - The loop drains what is already waiting (up to 256 messages, a few
//!   from each source in turn) before handing frames to the writers, so a
//!   burst costs one write per extension. `Host::emit_nowait` emits
//!   bursts without waiting for an answer per event (events20 uses it;
//!   `emit` still answers with the recipients).
//! - The loop waits in one crossbeam `Select`, which tries its channels
//!   and backs off briefly before it parks; no spin of the host's own.
//!   An idle host sleeps until its next deadline (the liveness check,
//!   once a second).
//! - Frames are parsed on each extension's reader thread as they are
//!   read: one pass splits the line into its fields' texts, borrowed from
//!   the line (no map, no key copied), then only the fields the frame's
//!   type uses are parsed. An event nobody subscribes to is not
//!   serialized, and a tool's text block that is already in its final
//!   shape is kept as it came.
//! - Small buffers, 64 KiB stacks for the writer and stderr threads and
//!   512 KiB for the reader (it parses). Most of the RSS with 20
//!   extensions is code pages (glibc, the binary: RSS follows the
//!   binary's size), the rest mostly thread stacks and glibc's
//!   per-thread malloc arenas; the static musl binary has no per-thread
//!   arenas and needs less.
//! - `make static` builds with stable musl at opt-level z, non-PIE,
//!   stripped. `make static STATIC_NIGHTLY=yes` tries a nightly
//!   `-Z build-std` build first (smaller; unstable flags).
//!
//! **Where the static binary's bytes go.** The minimal build
//! (`--no-default-features`, at 1,142,808 bytes: .text 973 KB, .rodata
//! 163 KB, 63 KB of it strings) by `cargo bloat` with v0 symbol names,
//! each function counted under the first crate path in its name past
//! `core`, `alloc` and `std` (std's generic code made for the crate's
//! types counts under the crate's module, a dependency's under the
//! dependency):
//!
//! | KiB | what |
//! |----:|------|
//! | 190 | std's panic-time backtrace printer: gimli, addr2line, demangler, miniz_oxide, libunwind |
//! | 128 | the rest of std: `Command::spawn` and its env maps 16, stack-overflow handler 9, cgroup quotas 3.4, `to_lowercase` 2.9, fs, fmt |
//! | 118 | `engine`: `frame` 19, `Driver::act` 16, `register` 8, `settle` 7 |
//! | 80 | `zot ext`: `run` 44 (list, install, remove, enable, logs inlined into it), `doctor` 19 |
//! | 80 | the session 51, `zot rpc` 30 (its stdin thread 12) |
//! | 42 | `types`, `protocol` (`parse_ext_frame` 14) |
//! | 23 | `trust`: the record's two nested `BTreeMap`s 10 |
//! | 18 | `manifest` (`parse_text` 10, `RawManifest`'s derive inlined) |
//! | 48 | crossbeam: 10 element types, each instantiating all three flavors (2-6 each) |
//! | 39 | serde_json 34, serde 5 |
//! | 57 | the rest of the library: `host` 13, `registry` 8, `process` 8, `spawner` 8, `discovery` 6 |
//! | 19 | `main` and option parsing |
//! | 28 | small dependencies: hashbrown 12, memchr, lexopt, indexmap, landlock, nix, dirs, ctrlc |
//! | 75 | musl, compiler builtins, outlined instruction sequences |
//!
//! With nothing of the crate in it, a program that starts a thread and a
//! process, lists a directory and prints is about 368 KB: 1,000,000 leaves
//! 632 KB above it, the minimal zot takes about 775 KB. No further flag
//! helps on stable (minimal build, bytes): lld's `-O2` -192 (kept: it
//! merges strings that end another), `-inline-threshold=0` +768, three
//! machine-outliner reruns +640, `-force-attribute=minsize` for std's
//! code -64, `-z norelro` -1,440
//! (not taken: RELRO guards the GOT and init arrays). The
//! printer is reached from std's default panic hook whatever the hook
//! set at run time; only `-Z build-std` with `panic_immediate_abort`
//! (nightly) leaves it out. The rest is the crate's own code, already
//! written for size where that kept it readable (frames by borrowed field
//! texts, rpc replies and events serialized straight to bytes, float
//! parsing through serde_json's parser; no u128 is formatted, which
//! would link its own formatter: -1,216; `open_panel` decoded from a
//! `Value` only: -4,096; `HostHandle::call` with one `()` channel for every
//! reply type: -8,000). Reading JSON text through serde_json's byte reader
//! everywhere saves only 640: serde_json's `raw_value` feature reads text
//! itself.
//!
//! # Hostile extensions and input
//!
//! An extension is someone else's program, and an rpc client may send
//! anything. Limits that keep the host up whatever they do:
//!
//! - **Nesting depth.** A frame, an rpc request line or a manifest that
//!   nests arrays and objects deeper than 64 levels
//!   (`protocol::MAX_DEPTH`) is refused before it is parsed: the
//!   frame is dropped with `dropped frame (nested deeper than 64 levels)`
//!   in the extension's log, the rpc line gets a `parse` error response,
//!   the manifest is invalid. A one-pass, non-recursive scan does the
//!   check, so a million-level line costs one pass; every value inside the
//!   host is then at most 64 deep, which the threads' stacks are sized for
//!   (the readers', which parse, 512 KiB).
//! - **Disk.** The child's stderr reaches its log through the
//!   extension's stderr thread (`process.rs`), and the log rotates to `.log.1` before any
//!   write that would take it past the limit, also while the extension
//!   runs: one extension's logs stay under 2 x 8 MiB however much it
//!   writes (`HostConfig::log_rotate_bytes` sets the limit). The host's own
//!   `[zot]` lines quote at most 4 KiB of what an extension sent (a 16 MiB
//!   hello name is cut, with `... (N more bytes)`), so they stay within
//!   that bound too.
//! - **An `exec` that cannot run** fails with the reason, not exec(2)'s
//!   bare errno (which blames the file for a missing `#!` interpreter):
//!   `cannot start <path>: it is a directory`, `...: it is not executable`,
//!   `...: the interpreter on its #! line was not found`, or for a binary
//!   built for another libc `...: its dynamic loader was not found (built
//!   for another system?)`; a relative path (from a relative `$PATH` entry)
//!   that is not there from the extension's directory, where it runs, says
//!   `...: a relative path, and the extension runs in its directory ...`.
//!   An embedder's relative `HostConfig` paths (`ext_paths`, `cwd`,
//!   `zot_home`) are made absolute when the host starts.
//! - **A mute extension.** One that closes its stdout after `hello` but does
//!   not exit within 2 s can never answer again: it is failed with `closed
//!   its stdout but did not exit`, its process group is killed, whatever
//!   waits on it fails at once with `extension <name> exited (killed:
//!   closed its stdout but did not exit)` instead of at its timeout, and it
//!   is restarted like a crash (see Supervision). Before `hello` the grace
//!   is 100 ms (`closed its stdout before hello`).
//! - **A deaf extension.** One that closes its stdin: the write that fails
//!   is logged (`cannot write to stdin`), its guards count as unavailable
//!   at once, new requests are refused (`extension <name> is not accepting
//!   input`), and those already sent fail with the same error 2 s after
//!   the failed write, unless answered first, instead of at their timeout.
//!   When it has exited by then (an exiting process closes its stdin
//!   before its stdout), its exit decides instead: the answers its
//!   reader still reads from its stdout are delivered first. It is not killed: it may still send notes.
//! - **Terminal escapes.** The session shows the control characters in
//!   what extensions send (notes, displays, panels, descriptions, tool
//!   results) instead of writing them: `^[`, `^M` (caret notation) for C0
//!   and DEL, `\u{9b}` for C1; tabs are kept. So an extension cannot move
//!   the cursor over earlier lines, overwrite a line's `[ext] info:`
//!   prefix, retitle the window or write the clipboard (OSC 52). The same
//!   goes for text zot prints from an extension's files: a directory name
//!   (a cloned project may hold `.zot/extensions/<ESC>[2J`) or manifest
//!   field quoted in a startup `[zot]` line on stderr (`zot`, `zot rpc`,
//!   `zot mcp`), in any `zot: ` error, in the `zot ext list` table (tabs
//!   as spaces there), or in what `zot ext install`, `enable`, `disable`,
//!   `remove` and `check` print. One function does it everywhere,
//!   `log::inert`. `zot rpc` and `zot mcp` write JSON, for
//!   programs: C0 characters arrive escaped (`\u001b`), DEL and C1 as they
//!   are (valid JSON). `zot ext logs` prints the log as written, the
//!   extension's stderr included, like `cat`; so does an extension whose
//!   log cannot be opened (`zot: cannot open log ...`): its stderr is then
//!   zot's stderr, as written, while the host's `[zot]` lines about it
//!   are still made inert.
//! - **The host's death.** A watchdog covers every extension's process
//!   group: one `/bin/sh` process per host process, in its own process
//!   group, that reads group ids from a pipe only the host holds; when the
//!   host dies (SIGKILL, abort) the pipe reaches end of file and the
//!   watchdog SIGKILLs every group still listed, extensions included. (A
//!   grandchild that leaves the group with `setsid` is out of reach.)
//!   Without `/bin/sh`, each extension is started with `PR_SET_PDEATHSIG` =
//!   SIGKILL (Linux) instead, so it still dies with the host. The kernel
//!   sends that signal when the *thread* that spawned the child ends,
//!   which is why extensions are spawned only from the host's spawning
//!   threads (`src/spawner.rs`, several at a time on more than one CPU):
//!   they outlive them all, whichever thread runs the loop (inline, the
//!   embedder's). (It is not set when the watchdog runs: it needs
//!   a hook before exec, which makes the host fork instead of using
//!   `posix_spawn`, and that multiplied startup20 on a busy machine.)
//! - **No leak per reload.** An extension's stdin, stdout and stderr are
//!   socket pairs: when the extension has been reaped the host shuts its
//!   ends down, which wakes its reader, writer and stderr threads even
//!   if an escaped grandchild still holds the other ends, and joins them.
//!   Descriptors and threads stay flat across reloads.
//! - **`zot ext check` on a flood.** The stderr tail shown on a failure is
//!   read from the last 64 KiB of the log, so 100 MB of stderr costs the
//!   check nothing; registrations past the host's caps (10,000 names or
//!   16 MiB per kind) are one warning, as the host ignores them.
//! - **`zot ext check` on a busy machine.** The startup-grace warning is
//!   only for names that arrive after the grace (the host's startup goes
//!   on without them); a late `ready` alone is a pass that says the time.
//!
//! `tests/hostile.rs` drives each of these against the real binary;
//! `tests/hostile.rs` also feeds seeded random and mutated lines (invalid
//! UTF-8, NULs, deep nesting, huge numbers, truncations, CRLF, BOM) to the
//! frame reader through a real extension and to `zot rpc`, and checks that
//! every request line gets exactly one response and the host still answers.
//! Its seed is fixed; `ZOT_FUZZ_SEED=N cargo test --test hostile random` tries
//! another, and a failure prints the seed. `tests/hostile_inputs.rs` plays
//! the hostile client and user: an MCP client that stops reading during a
//! flood of notes, clients that close stdout, reused and oddly typed ids,
//! lines over 16 MiB, a flood of listen streams, two Ctrl-Cs, broken
//! symlinks and NULs in manifests, a relative `ZOT_HOME` or one that is a
//! file, escape sequences in extension directory names and manifest
//! fields. `tests/hostile.rs` plays more hostile extensions
//! (`fixtures/hostile2/`): megabyte strings the host quotes in its log,
//! an extension that closes its stdout or its stdin and runs on, one that
//! stops itself (SIGSTOP) mid-call, one that registers hundreds of
//! megabytes, an MCP server whose tool list churns, escape sequences meant
//! for the user's terminal, a flood of renders of a closed panel,
//! an `exec` that cannot run, and a crash loop, whose backoff must cost the
//! host no CPU (measured in `/proc`).

mod action;
mod driver;
mod embedder;
mod exit;
mod exposure;
mod frames;
mod jobs;
mod journaled;
mod lifecycle;
mod mcp;
mod oversize;
mod pending;
mod requests;
#[cfg(test)]
mod rules;
mod state;
mod supervise;
mod time;

use crate::config::HostConfig;
use crate::discovery::Scope;
use crate::intercept::{Chain, InterceptEvent};
use crate::log::ExtLog;
use crate::manifest::Manifest;
use crate::mcp_client::McpClient;
use crate::protocol::HostFrame;
use crate::registry::Registry;
use crate::types::{
    CommandInfo, ExtensionInfo, ExtensionState, HostError, HostEvent, InFlight, NameConflict,
    NameKind, ReadyVia, Reply, Request, Snapshot, ToolInfo,
};
use action::{Action, Probes};
use crossbeam_channel::Sender;
use embedder::EventQueue;
use exit::ExitWatch;
use pending::Pending;
use requests::Then;
use state::HostState;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use supervise::Supervision;

/// The caps on what one extension registers, shared with
/// `zot ext check`.
pub(crate) use crate::registry::{MAX_NAMES, MAX_NAME_BYTES};

/// Where an extension is in its life (SPEC 3.5, 3.13-3.15, 12). Each
/// phase owns its deadline; only a running one has a process.
enum Phase {
    /// The driver is starting its process (within the turn that asked),
    /// or found it cannot (its `exec` or confinement).
    Spawning,
    Running(Run),
    /// No process: how it ended, and when it restarts after a crash.
    Gone {
        end: End,
        restart_at: Option<Instant>,
    },
}

/// A running extension as the engine sees it: its process is the
/// driver's (`action.rs`), at the same index.
struct Run {
    pid: u32,
    /// Its stdin takes lines: not closed, no write to it failed.
    stdin_open: bool,
    /// Bytes its writer thread has not written yet.
    backlog: action::Backlog,
    /// For an MCP server (SPEC 11): its client, which every frame to it
    /// and every line from it goes through.
    mcp: Option<Box<McpClient>>,
    /// The deadlines that find its exit.
    exit: ExitWatch,
    /// Confined, its data directory (else `data_dir` is its directory).
    data_dir: Option<PathBuf>,
    stage: Stage,
}

enum Stage {
    /// Failed at `deadline` without `hello` (or when its stdout closed).
    AwaitingHello {
        deadline: Instant,
    },
    /// Said hello: ready at `ready_at` (silence) unless `ready` comes first.
    Registering {
        ready_at: Instant,
    },
    Ready,
    /// Failed (its handshake) and killed: its exit is awaited.
    Killed(String),
    /// Sent `shutdown`; `signal` goes to its group at the time given
    /// (SIGTERM, then SIGKILL). `hello`: its frames still count.
    Stopping {
        hello: bool,
        signal: Option<(Instant, libc::c_int)>,
    },
}

enum End {
    Disabled,
    /// Skills and a theme only (SPEC 14.6): nothing to start.
    Bundle,
    /// A project extension not trusted (SPEC 15): why, and how to trust it.
    Untrusted(String),
    Failed(String),
    Exited(String),
}

impl End {
    /// Why it failed, how it exited, or why it is not trusted.
    fn detail(&self) -> Option<&String> {
        match self {
            End::Untrusted(why) | End::Failed(why) | End::Exited(why) => Some(why),
            End::Disabled | End::Bundle => None,
        }
    }
}

struct Ext {
    name: String,
    version: Option<String>,
    scope: Scope,
    dir: PathBuf,
    phase: Phase,
    log: ExtLog,
    /// Observed events in subscription order, and as a set for lookups.
    events: Vec<String>,
    event_set: HashSet<String>,
    /// Bytes of those names, against [`MAX_NAME_BYTES`].
    event_bytes: usize,
    intercept: Vec<InterceptEvent>,
    commands_claimed: Claims,
    tools_claimed: Claims,
    /// Events its full stdin queue did not take.
    dropped_events: Drops,
    /// Notes and panel updates the embedder did not take in time.
    dropped_notes: Drops,
    /// Frames queued during this loop iteration.
    out: Vec<u8>,
    /// What it was started from (`None` when invalid): restarts reuse it.
    manifest: Option<Manifest>,
    /// Crashes and remembered guard subscriptions.
    supervision: Supervision,
    /// How this run became ready.
    ready_via: Option<ReadyVia>,
    /// Names it registered that a built-in owns, each once: `(kind, name)`.
    lost_to_builtin: Vec<(NameKind, String)>,
    /// Its hello listed `tool_cancel` / `call_tool` (SPEC 13.1).
    tool_cancel: bool,
    call_tool: bool,
}

/// Names one extension claimed in a registry, against [`MAX_NAMES`] and
/// [`MAX_NAME_BYTES`].
#[derive(Default)]
struct Claims {
    count: usize,
    bytes: usize,
    /// The cap was hit (logged once).
    capped: bool,
}

/// Messages dropped for one extension, logged when a streak of drops
/// begins and ends, and in total at its exit.
#[derive(Default)]
struct Drops {
    total: u64,
    streak: bool,
}

impl Drops {
    /// Counts a drop: true when it begins a streak.
    fn count(&mut self) -> bool {
        self.total += 1;
        !std::mem::replace(&mut self.streak, true)
    }

    /// Ends a streak: the total so far, when one was running.
    fn end(&mut self) -> Option<u64> {
        std::mem::take(&mut self.streak).then_some(self.total)
    }
}

impl Ext {
    /// An extension as discovered, before anything ran: disabled until
    /// the startup says otherwise.
    fn new(
        name: String,
        scope: Scope,
        dir: PathBuf,
        log: ExtLog,
        manifest: Option<Manifest>,
    ) -> Ext {
        Ext {
            name,
            version: manifest.as_ref().and_then(|m| m.version.clone()),
            scope,
            dir,
            phase: Phase::Gone {
                end: End::Disabled,
                restart_at: None,
            },
            log,
            events: Vec::new(),
            event_set: HashSet::new(),
            event_bytes: 0,
            intercept: Vec::new(),
            commands_claimed: Claims::default(),
            tools_claimed: Claims::default(),
            dropped_events: Drops::default(),
            dropped_notes: Drops::default(),
            out: Vec::new(),
            manifest,
            supervision: Supervision::default(),
            ready_via: None,
            lost_to_builtin: Vec::new(),
            tool_cancel: false,
            call_tool: false,
        }
    }

    fn run(&self) -> Option<&Run> {
        match &self.phase {
            Phase::Running(run) => Some(run),
            Phase::Spawning | Phase::Gone { .. } => None,
        }
    }

    fn stage(&self) -> Option<&Stage> {
        self.run().map(|r| &r.stage)
    }

    /// Handshaken and not being stopped: may get requests.
    fn serving(&self) -> bool {
        matches!(self.stage(), Some(Stage::Registering { .. } | Stage::Ready))
    }

    /// Not yet ready and not being stopped.
    fn loading(&self) -> bool {
        matches!(self.phase, Phase::Spawning)
            || matches!(
                self.stage(),
                Some(Stage::AwaitingHello { .. } | Stage::Registering { .. })
            )
    }

    /// Its state as listed, with why it failed or how it exited.
    fn state(&self) -> ExtensionState {
        let text = |s: &String| s.clone();
        match &self.phase {
            Phase::Spawning => ExtensionState::Starting,
            Phase::Running(r) => match &r.stage {
                Stage::Ready | Stage::Stopping { hello: true, .. } => ExtensionState::Ready,
                Stage::Killed(why) => ExtensionState::Failed { reason: text(why) },
                _ => ExtensionState::Starting,
            },
            Phase::Gone { end, .. } => match end {
                End::Disabled => ExtensionState::Disabled,
                End::Bundle => ExtensionState::Bundle,
                End::Untrusted(why) => ExtensionState::Untrusted { reason: text(why) },
                End::Failed(why) => ExtensionState::Failed { reason: text(why) },
                End::Exited(how) => ExtensionState::Exited { status: text(how) },
            },
        }
    }

    /// How it ended, when it is gone and that has a text.
    fn end_detail(&self) -> Option<&String> {
        match &self.phase {
            Phase::Gone { end, .. } => end.detail(),
            Phase::Spawning | Phase::Running(_) => None,
        }
    }

    /// Its entry in a [`Snapshot`], with the names it owns.
    fn info(
        &self,
        commands: Vec<String>,
        tools: Vec<String>,
        conflicts: Vec<NameConflict>,
    ) -> ExtensionInfo {
        let state = self.state();
        // An untrusted project's skill files are not the embedder's to load.
        let untrusted = matches!(state, ExtensionState::Untrusted { .. });
        let provides = self
            .manifest
            .as_ref()
            .map(|m| &m.provides)
            .filter(|_| !untrusted);
        ExtensionInfo {
            name: self.name.clone(),
            version: self.version.clone(),
            scope: self.scope,
            dir: self.dir.clone(),
            state,
            pid: self.run().map(|r| r.pid),
            commands,
            tools,
            events: self.events.clone(),
            intercept: self.intercept.clone(),
            restarts: self.supervision.restarts,
            skills: provides.map(|p| p.skills.clone()).unwrap_or_default(),
            theme: provides.and_then(|p| p.theme.clone()),
            ready_via: self.ready_via,
            conflicts,
        }
    }

    /// Whether its stdin takes lines.
    fn writable(&self) -> bool {
        self.run().is_some_and(|r| r.stdin_open)
    }

    /// Queues a frame, written batched at the end of the loop iteration;
    /// an MCP server's client is handed it to translate (its deadlines
    /// count from `now`). False when stdin is closed.
    fn send(&mut self, frame: &HostFrame, now: Instant) -> bool {
        let Phase::Running(run) = &mut self.phase else {
            return false;
        };
        if !run.stdin_open {
            return false;
        }
        let Some(client) = &mut run.mcp else {
            frame.write_line(&mut self.out);
            return true;
        };
        client.on_host_frame(frame, now);
        self.out.append(&mut client.take_lines());
        true
    }

    /// Queues a frame already serialized, or lines of an MCP server's
    /// client. False when stdin is closed.
    fn send_line(&mut self, line: &[u8]) -> bool {
        if !self.writable() {
            return false;
        }
        self.out.extend_from_slice(line);
        true
    }

    /// Bytes waiting for this extension, queued or not yet handed over.
    fn backlog(&self) -> usize {
        self.out.len() + self.run().map_or(0, |r| r.backlog.bytes())
    }
}

struct ChainState {
    chain: Chain,
    guards: Vec<usize>,
    /// The request id each guard was last asked under.
    ids: Vec<Option<String>>,
    then: Then,
}

struct Engine {
    cfg: HostConfig,
    cwd: String,
    /// `session_id` of every event: the embedder's, else made at start.
    session_id: String,
    /// Events emitted so far, over the host's life (SPEC 14.4).
    sequence: u64,
    /// `before_agent_start` passes so far: each has its `agent_run_id`.
    agent_runs: u64,
    events: EventQueue,
    exts: Vec<Ext>,
    by_key: IdMap<u64, usize>,
    next_key: u64,
    pending: Pending,
    jobs: jobs::Jobs,
    /// Where [`crate::BuiltinReply`] sends the embedder's results.
    builtin_tx: Sender<Request>,
    /// Inline, how a [`crate::BuiltinReply`] runs the loop for its answer.
    builtin_drive: Option<crate::types::Drive>,
    chains: IdMap<u64, ChainState>,
    next_chain: u64,
    /// Commands' descriptions; tools as listed.
    commands: Registry<String>,
    tools: Registry<ToolInfo>,
    state: HostState,
    liveness_at: Option<Instant>,
    /// What the driver is to do, in the order decided (`action.rs`).
    actions: Vec<Action>,
    /// Steps of journaled calls waiting for the turn's sync (`journaled.rs`).
    parked: journaled::Parked,
}

pub(crate) use driver::{run, Channels, BATCH};
#[allow(unused_imports)] // The inline host drives the loop through it.
pub(crate) use driver::{Driver, Until};

impl Engine {
    /// An engine whose events go to `events` (it only reads how many
    /// wait there: the driver sends them).
    /// Built-in tool replies go back through `builtin`.
    fn new(cfg: HostConfig, events: Sender<HostEvent>, builtin: Sender<Request>) -> Engine {
        let session_id = match cfg.session_id.as_str() {
            "" => crate::config::new_session_id(),
            given => given.to_string(),
        };
        Engine {
            cwd: cfg.cwd.to_string_lossy().into_owned(),
            session_id,
            sequence: 0,
            agent_runs: 0,
            events: EventQueue::new(events, cfg.event_budget),
            cfg,
            exts: Vec::new(),
            by_key: IdMap::default(),
            next_key: 0,
            pending: Pending::default(),
            jobs: jobs::Jobs::default(),
            builtin_tx: builtin,
            builtin_drive: None,
            chains: IdMap::default(),
            next_chain: 0,
            commands: Registry::case_insensitive(),
            tools: Registry::default(),
            // Until start_all: nothing is held before it.
            state: HostState::Running {
                parked: Vec::new(),
                held: Vec::new(),
            },
            liveness_at: None,
            actions: Vec::new(),
            parked: journaled::Parked::default(),
        }
    }

    fn is_done(&self) -> bool {
        matches!(self.state, HostState::Done)
    }

    /// After the inputs of one turn: the deadlines that came due (with
    /// what the driver saw of the processes [`Engine::probes_due`]
    /// named), then the host's state moves on as far as it can. The
    /// driver then syncs the turn's journal records and has the frames
    /// of the turn queued for the writers ([`Engine::queue_writes`]).
    fn settle(&mut self, now: Instant, probes: &Probes) {
        self.tick(now, probes);
        while self.advance(now) {}
    }

    /// Queues the frames of the turn for the writers, one write each.
    fn queue_writes(&mut self) {
        for idx in 0..self.exts.len() {
            self.flush(idx);
        }
    }

    /// [`Engine::settle`] with no process looked at: nothing exited.
    #[cfg(test)]
    fn settle_at(&mut self, now: Instant) {
        self.settle(now, &Probes::default());
        self.queue_writes();
    }

    /// For tests without a driver: carries out the replies and events
    /// queued (the events to the engine's channel); returns the rest.
    #[cfg(test)]
    fn answer_inline(&mut self) -> Vec<Action> {
        let mut rest = Vec::new();
        for action in self.take_actions(Vec::new()) {
            match action {
                Action::Reply(reply) => reply(),
                Action::Event(event) => self.events.deliver(event),
                Action::Ready(_) => {}
                other => rest.push(other),
            }
        }
        rest
    }

    /// Queues what was sent to extension `idx` this turn as one write.
    fn flush(&mut self, idx: usize) {
        let ext = &mut self.exts[idx];
        if !ext.out.is_empty() && ext.run().is_some() {
            let bytes = std::mem::take(&mut ext.out);
            self.actions.push(Action::Write { ext: idx, bytes });
        }
    }

    /// Closes extension `idx`'s stdin once everything queued so far is
    /// written.
    fn close_stdin(&mut self, idx: usize) {
        self.flush(idx);
        if let Phase::Running(run) = &mut self.exts[idx].phase {
            if std::mem::replace(&mut run.stdin_open, false) {
                self.actions.push(Action::CloseStdin(idx));
            }
        }
    }

    /// What the driver is to do, in order; the engine's queue is left
    /// empty with its capacity (`spare`'s, cleared).
    fn take_actions(&mut self, spare: Vec<Action>) -> Vec<Action> {
        debug_assert!(spare.is_empty());
        self.events.handed_over();
        std::mem::replace(&mut self.actions, spare)
    }

    /// Answers the embedder: the callback runs when the driver carries
    /// out the actions, after the events decided before it.
    fn answer<T: Send + 'static>(&mut self, reply: Reply<T>, result: Result<T, HostError>) {
        self.actions
            .push(Action::Reply(Box::new(move || reply(result))));
    }

    /// Fails a request the engine will not run, as [`Engine::answer`].
    fn refuse(&mut self, req: Request, error: HostError) {
        self.actions
            .push(Action::Reply(Box::new(move || req.fail(error))));
    }

    /// Sends a lifecycle event to the embedder (never dropped).
    fn event(&mut self, event: HostEvent) {
        self.events.send(event, &mut self.actions);
    }

    /// The one place where the host's state moves on by itself (SPEC 3.6,
    /// 3.14, 3.15), not at an input: held requests run once the startup
    /// ended, parked ones once their names may have come, a stop begins
    /// once nothing accepted is left, and ends once every extension is
    /// gone. Only from [`Engine::settle`]: a reload replaces `exts`,
    /// indexes and all. True when it moved (ask again).
    fn advance(&mut self, now: Instant) -> bool {
        let busy = !self.pending.is_empty()
            || !self.chains.is_empty()
            || !self.jobs.is_empty()
            || !self.parked.is_empty();
        let running = self.exts.iter().any(|e| e.run().is_some());
        match &mut self.state {
            // It ends at an input or in tick (check_startup).
            HostState::Starting(_) | HostState::Done => false,
            HostState::Running { held, .. } if !held.is_empty() => {
                for req in std::mem::take(held) {
                    self.request(req, now);
                }
                true
            }
            HostState::Running { .. } => {
                self.run_parked(now);
                false
            }
            HostState::Reloading { stopped: None, .. } if !busy => {
                self.begin_stop(now);
                true
            }
            HostState::Draining { parked, .. } if !busy && parked.is_empty() => {
                self.begin_stop(now);
                true
            }
            HostState::Draining { parked, .. } if !parked.is_empty() => {
                self.run_parked(now);
                // Once none is left, the stop may begin.
                self.state.parked_mut().is_some_and(|p| p.is_empty())
            }
            HostState::Reloading {
                stopped: Some(_), ..
            }
            | HostState::Stopping { .. }
                if !running =>
            {
                self.stopped(now);
                true
            }
            HostState::Draining { .. }
            | HostState::Reloading { .. }
            | HostState::Stopping { .. } => false,
        }
    }
}

/// `now + d`, or decades away when `d` is too large (`Duration::MAX`
/// says "no timeout").
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// A map keyed by the engine's own numbers (jobs, chains, process keys,
/// extension indexes, request ids): they come from counters, never from
/// outside (an answer's id is only looked up), so std's SipHash (built
/// against keys an attacker picks) buys nothing and costs about 100
/// instructions a lookup, several per call.
type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// The hash of [`IdMap`], FxHash's step: a rotate, an xor and a
/// multiplication per word.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

impl Engine {
    /// The names extension `idx` registered and lost, to a built-in or to
    /// an extension of higher precedence.
    fn conflicts(&self, idx: usize) -> Vec<NameConflict> {
        let builtin = (self.exts[idx].lost_to_builtin.iter()).map(|(kind, name)| NameConflict {
            kind: *kind,
            name: name.clone(),
            winner: "built-in".into(),
        });
        // The registries hold different things: their losses are alike.
        let lost = |kind: NameKind, lost: Vec<(String, usize)>| {
            lost.into_iter().map(move |(name, rank)| NameConflict {
                kind,
                name,
                winner: self.exts[rank].name.clone(),
            })
        };
        let commands = lost(NameKind::Command, self.commands.lost_by(idx));
        builtin
            .chain(commands)
            .chain(lost(NameKind::Tool, self.tools.lost_by(idx)))
            .collect()
    }

    fn snapshot(&self) -> Snapshot {
        let extensions = (self.exts.iter().enumerate())
            .map(|(i, e)| {
                e.info(
                    self.commands.owned_by(i),
                    self.tools.owned_by(i),
                    self.conflicts(i),
                )
            })
            .collect();
        let commands = self
            .commands
            .owners()
            .map(|(name, c)| CommandInfo {
                name: name.to_string(),
                description: c.info.clone(),
                extension: self.exts[c.rank].name.clone(),
            })
            .collect();
        let tools = self.tools.owners().map(|(_, c)| c.info.clone()).collect();
        Snapshot {
            extensions,
            commands,
            tools,
            in_flight: InFlight {
                requests: self.pending.len(),
                tool_calls: self.jobs.len(),
            },
        }
    }
}
