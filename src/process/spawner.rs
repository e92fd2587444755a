//! Starts a batch of extension processes, several at a time where this
//! thread may run on more than one CPU: at most [`MAX_PARALLEL`], never
//! more than those CPUs (one CPU: one after another). Each start is
//! [`ExtProcess::spawn`] as it is alone: `posix_spawn`, or a fork for a
//! confined extension (docs/PROTOCOL.md#confinement); nothing forks the host once per
//! extension just to start them in parallel.
//!
//! The spawning threads belong to the host and end only when it does.
//! Without the watchdog each child gets `PR_SET_PDEATHSIG`, which Linux
//! fires when the *thread* that spawned it ends; so no extension is
//! spawned from a thread that may end first (a caller's thread driving
//! the loop, a short-lived helper). The threads start at the first batch
//! that needs them, inheriting that thread's CPU affinity, as the
//! children then do.
//!
//! Results come back in the batch's order, whichever start finishes
//! first: discovery order and registry precedence never depend on it.
//! Once a batch is started, the watchdog is told its process groups in
//! one write, not one per start.

use crate::process::{self, ExtProcess, Spawn};
use crossbeam_channel::{Receiver, Sender};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::thread::{self, JoinHandle};

/// Starts at once at most: on a bigger machine more would only queue
/// on the process table and the loader.
pub(crate) const MAX_PARALLEL: usize = 4;

/// A spawning thread needs little stack: `posix_spawn`, or the pre-exec
/// hook of a fork.
const STACK: usize = 256 * 1024;

type Task = Box<dyn FnOnce() + Send>;

/// The host's spawning threads.
pub(crate) struct Spawner {
    /// How many threads it may have.
    limit: usize,
    tasks: Option<Sender<Task>>,
    queue: Receiver<Task>,
    threads: Vec<JoinHandle<()>>,
}

impl Spawner {
    /// A spawner for as many CPUs as this thread may use, at most
    /// [`MAX_PARALLEL`]; it starts no thread yet.
    pub fn new() -> Spawner {
        let cpus = thread::available_parallelism().map_or(1, |n| n.get());
        Spawner::with_limit(cpus.clamp(1, MAX_PARALLEL))
    }

    fn with_limit(limit: usize) -> Spawner {
        let (tasks, queue) = crossbeam_channel::unbounded();
        Spawner {
            limit,
            tasks: Some(tasks),
            queue,
            threads: Vec::new(),
        }
    }

