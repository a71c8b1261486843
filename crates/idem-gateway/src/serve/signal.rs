//! The signals that shut the gateway down.

/// Completes on SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this is called, so
/// a signal that arrives before the future is first polled is not lost.
///
/// # Panics
///
/// Outside a Tokio runtime, or when the handlers cannot be installed.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
        let mut interrupt = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
        async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutdown signal received");
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!(signal = "Ctrl-C", "shutdown signal received");
        }
    }
}
