//! A loopback TCP proxy that accepts connections and says nothing for a while, then forwards them to a real
//! server: what a binary meets at start on a busy machine or behind a slow network, where its first
//! attempts to connect time out before the server's real answer (a refusal, say) arrives.

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Forwards to `upstream` from `silent_for` after it started; until then, connections are accepted and
/// held without a byte. Stops when dropped.
pub struct Stalling {
    pub port: u16,
    /// When it starts forwarding.
    pub opens: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl Stalling {
    pub async fn start(upstream: &str, silent_for: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let (upstream, opens) = (upstream.to_string(), Instant::now() + silent_for);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(opens).await;
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Self { port, opens, task }
    }

    /// Starts one in front of the server of `url` (`scheme://[userinfo@]host:port`); returns it and `url`
    /// with its port in place of the server's.
    pub async fn before(url: &str, silent_for: Duration) -> (Self, String) {
        let url = url.trim_end_matches('/');
        let (head, port) = url.rsplit_once(':').expect("a URL with a port");
        assert!(port.chars().all(|c| c.is_ascii_digit()), "{url} ends with its port");
        let host = head.rsplit_once('@').or_else(|| head.split_once("://")).map_or(head, |(_, host)| host);
        let stalling = Self::start(&format!("{host}:{port}"), silent_for).await;
        let proxied = format!("{head}:{}", stalling.port);
        (stalling, proxied)
    }
}

impl Drop for Stalling {
    fn drop(&mut self) {
        self.task.abort();
    }
}
