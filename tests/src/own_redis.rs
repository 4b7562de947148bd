//! A Redis of one test's own, for tests that stop Redis, so that no other test is disturbed.

use std::process::{Child, Command, Stdio};

use shared::keys::slot;
use shared::Keyspace;

use crate::unique;

/// How an own Redis keeps its data across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// An append-only file written before every reply: a restart loses nothing.
    AofAlways,
    /// An append-only file written once a second: `kill -9` loses up to a second of writes.
    AofEverySecond,
    /// Snapshots only, taken when the test says `SAVE`: a restart goes back to the last one.
    Snapshots,
}

/// A redis-server of a test's own, on a free port, that the test may stop and restart.
pub struct OwnRedis {
    port: u16,
    dir: std::path::PathBuf,
    persistence: Persistence,
    cluster: bool,
    child: Option<Child>,
}

/// A loopback port free now; for a cluster node, one whose cluster bus port (10,000 above, which Redis
/// binds too and refuses beyond 65,535) is free as well: a node whose bus port was taken never comes up.
fn free_port(cluster: bool) -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !cluster
            || port.checked_add(10_000).is_some_and(|bus| std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok())
        {
            return port;
        }
    }
}

impl OwnRedis {
    pub fn start() -> Self {
        Self::with(Persistence::AofAlways)
    }

    pub fn with(persistence: Persistence) -> Self {
        Self::node(persistence, false)
    }

