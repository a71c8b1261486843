//! The proxy on a network link of a gateway — to its store's server, or to its upstream — that a
//! partition cuts.
//!
//! The gateway is given the proxy's address instead of the server's. While the link is whole,
//! the proxy copies bytes both ways. While it is cut ([`PartitionMode`]):
//!
//! - **black-holed** one way or both: the proxy stops reading that way, so the bytes stay in its
//!   buffer and the kernel's socket buffers, and the sender stalls once they are full, as behind
//!   a network that drops every packet. A new connection is accepted and stalls unconnected
//!   (its handshake would go unanswered on a real network). When the partition heals, the held
//!   bytes go on, as TCP retransmits them: a partition of seconds is shorter than any TCP
//!   timeout, so the connections survive it, and a request held meanwhile arrives late. A
//!   connection its client closed meanwhile delivers what it held, then closes;
//! - **reset**: every connection is closed with an RST (`SO_LINGER` 0) on both sides, and a new
//!   one is reset as soon as it is accepted.
//!
//! When either side closes a connection or fails, the proxy closes the other side too (a
//! PostgreSQL restart closes the gateway's connections), after the partition if the closing
//! side's way is black-holed. A connection to a server that refuses it is reset.
//!
//! Bounded: at most [`MAX_CONNECTIONS`] at once (more wait in the listen backlog), each holding
//! [`BUFFER`] bytes per direction besides the kernel's socket buffers.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{Semaphore, watch},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

use crate::{
    Error,
    history::{Link, PartitionMode},
};

/// The most connections one link carries at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// The bytes one direction of a connection holds between reading and writing them on.
pub(crate) const BUFFER: usize = 16 * 1024;

/// A link proxy, serving until dropped (its connections are closed then).
#[derive(Debug)]
pub(crate) struct LinkProxy {
    addr: SocketAddr,
    state: watch::Sender<Option<PartitionMode>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The direction of a byte on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToGateway,
}

impl LinkProxy {
    /// Listens on a loopback port, in front of the server at `server`.
    pub(crate) async fn start(server: SocketAddr) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(Error::io("bind a link proxy's port"))?;
        let addr = listener
            .local_addr()
            .map_err(Error::io("read a link proxy's port"))?;
        let (state, _) = watch::channel(None);
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, server, state.subscribe(), stop.clone()));
        Ok(Self {
            addr,
            state,
            stop,
            task,
        })
    }

    /// Where the gateway connects.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the link, as `mode` says, until [`heal`](Self::heal).
    pub(crate) fn cut(&self, mode: PartitionMode) {
        self.state.send_replace(Some(mode));
    }

    /// Lets the traffic flow again.
    pub(crate) fn heal(&self) {
        self.state.send_replace(None);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

/// The link proxies of one gateway: none when the run injects no partition, and none to a
/// SQLite store.
#[derive(Debug, Default)]
pub(crate) struct GatewayLinks {
    pub(crate) store: Option<LinkProxy>,
    pub(crate) upstream: Option<LinkProxy>,
}

impl GatewayLinks {
    /// The proxy on `link`, if there is one.
    pub(crate) fn get(&self, link: Link) -> Option<&LinkProxy> {
        match link {
            Link::Store => self.store.as_ref(),
            Link::Upstream => self.upstream.as_ref(),
        }
    }
}

async fn serve(
    listener: TcpListener,
    server: SocketAddr,
    state: watch::Receiver<Option<PartitionMode>>,
    stop: CancellationToken,
) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&limit).acquire_owned().await else {
            return;
        };
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // Out of file descriptors, say: try again a little later.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (state, stop) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = connection(client, server, state) => {}
                () = stop.cancelled() => {}
            }
            drop(permit);
        });
    }
}

/// Whether `mode` holds the bytes going `direction` (a reset holds everything until the
/// connection is gone).
fn blocks(mode: Option<PartitionMode>, direction: Direction) -> bool {
    match mode {
        None => false,
        Some(PartitionMode::GatewayToServer) => direction == Direction::ToServer,
        Some(PartitionMode::ServerToGateway) => direction == Direction::ToGateway,
        Some(PartitionMode::BothWays | PartitionMode::Reset) => true,
    }
}

