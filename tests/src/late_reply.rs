//! A loopback TCP proxy in front of a Redis that holds back its replies for a while once a client sends a
//! chosen command: the command is carried out, and the client's wait for its reply times out. What a client
//! meets when the network or a busy machine stalls after the server acted: a write whose outcome it
//! does not know.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Forwards every connection to `upstream`; the first time a client sends bytes holding every one of
/// `trigger`, the replies on that connection wait `delay` from then. Stops when dropped.
pub struct LateReply {
    pub port: u16,
    fired: Arc<Mutex<Option<Instant>>>,
    held: Arc<Mutex<Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LateReply {
    pub async fn start(upstream: &str, trigger: Vec<Vec<u8>>, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let (fired, held) = (Arc::new(Mutex::new(None)), Arc::new(Mutex::new(Vec::new())));
        let (upstream, trigger, once, kept) = (upstream.to_string(), Arc::new(trigger), fired.clone(), held.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (trigger, once, kept) = (trigger.clone(), once.clone(), kept.clone());
                tokio::spawn(forward(client, server, trigger, once, kept, delay));
            }
        });
        Self { port, fired, held, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether the trigger was sent.
    pub fn fired(&self) -> bool {
        self.fired.lock().unwrap().is_some()
    }

    /// The replies held back: what the server answered the trigger (and whatever else was in flight).
    pub fn held(&self) -> Vec<u8> {
        self.held.lock().unwrap().clone()
    }
}

async fn forward(
    client: TcpStream,
    server: TcpStream,
    trigger: Arc<Vec<Vec<u8>>>,
    once: Arc<Mutex<Option<Instant>>>,
    kept: Arc<Mutex<Vec<u8>>>,
    delay: Duration,
) {
    let ((mut client_in, mut client_out), (mut server_in, mut server_out)) = (client.into_split(), server.into_split());
    let hold_until: Arc<Mutex<Option<Instant>>> = Arc::default();
    let held = hold_until.clone();
    let requests = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_in.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            if trigger.iter().all(|t| contains(chunk, t)) {
                let mut once = once.lock().unwrap();
                if once.is_none() {
                    *once = Some(Instant::now());
                    *held.lock().unwrap() = Some(Instant::now() + delay);
                }
            }
            if server_out.write_all(chunk).await.is_err() {
                return;
            }
        }
    };
    let replies = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_in.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let until = *hold_until.lock().unwrap();
            if let Some(until) = until.filter(|until| Instant::now() < *until) {
                kept.lock().unwrap().extend_from_slice(&buf[..n]);
                tokio::time::sleep_until(until).await;
            }
            if client_out.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

impl Drop for LateReply {
    fn drop(&mut self) {
        self.task.abort();
    }
}