    /// Starts every process of `batch`, up to the limit at a time, and
    /// returns each result at its position in `batch`.
    pub fn spawn_all(&mut self, batch: Vec<Spawn>) -> Vec<io::Result<ExtProcess>> {
        // Until the watchdog's notice below, a signal handler's exit waits.
        let _untold = process::untold_groups();
        self.grow(batch.len().min(self.limit));
        let n = batch.len();
        let (done_tx, done) = crossbeam_channel::unbounded();
        for (i, spawn) in batch.into_iter().enumerate() {
            let done_tx = done_tx.clone();
            let task: Task = Box::new(move || {
                // The receiver lives until every task has answered.
                let _ = done_tx.send((i, ExtProcess::spawn(spawn)));
            });
            match (&self.tasks, self.threads.is_empty()) {
                (Some(tasks), false) => {
                    // The queue's receiver is ours: sending cannot fail.
                    let _ = tasks.send(task);
                }
                // No thread could be started: here is better than never.
                _ => task(),
            }
        }
        drop(done_tx);
        let mut out: Vec<Option<io::Result<ExtProcess>>> = (0..n).map(|_| None).collect();
        // Ends once every task has answered or panicked.
        for (i, result) in done.iter() {
            out[i] = Some(result);
        }
        // One wake-up of the watchdog for the whole batch; nothing has
        // ended its groups yet.
        process::watch_groups(out.iter().flatten().flatten().map(|p| p.pid));
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(io::Error::other("the spawning thread panicked"))))
            .collect()
    }

    /// Starts threads until there are `wanted`; stops at the first that
    /// cannot start (the others do its share).
    fn grow(&mut self, wanted: usize) {
        while self.threads.len() < wanted {
            let queue = self.queue.clone();
            let started = thread::Builder::new()
                .name("zot-spawn".into())
                .stack_size(STACK)
                .spawn(move || {
                    for task in queue.iter() {
                        // A start that panics drops its answer (the batch
                        // reports it); the thread stays for the others, so
                        // no task waits in the queue with nobody to run it.
                        let _ = panic::catch_unwind(AssertUnwindSafe(task));
                    }
                });
            match started {
                Ok(handle) => self.threads.push(handle),
                Err(e) => {
                    eprintln!("zot: cannot start a thread to spawn extensions: {e}");
                    break;
                }
            }
        }
    }

    /// How many threads it has started.
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for Spawner {
    /// Ends the threads: only once nothing they spawned runs any more, so
    /// the owner drops its processes first.
    fn drop(&mut self) {
        self.tasks = None;
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::ExtLog;
    use crate::process::{Inbound, Reading};
    use crate::wire::protocol::ExtFrame;
    use crossbeam_channel::Select;
    use std::path::PathBuf;
    use std::time::Duration;
    use std::time::Instant;

    /// A start of `sh -c script` under `key`.
    fn sh(key: u64, script: &str) -> Spawn {
        Spawn {
            key,
            name: format!("sh{key}"),
            exe: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            dir: std::env::temp_dir(),
            log: ExtLog::stderr(&format!("sh{key}")),
            reading: Reading::Frames,
            #[cfg(feature = "confine")]
            confine: None,
        }
    }

    /// Takes what the processes' readers send, as the loop does, until
    /// each said hello: (key, name) of each, whatever their order.
    fn hellos<'a>(procs: impl IntoIterator<Item = &'a mut ExtProcess>) -> Vec<(u64, String)> {
        let mut procs: Vec<_> = procs.into_iter().collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        while seen.len() < procs.len() {
            let mut sel = Select::new();
            for p in &procs {
                sel.recv(p.inbound().expect("its reader runs"));
            }
            assert!(
                sel.ready_deadline(deadline).is_ok(),
                "every started process says hello within 60 s"
            );
            drop(sel);
            for p in procs.iter_mut() {
                while let Some(msg) = p.take_inbound() {
                    if let Inbound::Frame(ExtFrame::Hello { name, .. }) = msg.msg {
                        seen.push((msg.key, name));
                    }
                }
            }
        }
        seen.sort();
        seen
    }

    const HELLO: &str = r#"read -r _ 2>/dev/null; printf '{"type":"hello","name":"%s"}\n' "$0"; exec cat >/dev/null"#;

    #[test]
    fn results_keep_the_batch_order_and_a_failed_start_stays_in_its_place() {
        let mut spawner = Spawner::with_limit(MAX_PARALLEL);
        let mut batch = Vec::new();
        for key in 0..8u64 {
            let mut s = sh(key, HELLO);
            s.args.push(format!("ext{key}"));
            if key % 3 == 1 {
                s.exe = PathBuf::from("/nonexistent/zot-spawner-test");
            }
            batch.push(s);
        }
        let results = spawner.spawn_all(batch);
        assert_eq!(results.len(), 8, "one result per start");
        let mut procs = Vec::new();
        for (key, result) in results.into_iter().enumerate() {
            match (key % 3 == 1, result) {
                (true, Err(_)) => {}
                (false, Ok(p)) => procs.push((key as u64, p)),
                (true, Ok(_)) => panic!("start {key} (no such program) succeeded"),
                (false, Err(e)) => panic!("start {key} failed: {e}"),
            }
        }
        let keys: Vec<u64> = procs.iter().map(|(k, _)| *k).collect();
        for (_, p) in &procs {
            assert!(p.send(b"go\n".to_vec()), "stdin of {} is open", p.pid);
        }
        // Each process is the one its position asked for: its frames carry
        // its key and it says the name given at that position.
        let expected: Vec<(u64, String)> = keys.iter().map(|k| (*k, format!("ext{k}"))).collect();
        assert_eq!(hellos(procs.iter_mut().map(|(_, p)| p)), expected);
        assert_eq!(
            spawner.threads(),
            MAX_PARALLEL,
            "at most the limit at a time"
        );
        for (_, p) in procs {
            p.finish();
        }
    }

    #[test]
    fn one_cpu_means_one_spawning_thread_and_it_is_reused() {
        let mut spawner = Spawner::with_limit(1);
        let mut procs = Vec::new();
        for first in [0u64, 3] {
            let batch = (first..first + 3).map(|i| {
                let mut s = sh(i, HELLO);
                s.args.push(format!("ext{i}"));
                s
            });
            for result in spawner.spawn_all(batch.collect()) {
                procs.push(result.expect("/bin/sh starts"));
            }
            assert_eq!(spawner.threads(), 1, "one thread for one CPU, every batch");
        }
        for p in &procs {
            assert!(p.send(b"go\n".to_vec()));
        }
        assert_eq!(hellos(&mut procs).len(), 6);
        for p in procs {
            p.finish();
        }
    }

    /// A process that exits while the child it left holds its stdout
    /// (and stderr) open: no end of stdout comes, its exit does, as a
    /// message, once what it wrote to stderr is in its log; its status
    /// is there at once.
    #[test]
    fn an_exit_is_a_message_even_while_a_child_holds_stdout() {
        let logs = std::env::temp_dir().join(format!("zot-waiter-{}", std::process::id()));
        let mut s = sh(0, "echo last words >&2; sleep 60 & exit 3");
        s.log = ExtLog::open(&logs, "waiter", 1 << 20);
        let mut spawner = Spawner::with_limit(1);
        let mut p = (spawner.spawn_all(vec![s]).pop())
            .expect("one result")
            .expect("/bin/sh starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        'waiting: loop {
            let mut sel = Select::new();
            sel.recv(p.inbound().expect("its threads run"));
            assert!(
                sel.ready_deadline(deadline).is_ok(),
                "its exit is told within 60 s, while the child holds stdout"
            );
            drop(sel);
            while let Some(msg) = p.take_inbound() {
                match msg.msg {
                    Inbound::Exited => break 'waiting,
                    Inbound::Eof => panic!("stdout ended while the child holds it"),
                    _ => {}
                }
            }
        }
        let log =
            std::fs::read_to_string(crate::log::log_path(&logs, "waiter")).unwrap_or_default();
        assert!(
            log.contains("last words"),
            "its stderr is in the log: {log:?}"
        );
        let status = p.try_wait().expect("exited: try_wait answers at once");
        assert_eq!(status.code(), Some(3));
        p.finish();
        let _ = std::fs::remove_dir_all(&logs);
    }

    #[test]
    fn a_start_that_panics_fails_alone_and_the_thread_stays() {
        let mut spawner = Spawner::with_limit(1);
        // A task that panics, as a bug in a start would.
        let (panicked, answer) = crossbeam_channel::bounded::<()>(0);
        let task: Task = Box::new(move || {
            let _keep = panicked;
            panic!("a start panicked");
        });
        spawner.grow(1);
        if let Some(tasks) = &spawner.tasks {
            tasks.send(task).expect("the queue is open");
        }
        assert!(
            answer.recv_timeout(Duration::from_secs(60)).is_err(),
            "the panicking task ran and dropped its answer"
        );
        // The one thread still starts what comes next.
        let mut s = sh(0, HELLO);
        s.args.push("ext0".into());
        let (result_tx, result) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            let started = spawner.spawn_all(vec![s]).pop();
            // The spawner goes back too: its thread must outlive the process.
            let _ = result_tx.send((started, spawner));
        });
        let (started, _spawner) = result
            .recv_timeout(Duration::from_secs(60))
            .expect("the spawner answers after a start panicked, within 60 s");
        let mut p = started.expect("one result").expect("/bin/sh starts");
        assert!(p.send(b"go\n".to_vec()));
        assert_eq!(hellos([&mut p]), [(0, "ext0".to_string())]);
        p.finish();
    }
}
