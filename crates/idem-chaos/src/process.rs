//! Child processes of the run: started through `setpriv --pdeathsig KILL`, so that the kernel
//! kills them if the harness dies without cleaning up, with their output appended to a log
//! file of the run's directory, listening on free loopback ports.

use std::{
    ffi::OsStr,
    fs::OpenOptions,
    future::Future,
    net::{SocketAddr, TcpListener},
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Output, Stdio},
    time::Duration,
};

use tokio::{
    process::{Child, Command},
    time::Instant,
};

use crate::Error;

/// How long a process may take to become ready after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// `setpriv [--reuid USER --regid USER --init-groups] --pdeathsig KILL -- PROGRAM`, its output
/// appended to `log`, killed when dropped.
///
/// The parent-death signal belongs to the thread that spawns the child: spawn from the
/// runtime's worker threads (which live as long as the run), never from `spawn_blocking`.
pub(crate) fn supervised(
    program: impl AsRef<OsStr>,
    user: Option<&str>,
    log: &Path,
) -> Result<Command, Error> {
    let mut command = Command::new("setpriv");
    if let Some(user) = user {
        command.args(["--reuid", user, "--regid", user, "--init-groups"]);
    }
    command
        .args(["--pdeathsig", "KILL", "--"])
        .arg(program)
        .stdin(Stdio::null())
        .stdout(append(log)?)
        .stderr(append(log)?)
        .kill_on_drop(true);
    Ok(command)
}

fn append(log: &Path) -> Result<Stdio, Error> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io(format!("open {}", log.display())))?;
    Ok(Stdio::from(file))
}

/// `PROGRAM`, or `setpriv --reuid USER --regid USER --init-groups -- PROGRAM`: a short helper
/// command (`initdb`, `pg_ctl`) run as `user`.
pub(crate) fn as_user(program: impl AsRef<OsStr>, user: Option<&str>) -> Command {
    match user {
        None => Command::new(program),
        Some(user) => {
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid", user, "--regid", user, "--init-groups", "--"])
                .arg(program);
            command
        }
    }
}

/// Waits until `ready` says the process `child` (called `what`, writing to `log`) is ready; an
/// error if it exits first or is not ready within 30 s.
pub(crate) async fn wait_ready<F, Fut>(
    child: &mut Child,
    what: &str,
    log: &Path,
    mut ready: F,
) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(Error::io(format!("watch {what}")))?
        {
            return Err(Error::Exited {
                what: what.to_owned(),
                status,
                log: log.to_owned(),
            });
        }
        if ready().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::NotReady {
                what: what.to_owned(),
                timeout: READY_TIMEOUT,
                log: log.to_owned(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `command` to its end; an error unless it exits 0.
pub(crate) async fn run(mut command: Command, program: &str) -> Result<Output, Error> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(Error::io(format!("run {program}")))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(Error::Command {
            program: program.to_owned(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// A free loopback port, chosen by the system, for a child to listen on.
pub(crate) fn free_port() -> Result<SocketAddr, Error> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(Error::io("find a free port"))
}

/// Creates `dir/name`, the directory of a server that runs as `user` when the harness is root:
/// the run's directory, private to the harness, is opened for `user` to reach, and `dir/name`
/// made `user`'s own.
pub(crate) async fn server_home(
    dir: &Path,
    name: &str,
    user: Option<&str>,
) -> Result<PathBuf, Error> {
    let home = dir.join(name);
    std::fs::create_dir(&home).map_err(Error::io(format!("create {}", home.display())))?;
    if let Some(user) = user {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(Error::io(format!("open the run's directory to {user}")))?;
        let mut chown = Command::new("chown");
        chown.arg(format!("{user}:")).arg(&home);
        run(chown, "chown").await?;
    }
    Ok(home)
}

/// Whether the harness runs as root (PostgreSQL and MariaDB then run as users of their own).
pub(crate) fn is_root() -> bool {
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0)
}
