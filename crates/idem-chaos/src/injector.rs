//! The fault injector: takes each action of the [`Schedule`] at its time, on the run's
//! gateways, store and upstream, and records it in the history.
//!
//! Kills and store restarts take turns (a SQLite restart kills every gateway; a Redis Cluster's
//! is a failover); pauses, partitions, clock steps and the slow and 503 windows of the upstream
//! run beside them, so that a slow restart does not shorten them. A pause waits for its gateway
//! to be up, and a kill ends it. A partition cuts a link whatever the gateway does meanwhile: a
//! gateway killed and started again during it reconnects through the cut link.

use std::time::Duration;

use crate::{
    Error, GatewayId, Schedule,
    faults::{Action, Scheduled},
    gateway_process::{ClockFile, GatewayProcess, Running},
    history::{FaultEvent, Link, PartitionMode, Recorder},
    link::{GatewayLinks, LinkProxy},
    progress::Progress,
    store::{RedisCluster, StoreServer},
    upstream::Upstream,
};

/// How long a gateway that exits while starting is started again, as a supervisor would: far
/// longer than a partition of its store link (3 leases at most) or a store restart.
const RESTART_FOR: Duration = Duration::from_secs(60);

/// The pause between two starts of a gateway that exited while starting.
const RESTART_BACKOFF: Duration = Duration::from_millis(200);

/// What the faults act on.
pub(crate) struct Injector<'a> {
    pub(crate) gateways: &'a mut [GatewayProcess],
    pub(crate) store: &'a mut StoreServer,
    pub(crate) upstream: &'a Upstream,
    /// Each gateway's link proxies, by gateway.
    pub(crate) links: &'a [GatewayLinks],
    pub(crate) recorder: &'a Recorder,
    pub(crate) progress: &'a Progress,
    /// The gateway a soak never kills: SQLite's store restarts kill only the others.
    pub(crate) spared: Option<GatewayId>,
}

