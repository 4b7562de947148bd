//! A Kafka-protocol broker of the soak's own, so that the soak can break it without disturbing anything
//! else on the stack: tansu on a free port, its data in SQLite, SIGKILLed and started again on the same
//! data; or, for the group leg (docs/testing.md), librdkafka's mock cluster (`demo-kafka`), whose broker is
//! taken down and brought up through its control port (its data lives in that process's memory, so the
//! process itself is never killed).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{broker_control, runner, unique};

pub struct OwnBroker {
    dir: PathBuf,
    kind: Kind,
    up: bool,
}

enum Kind {
    Tansu { port: u16, child: Option<Child> },
    Mock { child: Child, brokers: String, control: String },
}

impl OwnBroker {
    /// Starts tansu (it must be on `PATH`: `scripts/stack up` installs it) and waits until it answers.
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut broker = Self { dir: dir(), kind: Kind::Tansu { port, child: None }, up: false };
        broker.restart();
        broker
    }

    /// Starts the mock cluster (`demo-kafka`, built beside the projector) with one broker and no topics,
    /// and waits until it says where it and its control port are.
    pub fn start_mock() -> Self {
        let dir = dir();
        let (brokers_file, control_file) = (dir.join("brokers"), dir.join("control"));
        let mut child = Command::new(runner::binary().with_file_name("demo-kafka"))
            .args(["--topics", ""])
            .arg("--brokers-file")
            .arg(&brokers_file)
            .arg("--control-file")
            .arg(&control_file)
            .stdout(Stdio::null())
            .spawn()
            .expect("demo-kafka is built beside the projector (cargo build --workspace --bins)");
        let deadline = Instant::now() + Duration::from_secs(30);
        // It writes the control file, then the brokers file once its brokers answer.
        while !brokers_file.exists() {
            if let Some(status) = child.try_wait().expect("demo-kafka's status") {
                panic!("demo-kafka exited before its brokers were up ({status})");
            }
            assert!(Instant::now() < deadline, "demo-kafka wrote no brokers file within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        let read = |file: &PathBuf| std::fs::read_to_string(file).unwrap().trim().to_string();
        let (brokers, control) = (read(&brokers_file), read(&control_file));
        Self { dir, kind: Kind::Mock { child, brokers, control }, up: true }
    }

    /// `host:port`, as `KAFKA_BROKERS` takes it.
    pub fn address(&self) -> String {
        match &self.kind {
            Kind::Tansu { port, .. } => format!("127.0.0.1:{port}"),
            Kind::Mock { brokers, .. } => brokers.clone(),
        }
    }

    /// The mock's control port (`MOCK_KAFKA_CONTROL`), for the mock only.
    pub fn control(&self) -> Option<&str> {
        match &self.kind {
            Kind::Tansu { .. } => None,
            Kind::Mock { control, .. } => Some(control),
        }
    }

    /// Brings it back (it must be down): tansu starts again on the same data, and is waited for until
    /// it accepts connections; the mock's broker comes up.
    pub fn restart(&mut self) {
        let address = self.address();
        match &mut self.kind {
            Kind::Tansu { child, .. } => {
                let url = format!("tcp://{address}");
                let started = Command::new("tansu")
                    .args(["broker", "--cluster-id", "soak", "--listener-url", &url, "--advertised-listener-url", &url])
                    .args(["--storage-engine", "sqlite://tansu.db"])
                    .current_dir(&self.dir)
                    .env("RUST_LOG", "error")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("tansu is on PATH (scripts/stack up installs it)");
                *child = Some(started);
                let deadline = Instant::now() + Duration::from_secs(30);
                while std::net::TcpStream::connect(&address).is_err() {
                    assert!(Instant::now() < deadline, "tansu on {address} did not come up");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Kind::Mock { control, .. } => broker_control::order(control, "up 1"),
        }
        self.up = true;
    }

    /// Takes it down: tansu is SIGKILLed (whatever it had not written to its database is lost to it);
    /// the mock's broker goes down, keeping what it holds.
    pub fn kill(&mut self) {
        match &mut self.kind {
            Kind::Tansu { child, .. } => {
                if let Some(mut child) = child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            Kind::Mock { control, .. } if self.up => broker_control::order(control, "down 1"),
            Kind::Mock { .. } => {}
        }
        self.up = false;
    }
}

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("soak-broker"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        match &mut self.kind {
            Kind::Tansu { .. } => self.kill(),
            Kind::Mock { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
