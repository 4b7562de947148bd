//! The stack's Redis over TLS, as the users of deploy/redis/users.acl (which `scripts/stack up` loads):
//! the CA and client certificate, connections as a user, key prefixes under the users' key pattern, the
//! binaries run as their users until they exit, and a Redis Cluster of a test's own that speaks TLS only
//! (the stack's cluster has no TLS port). The harness sets things up as Redis's default user.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use shared::connection::{Connection, Settings};
use shared::redis_tls::TlsOptions;
use shared::redis_url::Target;

use crate::kafka::Topics;
use crate::runner::{self, output_within, KillOnDrop};
use crate::{env, eventually, redis_cluster, unique};

/// The users' file, as an operator gets it.
pub const USERS: &str = include_str!("../../deploy/redis/users.acl");

/// A prefix of the test's own under the users' key pattern `rm:*`.
pub fn prefix() -> String {
    format!("rm:{}", unique("tls"))
}

/// The stack's CA, and with `client_certificate` the client certificate it signed.
pub fn tls(client_certificate: bool) -> TlsOptions {
    let file = |name: &str| Some(env(name).into());
    TlsOptions {
        ca_file: file("TLS_CA_FILE"),
        client_cert_file: if client_certificate { file("TLS_CLIENT_CERT_FILE") } else { None },
        client_key_file: if client_certificate { file("TLS_CLIENT_KEY_FILE") } else { None },
    }
}

/// A connection as `url`'s user over TLS, trusting the stack's CA.
pub async fn connect_as(url: &str) -> Connection {
    let target = Target::new(url, false);
    let tls = tls(false).load(&target).expect("the stack's CA reads");
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 0 };
    Connection::connect_with(&target, settings, &tls).await.expect("the user connects")
}

/// The stack's single Redis as its default user: on its plain port, or (when the suite runs against the
/// cluster, whose URLs REDIS_URL then lists) on its TLS port.
pub async fn admin() -> Connection {
    if redis_cluster() {
        connect_as(&env("REDIS_TLS_URL")).await
    } else {
        let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 0 };
        Connection::connect(&Target::Single(env("REDIS_URL")), settings).await.expect("redis is reachable")
    }
}

/// The projector's arguments for a test (see [`runner::args`]), on `url`: one server, whatever
/// `REDIS_CLUSTER` says (the suite's run against the cluster sets it).
pub fn projector_args(topics: &Topics, prefix: &str, url: &str) -> Vec<String> {
    let mut args = runner::args(topics, prefix, &unique("g"));
    let at = args.iter().position(|arg| arg == "--redis-url").expect("a Redis URL");
    args[at + 1] = url.to_string();
    args.push("--redis-cluster=false".into());
    args
}

/// Runs the projector binary under `prefix` on `url` with `extra` options (a subcommand among them) until
/// it exits (it must, within 30 s).
pub async fn run_projector(topics: &Topics, prefix: &str, url: &str, extra: &[&str]) -> Output {
    let mut command = Command::new(runner::binary());
    command.args(projector_args(topics, prefix, url)).args(extra).env("RUST_LOG", "warn");
    without_backtraces(&mut command);
    tokio::task::spawn_blocking(move || output_within(command, Duration::from_secs(30))).await.unwrap()
}

/// Runs the query-api binary on `url` with `extra` options until it exits (it must, within 30 s).
pub async fn run_api(url: &str, extra: &[&str]) -> Output {
    let binary = runner::binary().with_file_name("query-api");
    assert!(binary.exists(), "{} is missing: run `cargo build -p query-api` first", binary.display());
    let mut command = Command::new(binary);
    command
        .args(["--listen-addr", "127.0.0.1:0", "--admin-addr", "off", "--s3-disabled", "true"])
        .args(["--key-prefix", &prefix(), "--redis-url", url, "--redis-cluster=false"])
        .args(extra)
        .env("RUST_LOG", "warn");
    without_backtraces(&mut command);
    tokio::task::spawn_blocking(move || output_within(command, Duration::from_secs(30))).await.unwrap()
}

/// As a binary runs when deployed: a backtrace printed under an error is asked for with these variables.
pub fn without_backtraces(command: &mut Command) {
    command.env_remove("RUST_BACKTRACE").env_remove("RUST_LIB_BACKTRACE");
}

/// The one line a binary that refused to start printed; fails unless it exited with an error, printing
/// that one line and no password. Before it may come the warnings of attempts to connect that timed out
/// (a busy machine: the check went on until Redis answered), and nothing else.
pub fn the_one_line(binary: &str, output: &Output, password: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{binary} started: {stderr}");
    let retried = |line: &str| {
        line.contains("WARN")
            && line.contains("timed out")
            && (line.contains("trying again") || line.contains("not reachable yet"))
    };
    let lines: Vec<&str> = stderr.lines().filter(|line| !line.trim().is_empty() && !retried(line)).collect();
    assert_eq!(lines.len(), 1, "{binary} printed one line:\n{stderr}");
    assert!(!stderr.contains(password), "{binary} printed the password: {stderr}");
    lines[0].to_string()
}

/// The password of a URL of the stack's users.
pub fn password(url: &str) -> String {
    let userinfo = url.split_once("://").and_then(|(_, rest)| rest.rsplit_once('@')).expect("credentials").0;
    userinfo.split_once(':').expect("a password").1.to_string()
}

