//! The fault injector: takes each action of the [`Schedule`] at its time, on the run's
//! gateways, store and upstream, and records it in the history.

use std::time::Duration;

use crate::{
    Error, GatewayId, Schedule, Stamp,
    faults::Action,
    gateway_process::GatewayProcess,
    history::{FaultEvent, Recorder},
    progress::Progress,
    store::StoreServer,
    upstream::Upstream,
};

/// What the faults act on.
pub(crate) struct Injector<'a> {
    pub(crate) gateways: &'a mut [GatewayProcess],
    pub(crate) store: &'a mut StoreServer,
    pub(crate) upstream: &'a Upstream,
    pub(crate) recorder: &'a Recorder,
    pub(crate) progress: &'a Progress,
    slow_since: Option<Stamp>,
    failing_since: Option<Stamp>,
}

impl<'a> Injector<'a> {
    pub(crate) fn new(
        gateways: &'a mut [GatewayProcess],
        store: &'a mut StoreServer,
        upstream: &'a Upstream,
        recorder: &'a Recorder,
        progress: &'a Progress,
    ) -> Self {
        Self {
            gateways,
            store,
            upstream,
            recorder,
            progress,
            slow_since: None,
            failing_since: None,
        }
    }

    /// Takes every action of `schedule` at its time after `start`, then waits until
    /// `start + duration` and ends the windows still open. Every gateway and the store are up
    /// when it returns.
    pub(crate) async fn run(
        &mut self,
        schedule: &Schedule,
        start: Duration,
        duration: Duration,
    ) -> Result<(), Error> {
        for fault in schedule.faults() {
            self.sleep_until(start + fault.at).await;
            self.apply(fault.action).await?;
        }
        self.sleep_until(start + duration).await;
        self.apply(Action::EndSlow).await?;
        self.apply(Action::EndErrors).await
    }

    async fn sleep_until(&self, at: Duration) {
        tokio::time::sleep(at.saturating_sub(self.recorder.now().as_duration())).await;
    }

    async fn apply(&mut self, action: Action) -> Result<(), Error> {
        match action {
            Action::KillGateway(gateway) => {
                if usize::from(gateway.0) < self.gateways.len() {
                    self.kill(gateway).await?;
                    self.restart(gateway).await?;
                }
            }
            Action::RestartStore => self.restart_store().await?,
            Action::StartSlow => {
                self.upstream.set_slow(true);
                self.slow_since = Some(self.recorder.now());
                self.progress.event("the upstream is slow");
            }
            Action::EndSlow => {
                self.upstream.set_slow(false);
                if let Some(from) = self.slow_since.take() {
                    let until = self.recorder.now();
                    self.recorder
                        .fault(FaultEvent::UpstreamSlow { from, until });
                    self.progress.event("the upstream is fast again");
                }
            }
            Action::StartErrors => {
                self.upstream.set_failing(true);
                self.failing_since = Some(self.recorder.now());
                self.progress.event("the upstream answers 503");
            }
            Action::EndErrors => {
                self.upstream.set_failing(false);
                if let Some(from) = self.failing_since.take() {
                    let until = self.recorder.now();
                    self.recorder
                        .fault(FaultEvent::UpstreamFailing { from, until });
                    self.progress.event("the upstream executes again");
                }
            }
        }
        Ok(())
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
        self.gateways[usize::from(gateway.0)].restart().await?;
        let at = self.recorder.now();
        self.recorder
            .fault(FaultEvent::GatewayRestarted { gateway, at });
        self.progress.event(format_args!("{gateway} is back"));
        Ok(())
    }

    async fn restart_store(&mut self) -> Result<(), Error> {
        let down = self.recorder.now();
        match &mut *self.store {
            // The store is in the gateways: every one dies, and comes back on the same file.
            StoreServer::Sqlite(_) => {
                self.progress
                    .event("SQLite store restart: every gateway is killed");
                let all: Vec<GatewayId> = (0..self.gateways.len())
                    .map(|i| GatewayId(u8::try_from(i).expect("at most 2 gateways")))
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
            StoreServer::Redis(server) => {
                self.progress.event("SIGKILL redis-server");
                server.restart().await?;
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
