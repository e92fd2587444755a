//! Starting extensions, readiness, exits and stopping (SPEC 3.5, 3.6,
//! 3.13-3.15).

use super::*;

impl Engine {
    pub(super) fn start_all(&mut self, reload: Option<Reply<ReloadReport>>, stopped: usize) {
        let now = Instant::now();
        let found = discovery::discover(
            &self.cfg.ext_paths,
            &self.cfg.cwd,
            &self.cfg.zot_home,
            self.cfg.discover,
        );
        let logs = discovery::logs_dir(&self.cfg.zot_home);
        let mut errors = Vec::new();
        let mut loaded = 0;
        for f in found {
            let name = match &f.manifest {
                Some(m) => m.name.clone(),
                None => f
                    .dir
                    .file_name()
                    .map_or_else(|| "unknown".into(), |n| n.to_string_lossy().into_owned()),
            };
            if let Status::Shadowed { by } = &f.status {
                ExtLog::open(&logs, &name).line(&format!(
                    "not started: {} is shadowed by {}",
                    f.dir.display(),
                    by.display()
                ));
                continue;
            }
            let key = self.next_key;
            self.next_key += 1;
            let log = match f.status {
                Status::Invalid(_) => ExtLog::stderr(&name),
                _ => ExtLog::open(&logs, &name),
            };
            let mut ext = Ext {
                name,
                version: f.manifest.as_ref().and_then(|m| m.version.clone()),
                scope: f.scope,
                dir: f.dir.clone(),
                state: State::Disabled,
                log,
                proc: None,
                hello: false,
                hello_deadline: None,
                idle_ready_at: None,
                exit_poll: None,
                stop: None,
                events: Vec::new(),
                intercept: Vec::new(),
                dropped_events: 0,
                dropping: false,
                eof_before_hello: None,
                out: Vec::new(),
            };
            match (&f.status, &f.manifest) {
                (Status::Invalid(e), _) => {
                    ext.state = State::Failed(format!("invalid manifest: {e}"))
                }
                (Status::Start, Some(m)) => {
                    let started = m.resolve_exec(&f.dir).and_then(|exe| {
                        ExtProcess::spawn(
                            key,
                            &m.name,
                            &exe,
                            &m.args,
                            &f.dir,
                            &ext.log,
                            self.inbound_tx.clone(),
                        )
                        .map_err(|e| format!("cannot start {}: {e}", exe.display()))
                    });
                    match started {
                        Ok(p) => {
                            ext.log.line(&format!("started {} (pid {})", m.exec, p.pid));
                            ext.proc = Some(p);
                            ext.state = State::Starting;
                            ext.hello_deadline = Some(later(now, self.cfg.timeouts.hello));
                            loaded += 1;
                        }
                        Err(e) => ext.state = State::Failed(e),
                    }
                }
                _ => {}
            }
            if let State::Failed(e) = &ext.state {
                ext.log.line(e);
                errors.push(format!("{}: {e}", ext.name));
                let _ = self.events.send(HostEvent::ExtensionFailed {
                    extension: ext.name.clone(),
                    error: e.clone(),
                });
            }
            self.by_key.insert(key, self.exts.len());
            self.exts.push(ext);
        }
        self.startup = Some(Startup {
            deadline: later(now, self.cfg.timeouts.startup),
            reload,
            stopped,
            loaded,
            errors,
        });
        self.check_startup(now);
    }

    pub(super) fn check_startup(&mut self, now: Instant) {
        let Some(st) = &self.startup else { return };
        let loading = self.exts.iter().any(|e| e.state == State::Starting);
        if loading && now < st.deadline {
            return;
        }
        let Some(mut st) = self.startup.take() else {
            return;
        };
        let ready: Vec<String> = self
            .exts
            .iter()
            .filter(|e| e.state == State::Ready)
            .map(|e| e.name.clone())
            .collect();
        for e in self.exts.iter().filter(|e| e.state == State::Starting) {
            e.log.line(
                "still loading after the startup grace; its registrations count when they arrive",
            );
        }
        for e in &self.exts {
            if let State::Failed(why) = &e.state {
                let line = format!("{}: {why}", e.name);
                if !st.errors.contains(&line) {
                    st.errors.push(line);
                }
            }
        }
        if !self.announced {
            self.announced = true;
            let _ = self.events.send(HostEvent::Ready {
                extensions: ready.clone(),
            });
            self.latch.set(ready.clone());
        }
        if let Some(reply) = st.reload {
            reply(Ok(ReloadReport {
                stopped: st.stopped,
                loaded: st.loaded,
                ready: ready.len(),
                errors: st.errors,
            }));
        }
    }

    pub(super) fn mark_ready(&mut self, idx: usize, why: &str, now: Instant) {
        let ext = &mut self.exts[idx];
        if ext.state != State::Starting {
            return;
        }
        ext.state = State::Ready;
        ext.idle_ready_at = None;
        if why != "ready" {
            ext.log.line(why);
        }
        // After the first startup, every extension that becomes ready
        // (late, or after a reload) is announced.
        let after_first = self.startup.as_ref().is_none_or(|s| s.reload.is_some());
        if self.announced && after_first {
            let _ = self.events.send(HostEvent::Registered {
                extension: ext.name.clone(),
            });
        }
        self.check_startup(now);
    }