    /// A node that can join a Redis Cluster of the test's own ([`OwnCluster`]).
    fn node(persistence: Persistence, cluster: bool) -> Self {
        let port = free_port(cluster);
        let dir = std::env::temp_dir().join(unique("redis"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self { port, dir, persistence, cluster, child: None };
        redis.restart();
        redis
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts it again (it must be stopped) and waits until it answers.
    pub fn restart(&mut self) {
        let persistence: &[&str] = match self.persistence {
            Persistence::AofAlways => &["--appendonly", "yes", "--appendfsync", "always"],
            Persistence::AofEverySecond => &["--appendonly", "yes", "--appendfsync", "everysec"],
            Persistence::Snapshots => &["--appendonly", "no"],
        };
        let child =
            Command::new(crate::redis_server())
                .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", ""])
                .args(persistence)
                .args(["--dir", self.dir.to_str().unwrap()])
                // `DEBUG SLEEP` and `DEBUG SEGFAULT`, for the faults, from redis-cli on loopback.
                .args(["--enable-debug-command", "local"])
                .args(if self.cluster {
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "5000",
                    ][..]
                } else {
                    &[][..]
                })
                .stdout(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{} starts: {e}", crate::redis_server()));
        self.child = Some(child);
        // Answering, its data loaded (a loading Redis answers PING with an error).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.cli(&["PING"]) != "PONG" {
            let exited = self.child.as_mut().and_then(|child| child.try_wait().ok().flatten());
            assert!(exited.is_none(), "redis-server on port {} exited as it started: {exited:?}", self.port);
            assert!(std::time::Instant::now() < deadline, "redis-server on port {} did not come up", self.port);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// SIGKILL: whatever Redis had not written to disk is lost.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Deletes its last snapshot, so that a restart after a kill comes back empty.
    pub fn forget_snapshot(&self) {
        let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
    }

    /// Whether it runs (it was not killed or stopped since it last started).
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// Its `redis-cli` arguments, for a command run in the background.
    pub fn cli_args(&self) -> Vec<String> {
        vec!["-p".into(), self.port.to_string()]
    }

    /// Runs `redis-cli` against it.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// How many times it ran `command` (lower case, as `INFO commandstats` names it) since its statistics
    /// were reset.
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        let line = stats.lines().find(|line| line.starts_with(&format!("cmdstat_{command}:")));
        line.and_then(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok()).unwrap_or(0)
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

/// A three-primary Redis Cluster of a test's own, whose primaries the test may flush, stop and restart.
pub struct OwnCluster {
    pub nodes: Vec<OwnRedis>,
}

impl OwnCluster {
    pub async fn start(persistence: Persistence) -> Self {
        Self::with_replicas(persistence, 0).await
    }

    /// Three primaries with `replicas` replicas each (`nodes[0..3]` are the primaries when made).
    pub async fn with_replicas(persistence: Persistence, replicas: usize) -> Self {
        let nodes: Vec<OwnRedis> = (0..3 * (1 + replicas)).map(|_| OwnRedis::node(persistence, true)).collect();
        for node in &nodes {
            crate::eventually(std::time::Duration::from_secs(10), "a cluster node to start", || async {
                (node.cli(&["ping"]) == "PONG").then_some(())
            })
            .await;
        }
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap();
        assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stdout));
        let cluster = Self { nodes };
        cluster.wait_ok().await;
        // A replica that never finished its first synchronization can never be promoted: a test that fails a
        // primary over starts once every replica has (a diskless sync waits 5 s for more replicas first).
        crate::eventually(std::time::Duration::from_secs(60), "every replica to be in sync", || async {
            cluster
                .nodes
                .iter()
                .map(|n| n.cli(&["info", "replication"]))
                .filter(|info| info.contains("role:slave"))
                .all(|info| info.contains("master_link_status:up"))
                .then_some(())
        })
        .await;
        cluster
    }

    /// Waits until every node says the cluster is ok.
    pub async fn wait_ok(&self) {
        crate::eventually(std::time::Duration::from_secs(30), "the cluster to be ok", || async {
            self.nodes.iter().all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok")).then_some(())
        })
        .await;
    }

    /// The node serving `slot` as a primary now: an index into `nodes`.
    pub fn primary_of(&self, slot: u16) -> usize {
        self.primary_and_replicas_of(slot).0
    }

    /// The node serving `slot` as a primary now, and one of its replicas: indexes into `nodes`.
    pub fn primary_and_replica_of(&self, slot: u16) -> (usize, usize) {
        let (primary, replica) = self.primary_and_replicas_of(slot);
        (primary, replica.expect("the primary has a replica"))
    }

    fn primary_and_replicas_of(&self, slot: u16) -> (usize, Option<usize>) {
        let view = self.nodes[0].cli(&["cluster", "nodes"]);
        let lines: Vec<Vec<&str>> = view.lines().map(|line| line.split_whitespace().collect()).collect();
        let serves = |fields: &Vec<&str>| {
            fields.iter().skip(8).any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(l), Ok(h)) if l <= slot && slot <= h)
            })
        };
        let primary = lines.iter().find(|f| f[2].contains("master") && serves(f)).expect("a primary serves the slot");
        let replica = lines.iter().find(|f| f[3] == primary[0]);
        let index = |fields: &Vec<&str>| {
            let port: u16 = fields[1].split(['@', ':']).nth(1).and_then(|p| p.parse().ok()).expect("a port");
            self.nodes.iter().position(|n| n.port == port).expect("a node of this cluster")
        };
        (index(primary), replica.map(index))
    }

    /// A prefix whose healing state lives on a primary of its own (the active generation, the projectors'
    /// reports and the key index on another, so that a flush of the first loses nothing else of the whole),
    /// that primary, and the third, which holds none of them.
    pub fn prefix_with_the_healing_state_apart(&self) -> (String, usize, usize) {
        let node_of = |key: &str| self.primary_of(slot(key));
        (0..5000)
            .find_map(|_| {
                let prefix = unique("heal");
                let keys = Keyspace::new(prefix.clone(), 1);
                let shared = node_of(&Keyspace::active_generation(&prefix));
                let together =
                    [Keyspace::projectors(&prefix), keys.api_key_epoch()].iter().all(|k| node_of(k) == shared);
                let healing = node_of(&keys.healing());
                let data = (0..3).find(|n| *n != shared && *n != healing)?;
                (together && healing != shared).then_some((prefix, healing, data))
            })
            .expect("a prefix with the healing state on a primary of its own")
    }

    /// The URLs the binaries take with `REDIS_CLUSTER=true`.
    pub fn urls(&self) -> String {
        self.nodes.iter().map(OwnRedis::url).collect::<Vec<_>>().join(",")
    }
}