impl Injector<'_> {
    /// Takes every action of `schedule` at its time after `start`, then waits until
    /// `start + duration`. Every gateway and the store are up, and the upstream is fast and
    /// executes, when it returns.
    pub(crate) async fn run(
        self,
        schedule: &Schedule,
        start: Duration,
        duration: Duration,
    ) -> Result<(), Error> {
        let Self {
            gateways,
            store,
            upstream,
            links,
            recorder,
            progress,
            spared,
        } = self;
        let running: Vec<Running> = gateways.iter().map(GatewayProcess::running).collect();
        let clocks: Vec<ClockFile> = gateways.iter().map(GatewayProcess::clock).collect();
        let clock_steps = async {
            for fault in schedule.faults() {
                let Action::StepClock(gateway, offset) = fault.action else {
                    continue;
                };
                if let Some(clock) = clocks.get(usize::from(gateway.0)) {
                    sleep_until(recorder, start + fault.at).await;
                    step_clock(clock, gateway, offset, recorder, progress)?;
                }
            }
            Ok::<(), Error>(())
        };
        let pauses = async {
            for fault in schedule.faults() {
                let Action::PauseGateway(gateway, length) = fault.action else {
                    continue;
                };
                if let Some(running) = running.get(usize::from(gateway.0)) {
                    sleep_until(recorder, start + fault.at).await;
                    pause(running, gateway, length, recorder, progress).await?;
                }
            }
            Ok::<(), Error>(())
        };
        let partitions = async {
            for fault in schedule.faults() {
                let Action::Partition {
                    gateway,
                    link,
                    mode,
                    length,
                } = fault.action
                else {
                    continue;
                };
                let Some(proxy) = links
                    .get(usize::from(gateway.0))
                    .and_then(|links| links.get(link))
                else {
                    continue;
                };
                sleep_until(recorder, start + fault.at).await;
                partition(proxy, (gateway, link, mode), length, recorder, progress).await;
            }
            Ok::<(), Error>(())
        };
        let mut servers = Servers {
            gateways,
            store,
            recorder,
            progress,
            spared,
        };
        let servers = async {
            for fault in schedule
                .faults()
                .iter()
                .filter(|f| f.action.is_on_servers())
            {
                sleep_until(recorder, start + fault.at).await;
                servers.apply(fault.action).await?;
            }
            Ok::<(), Error>(())
        };
        let windows = |is_kind: fn(&Action) -> bool| {
            let faults: Vec<Scheduled> = schedule
                .faults()
                .iter()
                .copied()
                .filter(|f| is_kind(&f.action))
                .collect();
            async move {
                for fault in faults {
                    sleep_until(recorder, start + fault.at).await;
                    window(upstream, recorder, progress, fault.action).await;
                }
                Ok::<(), Error>(())
            }
        };
        // On an error, the others stop where they are: a gateway still stopped is killed with
        // the rest of the run.
        tokio::try_join!(
            servers,
            pauses,
            clock_steps,
            partitions,
            windows(|action| matches!(action, Action::Slow(_))),
            windows(|action| matches!(action, Action::Errors(_))),
        )?;
        sleep_until(recorder, start + duration).await;
        // Every clock is set right for the end of the run, as the step's time says.
        let stepped = schedule
            .faults()
            .iter()
            .filter_map(|fault| match fault.action {
                Action::StepClock(gateway, _) => Some(gateway),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<_>>();
        for gateway in stepped {
            if let Some(clock) = clocks.get(usize::from(gateway.0)) {
                step_clock(clock, gateway, 0, recorder, progress)?;
            }
        }
        Ok(())
    }
}

/// Sets `gateway`'s clock `offset` milliseconds from true time, and records it.
fn step_clock(
    clock: &ClockFile,
    gateway: GatewayId,
    offset: i64,
    recorder: &Recorder,
    progress: &Progress,
) -> Result<(), Error> {
    clock.step(offset)?;
    recorder.fault(FaultEvent::ClockStepped {
        gateway,
        at: recorder.now(),
        offset_ms: offset,
    });
    progress.event(format_args!("{gateway}'s clock is {offset:+} ms off"));
    Ok(())
}

async fn sleep_until(recorder: &Recorder, at: Duration) {
    tokio::time::sleep(at.saturating_sub(recorder.now().as_duration())).await;
}

/// Stops `gateway` for `length` (from when it is up), then continues it.
async fn pause(
    running: &Running,
    gateway: GatewayId,
    length: Duration,
    recorder: &Recorder,
    progress: &Progress,
) -> Result<(), Error> {
    let (pid, from) = running.suspend(recorder).await?;
    progress.event(format_args!(
        "SIGSTOP {gateway} for {} ms",
        length.as_millis()
    ));
    tokio::time::sleep(length).await;
    running.resume(pid).await?;
    let until = recorder.now();
    recorder.fault(FaultEvent::GatewayPaused {
        gateway,
        from,
        until,
    });
    progress.event(format_args!("SIGCONT {gateway}"));
    Ok(())
}

/// Cuts `gateway`'s `link` through its proxy, as `mode` says, for `length`, then heals it.
async fn partition(
    proxy: &LinkProxy,
    (gateway, link, mode): (GatewayId, Link, PartitionMode),
    length: Duration,
    recorder: &Recorder,
    progress: &Progress,
) {
    let from = recorder.now();
    proxy.cut(mode);
    progress.event(format_args!(
        "{gateway} cut from its {link} for {} ms: {mode}",
        length.as_millis()
    ));
    tokio::time::sleep(length).await;
    proxy.heal();
    let until = recorder.now();
    recorder.fault(FaultEvent::Partitioned {
        gateway,
        link,
        mode,
        from,
        until,
    });
    progress.event(format_args!("{gateway} reaches its {link} again"));
}

/// A slow or 503 window of the upstream, from now until its end.
async fn window(upstream: &Upstream, recorder: &Recorder, progress: &Progress, action: Action) {
    let (length, set): (Duration, fn(&Upstream, bool)) = match action {
        Action::Slow(length) => (length, Upstream::set_slow),
        Action::Errors(length) => (length, Upstream::set_failing),
        Action::KillGateway(_)
        | Action::PauseGateway(..)
        | Action::RestartStore
        | Action::StepClock(..) => return,
        Action::Partition { .. } => return,
    };
    let from = recorder.now();
    set(upstream, true);
    progress.event(match action {
        Action::Slow(_) => "the upstream is slow",
        _ => "the upstream answers 503",
    });
    tokio::time::sleep(length).await;
    set(upstream, false);
    let until = recorder.now();
    recorder.fault(match action {
        Action::Slow(_) => FaultEvent::UpstreamSlow { from, until },
        _ => FaultEvent::UpstreamFailing { from, until },
    });
    progress.event(match action {
        Action::Slow(_) => "the upstream is fast again",
        _ => "the upstream executes again",
    });
}

/// The gateways and the store, which kills and restarts act on in turn.
struct Servers<'a> {
    gateways: &'a mut [GatewayProcess],
    store: &'a mut StoreServer,
    recorder: &'a Recorder,
    progress: &'a Progress,
    spared: Option<GatewayId>,
}

