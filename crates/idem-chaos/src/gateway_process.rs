//! The gateways of a run: real `idem serve` processes that can be SIGKILLed and started again
//! on the same ports, or stopped (SIGSTOP) and continued (SIGCONT).
//!
//! The harness starts them by running its own executable again with the hidden `gateway`
//! subcommand, whose arguments are `idem serve`'s; [`serve`] is that subcommand, running
//! [`idem_gateway::serve`].

use std::{
    ffi::OsString,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use http::StatusCode;
use idem_gateway::{Cli, cli::Command};
use tokio::{process::Child, sync::Mutex};

use crate::{
    Error, GatewayId, Stamp,
    history::Recorder,
    http_client::{HttpClient, get},
    process,
};

/// Runs `idem serve ARGS…` in this process until SIGTERM or SIGINT: the body of the hidden
/// `idem-chaos gateway ARGS…` subcommand.
pub async fn serve(args: Vec<OsString>) -> Result<(), idem_gateway::Error> {
    let argv = ["idem".into(), "serve".into()].into_iter().chain(args);
    let Command::Serve(args) = Cli::parse_from_env_and_file(argv)?.command else {
        unreachable!("the subcommand is serve");
    };
    idem_gateway::serve(&args).await
}

/// How to start the gateways: the program, run as `PROGRAM gateway ARGS…`.
#[derive(Debug, Clone)]
pub struct GatewayProgram(pub PathBuf);

/// One gateway process and the ports it keeps across restarts.
#[derive(Debug)]
pub(crate) struct GatewayProcess {
    id: GatewayId,
    program: PathBuf,
    args: Vec<OsString>,
    listen: SocketAddr,
    admin: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
    running: Running,
    client: HttpClient,
}

/// The process id of a gateway while it is up and ready, shared with the pauses, which run
/// beside kills and restarts: a pause stops only a ready gateway, and continues only the
/// process it stopped (a kill ends a pause).
#[derive(Debug, Clone, Default)]
pub(crate) struct Running(Arc<Mutex<Option<u32>>>);

impl Running {
    /// SIGSTOPs the gateway, first waiting until it is up; the process it stopped, and when.
    pub(crate) async fn suspend(&self, recorder: &Recorder) -> Result<(u32, Stamp), Error> {
        loop {
            {
                let running = self.0.lock().await;
                if let Some(pid) = *running {
                    let at = recorder.now();
                    signal("STOP", pid).await?;
                    return Ok((pid, at));
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGCONTs process `pid`, unless it was killed since it was stopped.
    pub(crate) async fn resume(&self, pid: u32) -> Result<(), Error> {
        // Under the lock: a kill clears the pid before it kills, so the process is not gone.
        let running = self.0.lock().await;
        if *running == Some(pid) {
            signal("CONT", pid).await?;
        }
        Ok(())
    }
}

/// `kill -NAME PID`.
async fn signal(name: &str, pid: u32) -> Result<(), Error> {
    let mut command = tokio::process::Command::new("kill");
    command.args([format!("-{name}"), pid.to_string()]);
    process::run(command, "kill").await.map(drop)
}

impl GatewayProcess {
    /// Starts gateway `id` with `serve_args` (upstream, store, modes) on two free loopback
    /// ports, its output in `dir`, and waits until it is ready.
    pub(crate) async fn start(
        id: GatewayId,
        program: &GatewayProgram,
        serve_args: Vec<OsString>,
        dir: &Path,
        client: HttpClient,
    ) -> Result<Self, Error> {
        let listen = process::free_port()?;
        let admin = process::free_port()?;
        let mut args: Vec<OsString> = vec!["gateway".into()];
        args.extend(serve_args);
        args.extend(
            [
                "--listen".to_owned(),
                listen.to_string(),
                "--admin-listen".to_owned(),
                admin.to_string(),
            ]
            .map(OsString::from),
        );
        let mut gateway = Self {
            id,
            program: program.0.clone(),
            args,
            listen,
            admin,
            log: dir.join(format!("gateway-{}.log", id.0)),
            child: None,
            running: Running::default(),
            client,
        };
        gateway.restart().await?;
        Ok(gateway)
    }

    /// Where the gateway accepts requests.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// `http://ADMIN`.
    pub(crate) fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// Its process id while it is up, for pauses.
    pub(crate) fn running(&self) -> Running {
        self.running.clone()
    }

    /// SIGKILLs the gateway (stopped or not) and waits until it is gone.
    pub(crate) async fn kill(&mut self) -> Result<(), Error> {
        *self.running.0.lock().await = None;
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .await
                .map_err(Error::io(format!("kill {}", self.id)))?;
        }
        Ok(())
    }

    /// Starts the gateway on its ports (again) and waits until its store answers.
    pub(crate) async fn restart(&mut self) -> Result<(), Error> {
        debug_assert!(self.child.is_none(), "the gateway is running");
        let mut command = process::supervised(&self.program, None, &self.log)?;
        command.args(&self.args);
        // The run's settings only: none of the caller's IDEM_* variables.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("IDEM_") {
                command.env_remove(name);
            }
        }
        let mut child = command.spawn().map_err(Error::io(format!(
            "start {} (setpriv, from util-linux)",
            self.id
        )))?;
        let (client, url) = (&self.client, &format!("{}/readyz", self.admin_url()));
        let ready =
            process::wait_ready(&mut child, &self.id.to_string(), &self.log, || async move {
                matches!(get(client, url).await, Ok((StatusCode::OK, _)))
            })
            .await;
        match &ready {
            Ok(()) => *self.running.0.lock().await = child.id(),
            // Gone: nothing to kill, it can be started again.
            Err(Error::Exited { .. }) => return ready,
            Err(_) => {}
        }
        // Kept even when it failed: dropping it kills it.
        self.child = Some(child);
        ready
    }

    /// Stops the gateway with SIGTERM (it finishes what it started), or SIGKILL after 10 s.
    pub(crate) async fn stop(&mut self) {
        *self.running.0.lock().await = None;
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
}
