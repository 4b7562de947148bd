//! A Redis of one test's own, for tests that stop Redis, so that no other test is disturbed.

use std::process::{Child, Command, Stdio};

use crate::unique;

/// A redis-server of a test's own, on a free port, that the test may stop and restart.
pub struct OwnRedis {
    port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(unique("redis"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self { port, dir, child: None };
        redis.restart();
        redis
    }

    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "yes"])
            .args(["--appendfsync", "always", "--dir", self.dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
    }

    /// SIGTERM: Redis flushes its append-only file and exits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
            child.wait().unwrap();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
