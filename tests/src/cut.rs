//! A loopback TCP proxy that forwards to a real server and cuts the first connection whose client sends a
//! given string (a key name, say), the moment it does: a connection lost in the middle of a sequence of
//! commands, as a Redis restart or failover cuts it, at a point the test chooses. Cut before the command
//! reaches the server ([`Cutting::start`]), or after it did but before its reply reaches the client
//! ([`Cutting::after_sending`]): the call whose outcome its caller cannot know.

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
    /// Forwards to `upstream` (`host:port`); cuts the first connection that sends `pattern`, before what
    /// it sent reaches the server.
    pub async fn start(upstream: &str, pattern: &str) -> Self {
        Self::listen(upstream, pattern, false, Arc::new(|| {})).await
    }

    /// [`Cutting::start`], doing `meanwhile` before the client's side is cut (what it sent never reached
    /// the server): what the client finds when it asks again after the cut.
    pub async fn start_then(upstream: &str, pattern: &str, meanwhile: impl Fn() + Send + Sync + 'static) -> Self {
        Self::listen(upstream, pattern, false, Arc::new(meanwhile)).await
    }

    /// Forwards to `upstream` (`host:port`); the first connection that sends `pattern` loses every reply
    /// from then on: what it sent reaches the server, and the client's side is cut.
    pub async fn after_sending(upstream: &str, pattern: &str) -> Self {
        Self::listen(upstream, pattern, true, Arc::new(|| {})).await
    }

    async fn listen(upstream: &str, pattern: &str, send: bool, meanwhile: OnCut) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let (upstream, pattern, cutting) = (upstream.to_string(), pattern.as_bytes().to_vec(), cut.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                tokio::spawn(forward(client, server, pattern.clone(), cutting.clone(), send, meanwhile.clone()));
            }
        });
        Self { port, cut, task }
    }

    /// Whether it has cut a connection.
    pub fn has_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

/// What is done when the connection is cut, before the client's side is.
type OnCut = Arc<dyn Fn() + Send + Sync>;

async fn forward(
    client: TcpStream,
    server: TcpStream,
    pattern: Vec<u8>,
    cut: Arc<AtomicBool>,
    send: bool,
    meanwhile: OnCut,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Replies are forwarded until this connection is cut: from then on they are read and dropped.
    let losing = Arc::new(AtomicBool::new(false));
    let lose = losing.clone();
    let mut replies = tokio::spawn(async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(read) = server_read.read(&mut buffer).await {
            if read == 0 || losing.load(Ordering::SeqCst) || client_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
    });
    let mut buffer = vec![0; 64 * 1024];
    while let Ok(read) = client_read.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let sent = &buffer[..read];
        if sent.windows(pattern.len()).any(|w| w == pattern) && !cut.swap(true, Ordering::SeqCst) {
            if send {
                lose.store(true, Ordering::SeqCst);
                let _ = server_write.write_all(sent).await;
                // Until the server answers (the reply is dropped, and the replies end): it ran the command.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), &mut replies).await;
            }
            tokio::task::block_in_place(|| meanwhile());
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
