//! A loopback TCP proxy that forwards to a real server and cuts the first connection whose client sends a
//! given string (a key name, say), the moment it does: a connection lost in the middle of a sequence of
//! commands, as a Redis restart or failover cuts it, at a point the test chooses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Cutting {
    pub port: u16,
    cut: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Cutting {
    /// Forwards to `upstream` (`host:port`); cuts the first connection that sends `pattern`.
    pub async fn start(upstream: &str, pattern: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let (upstream, pattern, cutting) = (upstream.to_string(), pattern.as_bytes().to_vec(), cut.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                tokio::spawn(forward(client, server, pattern.clone(), cutting.clone()));
            }
        });
        Self { port, cut, task }
    }

    /// Whether it has cut a connection.
    pub fn has_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

async fn forward(client: TcpStream, server: TcpStream, pattern: Vec<u8>, cut: Arc<AtomicBool>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let replies = tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
    let mut buffer = vec![0; 64 * 1024];
    while let Ok(read) = client_read.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let sent = &buffer[..read];
        if sent.windows(pattern.len()).any(|w| w == pattern) && !cut.swap(true, Ordering::SeqCst) {
            break;
        }
        if server_write.write_all(sent).await.is_err() {
            break;
        }
    }
    // Both directions end: the client reads end of file, then meets a broken pipe.
    replies.abort();
}

impl Drop for Cutting {
    fn drop(&mut self) {
        self.task.abort();
    }
}