    pub(super) fn fail(&mut self, idx: usize, reason: String, now: Instant) {
        let ext = &mut self.exts[idx];
        ext.log.line(&format!("failed: {reason}"));
        ext.state = State::Failed(reason.clone());
        ext.hello_deadline = None;
        ext.idle_ready_at = None;
        if let Some(p) = &ext.proc {
            p.signal_group(libc::SIGKILL);
            ext.exit_poll = Some((now, Duration::from_millis(1)));
        }
        let _ = self.events.send(HostEvent::ExtensionFailed {
            extension: ext.name.clone(),
            error: reason,
        });
        self.drop_registrations(
            idx,
            &format!("extension {} failed", self.exts[idx].name),
            now,
        );
        self.check_startup(now);
    }

    pub(super) fn poll_exit(&mut self, idx: usize, now: Instant) {
        let ext = &mut self.exts[idx];
        let Some(p) = &mut ext.proc else { return };
        match p.try_wait() {
            Some(status) => self.exited(idx, status, now),
            None => {
                let step = ext.exit_poll.map_or(Duration::from_millis(1), |(_, s)| {
                    (s * 2).min(Duration::from_millis(50))
                });
                ext.exit_poll = Some((now + step, step));
            }
        }
    }

    pub(super) fn exited(&mut self, idx: usize, status: ExitStatus, now: Instant) {
        let desc = describe_status(status);
        let ext = &mut self.exts[idx];
        let Some(p) = ext.proc.take() else { return };
        ext.out.clear();
        // Whatever the extension left in its group goes with it.
        if group_alive(p.pid) {
            signal_group(p.pid, libc::SIGKILL);
        }
        p.join_finished();
        ext.exit_poll = None;
        ext.hello_deadline = None;
        ext.idle_ready_at = None;
        ext.log.line(&format!("exited ({desc})"));
        if ext.dropped_events > 0 {
            ext.log.line(&format!(
                "dropped {} events in total: its queue was full",
                ext.dropped_events
            ));
        }
        let stopping = ext.stop.take().is_some();
        match ext.state.clone() {
            // Stopped (shutdown, reload) before it said hello: not a failure.
            State::Starting if !ext.hello && stopping => ext.state = State::Exited(desc.clone()),
            State::Starting if !ext.hello => {
                let error = format!("exited before hello ({desc})");
                ext.state = State::Failed(error.clone());
                let _ = self.events.send(HostEvent::ExtensionFailed {
                    extension: ext.name.clone(),
                    error,
                });
            }
            State::Failed(_) => {}
            _ => {
                ext.state = State::Exited(desc.clone());
                if !stopping && self.goal.is_none() {
                    let _ = self.events.send(HostEvent::ExtensionExited {
                        extension: ext.name.clone(),
                        status: desc.clone(),
                    });
                }
            }
        }
        let why = format!("extension {} exited ({desc})", self.exts[idx].name);
        self.drop_registrations(idx, &why, now);
        self.check_startup(now);
    }

    /// An extension is gone or unusable: its requests fail at once, its
    /// guards count as allow, its names leave the registries.
    pub(super) fn drop_registrations(&mut self, idx: usize, why: &str, now: Instant) {
        // Names first: a chain finished below may dispatch a tool, and it
        // must go to the next registrant, not to this extension.
        self.commands.remove_rank(idx);
        self.tools.remove_rank(idx);
        let ids: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.ext == idx && !matches!(p.kind, PendingKind::Guard { .. }))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some(p) = self.pending.remove(&id) {
                p.kind.fail(why.to_string());
            }
        }
        self.release_guards(idx, now);
    }

    /// Every intercept waiting on extension `idx` counts as allow.
    pub(super) fn release_guards(&mut self, idx: usize, now: Instant) {
        let guards: Vec<(String, u64, usize)> = self
            .pending
            .iter()
            .filter_map(|(id, p)| match p.kind {
                PendingKind::Guard { chain, pos } if p.ext == idx => Some((id.clone(), chain, pos)),
                _ => None,
            })
            .collect();
        for (id, chain, pos) in guards {
            self.pending.remove(&id);
            self.answer_guard(chain, pos, Answer::Allow, now);
        }
    }

    pub(super) fn begin_stop(&mut self, goal: Goal) {
        let now = Instant::now();
        let mut stopped = 0;
        let line = HostFrame::Shutdown.to_line();
        for ext in &mut self.exts {
            if !ext.live() || ext.stop.is_some() {
                continue;
            }
            stopped += 1;
            // Queued after every event already emitted to it.
            ext.send(&line);
            ext.stop = Some(Stop {
                term_at: Some(later(now, self.cfg.timeouts.shutdown_grace)),
                kill_at: None,
            });
            ext.hello_deadline = None;
            ext.idle_ready_at = None;
        }
        self.goal = Some(match goal {
            Goal::Reload(reply, _) => Goal::Reload(reply, stopped),
            other => other,
        });
    }

    /// Finishes a shutdown or reload once every extension is gone. Run
    /// only from the main loop: a reload replaces `exts`, which must not
    /// happen under code that holds an index into it.
    pub(super) fn check_stopped(&mut self) {
        if self.goal.is_none() || self.exts.iter().any(Ext::live) {
            return;
        }
        match self.goal.take() {
            Some(Goal::Shutdown(replies)) => {
                for reply in replies {
                    reply(Ok(()));
                }
                self.done = true;
            }
            Some(Goal::Reload(reply, stopped)) => {
                for (_, p) in self.pending.drain() {
                    p.kind.fail("extensions were reloaded".into());
                }
                for (_, chain) in self.chains.drain() {
                    if let Some(then) = chain.then {
                        then.fail("extensions were reloaded".into());
                    }
                }
                self.commands.clear();
                self.tools.clear();
                self.exts.clear();
                self.by_key.clear();
                self.start_all(Some(reply), stopped);
            }
            None => {}
        }
    }
}
