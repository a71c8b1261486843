//! The admin listener of a running gateway, served until the gateway stops.

use std::future::IntoFuture as _;

use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    AdminToken,
    admin::{self, AdminState},
};

/// Serves the admin routes on `listener` in a task of their own until `shutdown` is cancelled.
pub(super) fn spawn(
    listener: TcpListener,
    state: AdminState,
    token: Option<AdminToken>,
    shutdown: CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(
        axum::serve(listener, admin::router(state, token))
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .into_future(),
    )
}
