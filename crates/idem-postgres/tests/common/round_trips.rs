//! A TCP proxy that counts the round trips between the store and the server.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// A TCP proxy in front of the server that counts round trips: every burst of bytes the client
/// sends after the server last spoke. A burst that is a lone `Sync` message is sqlx's pool
/// testing a connection it takes back, counted apart.
#[derive(Clone)]
pub struct RoundTripCounter {
    pub address: SocketAddr,
    pub statements: Arc<AtomicUsize>,
    pub pings: Arc<AtomicUsize>,
}

/// The protocol's `Sync` message: what `PgConnection::ping` sends.
const SYNC: &[u8] = b"S\0\0\0\x04";

impl RoundTripCounter {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let counter = Self {
            address: listener.local_addr().unwrap(),
            statements: Arc::default(),
            pings: Arc::default(),
        };
        tokio::spawn({
            let counter = counter.clone();
            async move {
                loop {
                    let (client, _) = listener.accept().await.unwrap();
                    let server = TcpStream::connect(upstream).await.unwrap();
                    tokio::spawn(counter.clone().relay(client, server));
                }
            }
        });
        counter
    }

    async fn relay(self, client: TcpStream, server: TcpStream) {
        let server_spoke = Arc::new(AtomicBool::new(true));
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let upstream = {
            let server_spoke = server_spoke.clone();
            async move {
                let mut buffer = vec![0; 64 * 1024];
                loop {
                    let n = client_read.read(&mut buffer).await?;
                    if n == 0 {
                        return std::io::Result::Ok(());
                    }
                    if server_spoke.swap(false, Ordering::SeqCst) {
                        let counter = match &buffer[..n] {
                            SYNC => &self.pings,
                            _ => &self.statements,
                        };
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    server_write.write_all(&buffer[..n]).await?;
                }
            }
        };
        let downstream = async move {
            let mut buffer = vec![0; 64 * 1024];
            loop {
                let n = server_read.read(&mut buffer).await?;
                if n == 0 {
                    return std::io::Result::Ok(());
                }
                server_spoke.store(true, Ordering::SeqCst);
                client_write.write_all(&buffer[..n]).await?;
            }
        };
        let _ = tokio::try_join!(upstream, downstream);
    }
}