async fn connection(
    mut client: TcpStream,
    server: SocketAddr,
    mut state: watch::Receiver<Option<PartitionMode>>,
) {
    // A new connection is reset at once, or stalls while any way is black-holed.
    let mut server = loop {
        let mode = *state.borrow_and_update();
        match mode {
            Some(PartitionMode::Reset) => return reset(&client),
            Some(_) => {
                if state.changed().await.is_err() {
                    return;
                }
            }
            None => match TcpStream::connect(server).await {
                Ok(server) => break server,
                Err(_) => return reset(&client),
            },
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let was_reset = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let (mut to_server, mut to_gateway) = (state.clone(), state.clone());
        tokio::select! {
            () = pump(&mut client_read, &mut server_write, Direction::ToServer, &mut to_server) => false,
            () = pump(&mut server_read, &mut client_write, Direction::ToGateway, &mut to_gateway) => false,
            reset = async { state.wait_for(|mode| *mode == Some(PartitionMode::Reset)).await.is_ok() } => reset,
        }
    };
    if was_reset {
        reset(&client);
        reset(&server);
    }
}

/// Closes `stream` with an RST when it is dropped.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Copies bytes from `from` to `to` while `direction` is not black-holed, until either side
/// closes or fails (seen once the direction is open again, as a FIN would be).
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    direction: Direction,
    state: &mut watch::Receiver<Option<PartitionMode>>,
) {
    let mut buffer = vec![0; BUFFER];
    loop {
        // Not read while black-holed: the sender's bytes wait in the socket buffers.
        if !open(state, direction).await {
            return;
        }
        let read = from.read(&mut buffer).await;
        // Bytes read as the partition began are held until it ends, and so is the end of the
        // stream.
        if !open(state, direction).await {
            return;
        }
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Waits until `direction` is not black-holed; false when the proxy is gone.
async fn open(state: &mut watch::Receiver<Option<PartitionMode>>, direction: Direction) -> bool {
    state
        .wait_for(|mode| !blocks(*mode, direction))
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use std::io::ErrorKind;

    use super::*;

    /// Long enough for bytes to cross loopback many times over: what has not arrived by then
    /// is held.
    const HELD: Duration = Duration::from_millis(300);

    /// A proxy in front of a listener, and one connection through it, accepted by the listener.
    async fn connected() -> (LinkProxy, TcpListener, TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = LinkProxy::start(listener.local_addr().unwrap())
            .await
            .unwrap();
        let client = TcpStream::connect(proxy.addr()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (proxy, listener, client, server)
    }

    async fn read_exactly(stream: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut bytes = vec![0; n];
        stream.read_exact(&mut bytes).await.unwrap();
        bytes
    }

    /// Whether `stream` gets no byte (and no end) within [`HELD`].
    async fn stalls(stream: &mut TcpStream) -> bool {
        let mut byte = [0; 1];
        tokio::time::timeout(HELD, stream.read(&mut byte))
            .await
            .is_err()
    }

    #[tokio::test]
    async fn bytes_pass_both_ways() {
        let (_proxy, _listener, mut client, mut server) = connected().await;
        client.write_all(b"ping").await.unwrap();
        assert_eq!(read_exactly(&mut server, 4).await, b"ping");
        server.write_all(b"pong").await.unwrap();
        assert_eq!(read_exactly(&mut client, 4).await, b"pong");
    }

    #[tokio::test]
    async fn a_black_hole_both_ways_stalls_until_it_heals() {
        let (proxy, listener, mut client, mut server) = connected().await;
        proxy.cut(PartitionMode::BothWays);
        client.write_all(b"ping").await.unwrap();
        server.write_all(b"pong").await.unwrap();
        assert!(stalls(&mut server).await);
        assert!(stalls(&mut client).await);
        // A new connection is accepted, and goes nowhere.
        let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
        late.write_all(b"late").await.unwrap();
        assert!(tokio::time::timeout(HELD, listener.accept()).await.is_err());
        // Healed: the held bytes arrive, and the new connection reaches the server.
        proxy.heal();
        assert_eq!(read_exactly(&mut server, 4).await, b"ping");
        assert_eq!(read_exactly(&mut client, 4).await, b"pong");
        let (mut accepted, _) = listener.accept().await.unwrap();
        assert_eq!(read_exactly(&mut accepted, 4).await, b"late");
        drop(late);
    }

    #[tokio::test]
    async fn one_way_black_holes_pass_the_other_way() {
        let (proxy, _listener, mut client, mut server) = connected().await;
        proxy.cut(PartitionMode::GatewayToServer);
        client.write_all(b"request").await.unwrap();
        server.write_all(b"answer").await.unwrap();
        assert_eq!(read_exactly(&mut client, 6).await, b"answer");
        assert!(stalls(&mut server).await);
        proxy.cut(PartitionMode::ServerToGateway);
        assert_eq!(read_exactly(&mut server, 7).await, b"request");
        server.write_all(b"answer").await.unwrap();
        client.write_all(b"again").await.unwrap();
        assert_eq!(read_exactly(&mut server, 5).await, b"again");
        assert!(stalls(&mut client).await);
        proxy.heal();
        assert_eq!(read_exactly(&mut client, 6).await, b"answer");
    }

    #[tokio::test]
    async fn a_reset_resets_every_connection_and_each_new_one() {
        let (proxy, listener, mut client, mut server) = connected().await;
        proxy.cut(PartitionMode::Reset);
        let mut byte = [0; 1];
        let error = client.read(&mut byte).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionReset);
        let error = server.read(&mut byte).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionReset);
        let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
        let error = new.read(&mut byte).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionReset);
        // Healed, new connections pass again.
        proxy.heal();
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        client.write_all(b"ping").await.unwrap();
        assert_eq!(read_exactly(&mut server, 4).await, b"ping");
    }

    #[tokio::test]
    async fn a_server_that_closes_closes_the_gateways_connection() {
        let (_proxy, _listener, mut client, server) = connected().await;
        drop(server);
        let mut byte = [0; 1];
        assert_eq!(client.read(&mut byte).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_server_that_refuses_resets_the_gateways_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = LinkProxy::start(listener.local_addr().unwrap())
            .await
            .unwrap();
        drop(listener);
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut byte = [0; 1];
        let error = client.read(&mut byte).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionReset);
    }
}