/// A Redis of a test's own that speaks TLS only and requires every client to present a certificate the
/// stack's CA signed (`--tls-auth-clients yes`; the stack's own Redis makes one optional), with `users`
/// (lines of an ACL file) loaded.
pub struct TlsServer {
    port: u16,
    dir: std::path::PathBuf,
    _node: KillOnDrop,
}

impl TlsServer {
    pub async fn start(users: &[String]) -> Self {
        let ca = env("TLS_CA_FILE");
        let tls = std::path::Path::new(&ca).parent().expect("the stack's TLS directory").to_path_buf();
        let dir = std::env::temp_dir().join(unique("tls-server"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", "0", "--tls-port", &port.to_string()])
            .args(["--tls-cert-file", tls.join("server.pem").to_str().unwrap()])
            .args(["--tls-key-file", tls.join("server.key").to_str().unwrap()])
            .args(["--tls-ca-cert-file", &ca, "--tls-auth-clients", "yes"])
            .args(["--save", "", "--appendonly", "no", "--dir", dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let server = Self { port, dir, _node: KillOnDrop(child) };
        eventually(Duration::from_secs(10), "the TLS server to start", || async {
            (server.cli(&["PING"]) == "PONG").then_some(())
        })
        .await;
        for user in users {
            let mut args = vec!["ACL", "SETUSER"];
            args.extend(user.split_whitespace().skip(1));
            assert_eq!(server.cli(&args), "OK", "{user}");
        }
        server
    }

    /// Runs `redis-cli` against it as the default user, presenting the stack's client certificate.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", &env("TLS_CA_FILE")])
            .args(["--cert", &env("TLS_CLIENT_CERT_FILE"), "--key", &env("TLS_CLIENT_KEY_FILE")])
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Its `rediss://` URL, as `user` with `password`.
    pub fn url(&self, user: &str, password: &str) -> String {
        format!("rediss://{user}:{password}@127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A three-primary Redis Cluster of a test's own that speaks TLS only (clients and its bus), with the
/// stack's certificates (`TLS_CA_FILE`, and the server's certificate beside it), and users loaded on
/// every node.
pub struct TlsCluster {
    ports: Vec<u16>,
    dir: std::path::PathBuf,
    nodes: Vec<KillOnDrop>,
}

/// A free port whose cluster bus port (10000 above) is free too.
fn free_port() -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if port < 55000 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

impl TlsCluster {
    /// Starts the nodes, makes them a cluster and loads `users` (lines of an ACL file) on each node.
    pub async fn start(users: &[String]) -> Self {
        let ca = env("TLS_CA_FILE");
        let tls = std::path::Path::new(&ca).parent().expect("the stack's TLS directory").to_path_buf();
        let dir = std::env::temp_dir().join(unique("tls-cluster"));
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut nodes = Vec::new();
        for port in &ports {
            let node = dir.join(port.to_string());
            std::fs::create_dir_all(&node).unwrap();
            let child = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", "0", "--tls-port", &port.to_string()])
                .args(["--tls-cert-file", tls.join("server.pem").to_str().unwrap()])
                .args(["--tls-key-file", tls.join("server.key").to_str().unwrap()])
                .args(["--tls-ca-cert-file", &ca, "--tls-auth-clients", "optional", "--tls-cluster", "yes"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                .args(["--save", "", "--appendonly", "no", "--dir", node.to_str().unwrap()])
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            nodes.push(KillOnDrop(child));
        }
        let cluster = Self { ports, dir, nodes };
        for port in &cluster.ports {
            eventually(Duration::from_secs(10), "a TLS cluster node to start", || async {
                (cluster.cli(*port, &["PING"]) == "PONG").then_some(())
            })
            .await;
        }
        let addresses: Vec<String> = cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut create = cluster.redis_cli();
        create.args(["--cluster", "create"]).args(&addresses).args(["--cluster-replicas", "0", "--cluster-yes"]);
        let created = create.output().unwrap();
        assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stdout));
        for port in &cluster.ports {
            for user in users {
                let mut args = vec!["ACL", "SETUSER"];
                args.extend(user.split_whitespace().skip(1));
                assert_eq!(cluster.cli(*port, &args), "OK", "{user}");
            }
        }
        eventually(Duration::from_secs(30), "the TLS cluster to be ok", || async {
            let ok = |port: &u16| cluster.cli(*port, &["CLUSTER", "INFO"]).contains("cluster_state:ok");
            cluster.ports.iter().all(ok).then_some(())
        })
        .await;
        cluster
    }

    fn redis_cli(&self) -> Command {
        let mut command = Command::new("redis-cli");
        command.args(["--tls", "--cacert", &env("TLS_CA_FILE")]);
        command
    }

    /// Runs `redis-cli` against one node as the default user.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = self.redis_cli().args(["-p", &port.to_string()]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// What the nodes refused to their users (`ACL LOG`): empty when they refused nothing.
    pub fn denials(&self) -> String {
        self.ports.iter().map(|port| self.cli(*port, &["ACL", "LOG"])).collect::<Vec<_>>().join("\n").trim().to_string()
    }

    /// The nodes' `rediss://` URLs, as `user` with `password`.
    pub fn urls(&self, user: &str, password: &str) -> String {
        let urls: Vec<String> =
            self.ports.iter().map(|port| format!("rediss://{user}:{password}@127.0.0.1:{port}")).collect();
        urls.join(",")
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
