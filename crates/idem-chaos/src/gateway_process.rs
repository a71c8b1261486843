//! The gateways of a run: real `idem serve` processes that can be SIGKILLed and started again
//! on the same ports, or stopped (SIGSTOP) and continued (SIGCONT).
//!
//! The harness starts them by running its own executable again with the hidden `gateway`
//! subcommand, whose arguments are `idem serve`'s; [`serve`] is that subcommand, running
//! [`idem_gateway::cli::serve`].

use std::{
    ffi::OsString,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use http::StatusCode;
use idem_core::{Clock, SystemClock, Timestamp};
use idem_gateway::{Cli, Config, Gateway, StoreUrl, cli::Command};
use tokio::{process::Child, sync::Mutex};

use crate::{
    Error, GatewayId, Stamp,
    history::Recorder,
    http_client::{HttpClient, get},
    process,
};

/// Runs `idem serve ARGS…` in this process until SIGTERM or SIGINT: the body of the hidden
/// `idem-chaos gateway ARGS…` subcommand. With [`CLOCK_FILE`] set, a SQLite store reads time
/// from a [`SteppedClock`] that follows that file; the other stores read their server's clock.
pub async fn serve(args: Vec<OsString>) -> Result<(), idem_gateway::Error> {
    let argv = ["idem".into(), "serve".into()].into_iter().chain(args);
    let Command::Serve(args) = Cli::parse_from_env_and_file(argv)?.command else {
        unreachable!("the subcommand is serve");
    };
    let mut config = Config::try_from(&*args)?;
    if let Some(path) = std::env::var_os(CLOCK_FILE) {
        config.store = match config.store {
            StoreUrl::Sqlite(options) => {
                StoreUrl::Sqlite(options.clock(SteppedClock::follow(PathBuf::from(path))))
            }
            other => other,
        };
    }
    idem_gateway::serve::logging::init(args.log.log_format, &args.log.log_level)?;
    let shutdown = idem_gateway::shutdown_signal();
    Gateway::bind(config).await?.run(shutdown).await
}

/// The environment variable that names a gateway's clock file: its offset from true time, in
/// milliseconds, as a decimal number (negative: behind).
pub const CLOCK_FILE: &str = "IDEM_CHAOS_CLOCK_FILE";

/// How often a [`SteppedClock`] reads its file again.
const CLOCK_FILE_POLL: Duration = Duration::from_millis(10);

/// The system clock, ahead of true time by the offset its file holds (behind when negative);
/// a thread reads the file every 10 ms, so that a step takes effect within that. A missing or
/// unreadable file leaves the offset as it was.
#[derive(Debug, Clone)]
pub struct SteppedClock {
    offset: Arc<AtomicI64>,
}

impl SteppedClock {
    /// A clock that follows the offset in `path`; the thread ends with the process.
    pub fn follow(path: PathBuf) -> Self {
        let offset = Arc::new(AtomicI64::new(read_offset(&path).unwrap_or(0)));
        let follower = Arc::clone(&offset);
        std::thread::Builder::new()
            .name("idem-chaos-clock".into())
            .spawn(move || {
                loop {
                    if let Some(read) = read_offset(&path) {
                        follower.store(read, Ordering::Relaxed);
                    }
                    std::thread::sleep(CLOCK_FILE_POLL);
                }
            })
            .expect("the clock's thread starts");
        Self { offset }
    }
}

impl Clock for SteppedClock {
    fn now(&self) -> Timestamp {
        let now = SystemClock.now().as_millis();
        let offset = self.offset.load(Ordering::Relaxed);
        Timestamp::from_millis(now.saturating_add_signed(offset))
    }
}

fn read_offset(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A gateway's clock file, which its [`SteppedClock`] follows across restarts.
#[derive(Debug, Clone)]
pub(crate) struct ClockFile(PathBuf);

impl ClockFile {
    /// Sets the gateway's clock `offset` milliseconds from true time: written whole to a new
    /// file, then renamed over the old one, so that a read never sees half of it.
    pub(crate) fn step(&self, offset: i64) -> Result<(), Error> {
        let next = self.0.with_extension("next");
        std::fs::write(&next, offset.to_string())
            .and_then(|()| std::fs::rename(&next, &self.0))
            .map_err(Error::io(format!("step the clock in {}", self.0.display())))
    }
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
    clock: PathBuf,
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

    /// The process id while the gateway is up and ready.
    pub(crate) async fn pid(&self) -> Option<u32> {
        *self.0.lock().await
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
            clock: dir.join(format!("gateway-{}.clock", id.0)),
            child: None,
            running: Running::default(),
            client,
        };
        gateway.clock().step(0)?;
        gateway.restart().await?;
        Ok(gateway)
    }

    /// Which gateway.
    pub(crate) fn id(&self) -> GatewayId {
        self.id
    }

    /// Its clock file, for clock steps.
    pub(crate) fn clock(&self) -> ClockFile {
        ClockFile(self.clock.clone())
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
        command.env(CLOCK_FILE, &self.clock);
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
