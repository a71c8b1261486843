//! [`TcpProxy`]: a TCP proxy of the test's own that can take a server away for a while.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A TCP proxy on a free loopback port in front of one server, for an outage the test controls:
/// every connection through it closed at once, and every new one for a while. Clients that are
/// given the proxy's address see the server go away and come back with its data, which stands
/// for a restart where the server cannot keep its data across one (moto's SQS, tansu's memory
/// storage). Stopped, with every connection through it, when dropped.
///
/// # Examples
///
/// ```no_run
/// # async fn test() {
/// use std::time::Duration;
/// use idem_test_support::TcpProxy;
///
/// let proxy = TcpProxy::start("127.0.0.1:9324").await;
/// let endpoint = format!("http://{}", proxy.address()); // give this to the clients
/// proxy.outage(Duration::from_secs(1)).await; // connections cut, refused for a second
/// # }
/// ```
#[derive(Debug)]
pub struct TcpProxy {
    port: u16,
    up: Arc<AtomicBool>,
    /// Cancelled to close every connection opened through the proxy so far.
    connections: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
}

impl TcpProxy {
    /// A proxy to `upstream` (`host:port`), listening on a free loopback port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind a loopback port");
        Self::serve(listener, upstream.to_owned())
    }

    /// A proxy to `upstream` on `port`, for a server that must know its clients' address before
    /// it starts (a Kafka broker's advertised listener).
    ///
    /// # Panics
    ///
    /// When `port` cannot be bound.
    pub async fn start_on(port: u16, upstream: &str) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|error| panic!("bind 127.0.0.1:{port}: {error}"));
        Self::serve(listener, upstream.to_owned())
    }

    fn serve(listener: TcpListener, upstream: String) -> Self {
        let port = listener.local_addr().expect("a bound listener").port();
        let stop = CancellationToken::new();
        let up = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(stop.child_token()));
        tokio::spawn({
            let (stop, up, connections) = (stop.clone(), Arc::clone(&up), Arc::clone(&connections));
            async move {
                loop {
                    let accepted = tokio::select! {
                        () = stop.cancelled() => return,
                        accepted = listener.accept() => accepted,
                    };
                    let Ok((mut inbound, _)) = accepted else {
                        continue;
                    };
                    if !up.load(Ordering::SeqCst) {
                        continue; // closed at once: the server is away
                    }
                    let closed = connections.lock().expect("not poisoned").clone();
                    let upstream = upstream.clone();
                    tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(&*upstream).await else {
                            return;
                        };
                        tokio::select! {
                            () = closed.cancelled() => {}
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        }
                    });
                }
            }
        });
        Self {
            port,
            up,
            connections,
            stop,
        }
    }

    /// The proxy's address, `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every connection through the proxy and, for `length`, every new one as soon as it
    /// is accepted; then lets them through again.
    pub async fn outage(&self, length: Duration) {
        self.up.store(false, Ordering::SeqCst);
        let fresh = self.stop.child_token();
        std::mem::replace(&mut *self.connections.lock().expect("not poisoned"), fresh).cancel();
        tokio::time::sleep(length).await;
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An echo server on a free port.
    async fn echo() -> String {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut reader, mut writer) = socket.split();
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                });
            }
        });
        address
    }

    async fn round_trip(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(bytes).await?;
        let mut back = vec![0; bytes.len()];
        stream.read_exact(&mut back).await?;
        Ok(back)
    }

    #[tokio::test]
    async fn an_outage_cuts_the_connections_refuses_new_ones_then_ends() {
        let proxy = Arc::new(TcpProxy::start(&echo().await).await);
        let mut before = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut before, b"ping").await.unwrap(), b"ping");

        let outage = tokio::spawn({
            let proxy = Arc::clone(&proxy);
            async move { proxy.outage(Duration::from_millis(500)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The open connection was closed; a new one is closed as soon as it is accepted.
        assert!(round_trip(&mut before, b"ping").await.is_err());
        let mut during = TcpStream::connect(proxy.address()).await.unwrap();
        assert!(round_trip(&mut during, b"ping").await.is_err());

        outage.await.unwrap();
        let mut after = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut after, b"pong").await.unwrap(), b"pong");
    }
}
