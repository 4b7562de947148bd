//! A loopback TCP forwarder standing for a fixed primary address: the service address, virtual IP or
//! managed endpoint that an operator's failover (Redis Sentinel's, a managed service's) moves from one
//! Redis to another, while the clients keep connecting to one address. Moving it cuts every connection
//! made before, as the old primary's end would.

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct FixedAddress {
    pub port: u16,
    upstream: Arc<Mutex<String>>,
    moved: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl FixedAddress {
    /// Forwards every connection to `upstream` (`host:port`) until [`FixedAddress::point_at`] moves it.
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let upstream = Arc::new(Mutex::new(upstream.to_string()));
        let (moved, _) = watch::channel(0);
        let (target, moves) = (upstream.clone(), moved.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let address = target.lock().unwrap().clone();
                let mut moved = moves.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&address).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = moved.changed() => {}
                    }
                });
            }
        });
        Self { port, upstream, moved, task }
    }

    /// The address as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Moves the address to `upstream`: new connections go there, and every one made before is cut.
    pub fn point_at(&self, upstream: &str) {
        *self.upstream.lock().unwrap() = upstream.to_string();
        self.moved.send_modify(|n| *n += 1);
    }
}

impl Drop for FixedAddress {
    fn drop(&mut self) {
        self.task.abort();
    }
}