impl Servers<'_> {
    async fn apply(&mut self, action: Action) -> Result<(), Error> {
        match action {
            Action::KillGateway(gateway) if usize::from(gateway.0) < self.gateways.len() => {
                self.kill(gateway).await?;
                self.restart(gateway).await
            }
            Action::RestartStore => self.restart_store().await,
            _ => Ok(()),
        }
    }

    async fn kill(&mut self, gateway: GatewayId) -> Result<(), Error> {
        self.gateways[usize::from(gateway.0)].kill().await?;
        let at = self.recorder.now();
        self.recorder
            .fault(FaultEvent::GatewayKilled { gateway, at });
        self.progress.event(format_args!("SIGKILL {gateway}"));
        Ok(())
    }

    async fn restart(&mut self, gateway: GatewayId) -> Result<(), Error> {
        let give_up = tokio::time::Instant::now() + RESTART_FOR;
        // A gateway exits when its store fails it at start other than by refusing the connection
        // (which it waits out, not ready): on SQLite, while a gateway stopped inside a write
        // transaction holds the file's lock past the busy timeout; on a server, while a
        // partition's proxy cuts each connection it opens. It is started again, as a supervisor
        // would.
        while let Err(error) = self.gateways[usize::from(gateway.0)].restart().await {
            if tokio::time::Instant::now() > give_up || !matches!(error, Error::Exited { .. }) {
                return Err(error);
            }
            self.progress.event(format_args!(
                "{gateway} exited while starting ({error}): starting it again"
            ));
            tokio::time::sleep(RESTART_BACKOFF).await;
        }
        let at = self.recorder.now();
        self.recorder
            .fault(FaultEvent::GatewayRestarted { gateway, at });
        self.progress.event(format_args!("{gateway} is back"));
        Ok(())
    }

    async fn restart_store(&mut self) -> Result<(), Error> {
        let down = self.recorder.now();
        match &mut *self.store {
            // The store is in the gateways: every one dies (but a soak's spared one), and comes
            // back on the same file.
            StoreServer::Sqlite(_) => {
                self.progress
                    .event("SQLite store restart: every gateway is killed");
                let all: Vec<GatewayId> = (0..self.gateways.len())
                    .map(|i| GatewayId(u8::try_from(i).expect("at most 2 gateways")))
                    .filter(|&gateway| Some(gateway) != self.spared)
                    .collect();
                for &gateway in &all {
                    self.kill(gateway).await?;
                }
                for &gateway in &all {
                    self.restart(gateway).await?;
                }
            }
            StoreServer::Postgres(server) => {
                self.progress
                    .event("PostgreSQL crashes (immediate shutdown)");
                server.restart().await?;
            }
            StoreServer::Mysql(server) => {
                self.progress.event("SIGKILL mariadbd");
                server.restart().await?;
            }
            StoreServer::Redis(server) => {
                self.progress.event("SIGKILL redis-server");
                server.restart().await?;
            }
            StoreServer::RedisCluster(cluster) => {
                // A failover has an event of its own: the check needs the promotion.
                return failover(cluster, self.recorder, self.progress).await;
            }
        }
        let up = self.recorder.now();
        self.recorder.fault(FaultEvent::StoreRestarted { down, up });
        self.progress.event(format_args!(
            "the store is back after {} ms",
            (up.as_duration() - down.as_duration()).as_millis()
        ));
        Ok(())
    }
}

/// A Redis Cluster's store restart: a master dies and its replica takes over.
async fn failover(
    cluster: &mut RedisCluster,
    recorder: &Recorder,
    progress: &Progress,
) -> Result<(), Error> {
    progress.event("SIGKILL a Redis Cluster master");
    if let FaultEvent::Failover {
        port,
        down,
        promoted,
        up,
    } = cluster.failover(recorder).await?
    {
        progress.event(format_args!(
            "master :{port} failed over: its replica took over after {} ms, and it is back as a \
             replica after {} ms",
            (promoted.as_duration() - down.as_duration()).as_millis(),
            (up.as_duration() - down.as_duration()).as_millis(),
        ));
    }
    Ok(())
}
