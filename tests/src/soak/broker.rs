//! A Kafka-protocol broker of the soak's own (tansu on a free port, its data in SQLite), so that the soak
//! can SIGKILL it and start it again on the same data without disturbing anything else on the stack.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::unique;

pub struct OwnBroker {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl OwnBroker {
    /// Starts tansu (it must be on `PATH`: `scripts/stack up` installs it) and waits until it answers.
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(unique("soak-broker"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut broker = Self { port, dir, child: None };
        broker.restart();
        broker
    }

    /// `host:port`, as `KAFKA_BROKERS` takes it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it again on the same data (it must be down) and waits until it accepts connections.
    pub fn restart(&mut self) {
        let url = format!("tcp://{}", self.address());
        let child = Command::new("tansu")
            .args(["broker", "--cluster-id", "soak", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .current_dir(&self.dir)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tansu is on PATH (scripts/stack up installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(self.address()).is_err() {
            assert!(Instant::now() < deadline, "tansu on port {} did not come up", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: whatever it had not written to its database is lost to it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
