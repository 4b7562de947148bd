//! The faults the soak injects, and the one thread that injects them: at random moments (from the run's
//! seed), one kind at a time, while the projectors, the broker and Redis are whatever the last faults left
//! them. Rebuilds and repairs run in the background, so the faults that follow land while they run.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::broker::OwnBroker;
use crate::kafka::Topics;
use crate::own_redis::{OwnCluster, OwnRedis};
use crate::rng::Rng;
use crate::runner::{self, KillOnDrop};

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    ProjectorKilled,
    BrokerKilled,
    Rebuild,
    OverlappingRepairs,
    RedisFlushed,
    RedisRestartedEmpty,
    RedisBackFromAnOlderSnapshot,
    PrimaryFlushed,
    PrimaryFailedOver,
    /// A primary flushed and its heal held unfinished (every projector frozen) while the primary holding
    /// the generation's healing state is flushed too; then the projectors go on.
    HealHeldWhileItsStateIsFlushed,
    /// A third projector joins, takes its share, and leaves (SIGTERM): the two others now hold partitions
    /// they once lost to it. Then Redis (one primary of a cluster) is flushed.
    StaleSharesThenFlushed,
}

impl Kind {
    const ANYWHERE: [Kind; 5] = [
        Kind::ProjectorKilled,
        Kind::BrokerKilled,
        Kind::Rebuild,
        Kind::OverlappingRepairs,
        Kind::StaleSharesThenFlushed,
    ];
    const ONE_REDIS: [Kind; 3] = [Kind::RedisFlushed, Kind::RedisRestartedEmpty, Kind::RedisBackFromAnOlderSnapshot];
    const CLUSTER: [Kind; 3] = [Kind::PrimaryFlushed, Kind::PrimaryFailedOver, Kind::HealHeldWhileItsStateIsFlushed];
}

/// The read model's Redis, of the soak's own.
pub enum Redis {
    One(OwnRedis),
    Cluster(OwnCluster),
}

impl Redis {
    pub fn urls(&self) -> String {
        match self {
            Redis::One(redis) => redis.url(),
            Redis::Cluster(cluster) => cluster.urls(),
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Redis::Cluster(_))
    }
}

/// What the soak runs and breaks: the projectors (real processes), the broker, Redis, and the operator
/// commands in flight.
pub struct Injector {
    rng: Rng,
    pub redis: Redis,
    pub broker: OwnBroker,
    topics: Topics,
    prefix: String,
    group: String,
    organizations: Vec<String>,
    logs: PathBuf,
    projectors: Vec<KillOnDrop>,
    /// Rebuilds and repairs in flight.
    running: Vec<(Kind, Child)>,
    /// Faults injected, by kind.
    pub injected: BTreeMap<Kind, u64>,
    /// Operator commands ended, by kind and whether they succeeded.
    pub ended: BTreeMap<(Kind, bool), u64>,
    /// When a replica was seen promoted in place of a crashed primary (within 100 ms).
    pub promotions: Vec<Instant>,
    /// Projectors found ended by themselves (and started again).
    pub exits: Vec<String>,
}

/// Where the soak's processes run: the topics, the key prefix and consumer group, the organizations a
/// repair may pick, and the directory their logs go to.
pub struct Setting {
    pub topics: Topics,
    pub prefix: String,
    pub group: String,
    pub organizations: Vec<String>,
    pub logs: PathBuf,
}

/// Instances of the projector run side by side (they share the partitions).
pub const PROJECTORS: usize = 2;

impl Injector {
    pub fn new(seed: u64, redis: Redis, broker: OwnBroker, setting: Setting) -> Self {
        let Setting { topics, prefix, group, organizations, logs } = setting;
        let mut injector = Self {
            rng: Rng::new(seed),
            redis,
            broker,
            topics,
            prefix,
            group,
            organizations,
            logs,
            projectors: Vec::new(),
            running: Vec::new(),
            injected: BTreeMap::new(),
            ended: BTreeMap::new(),
            promotions: Vec::new(),
            exits: Vec::new(),
        };
        for i in 0..PROJECTORS {
            let projector = injector.projector(i);
            injector.projectors.push(projector);
        }
        injector
    }

    /// The projector binary with the soak's topics, Redis, prefix and group, then `extra`; its output
    /// appended to a log file of its own.
    fn command(&self, log: &str, extra: &[&str]) -> std::process::Command {
        let mut args = runner::args(&self.topics, &self.prefix, &self.group);
        let url = args.iter().position(|a| a == "--redis-url").expect("a Redis URL") + 1;
        args[url] = self.redis.urls();
        let mut command = std::process::Command::new(runner::binary());
        command.args(args).args(["--redis-cluster", &self.redis.is_cluster().to_string()]).args(extra);
        let file = File::options().create(true).append(true).open(self.logs.join(format!("{log}.log"))).unwrap();
        // What each projector did (its marks, reads again, switches), to read beside the wrong answers' times.
        command.env("RUST_LOG", "warn,projector=info").stdout(Stdio::null()).stderr(file);
        command
    }

    fn projector(&self, i: usize) -> KillOnDrop {
        KillOnDrop(self.command(&format!("projector-{i}"), &[]).spawn().expect("projector starts"))
    }

    /// Each projector's log so far (the third's of [`Kind::StaleSharesThenFlushed`] too), by name.
    pub fn projector_logs(&self) -> Vec<(String, String)> {
        (0..=PROJECTORS)
            .map(|i| format!("projector-{i}"))
            .filter_map(|name| {
                Some((name.clone(), std::fs::read_to_string(self.logs.join(format!("{name}.log"))).ok()?))
            })
            .collect()
    }

    /// Takes a snapshot of the one Redis: the one a later "back from an older snapshot" goes back to.
    pub fn save(&self) {
        if let Redis::One(redis) = &self.redis {
            assert_eq!(redis.cli(&["SAVE"]), "OK");
        }
    }

    /// A burst: 3 to 6 faults (as the seed draws) at random moments, ending at `until` at the latest.
    pub fn burst(&mut self, until: Instant) {
        let kinds: Vec<Kind> = Kind::ANYWHERE
            .into_iter()
            .chain(if self.redis.is_cluster() { &Kind::CLUSTER[..] } else { &Kind::ONE_REDIS[..] }.iter().copied())
            .collect();
        let faults = 3 + self.rng.below(4);
        for _ in 0..faults {
            if Instant::now() >= until {
                break;
            }
            self.reap();
            let kind = kinds[self.rng.below(kinds.len() as u64) as usize];
            let started = chrono::Utc::now();
            if self.inject(kind) {
                *self.injected.entry(kind).or_insert(0) += 1;
                println!("[soak] {} {kind:?}", started.format("%H:%M:%S%.3f"));
            }
            if self.rng.chance(30) {
                self.save();
            }
            std::thread::sleep(Duration::from_millis(1000 + self.rng.below(4000)));
        }
    }

    /// Injects one fault; false when it could not be now (a rebuild already running, say).
    fn inject(&mut self, kind: Kind) -> bool {
        match kind {
            Kind::ProjectorKilled => {
                let i = self.rng.below(PROJECTORS as u64) as usize;
                self.projectors[i].sigkill();
                std::thread::sleep(Duration::from_millis(self.rng.below(2000)));
                self.projectors[i] = self.projector(i);
            }
            Kind::BrokerKilled => {
                self.broker.kill();
                std::thread::sleep(Duration::from_millis(self.rng.below(3000)));
                self.broker.restart();
            }
            Kind::Rebuild => {
                if self.running.iter().any(|(k, _)| *k == Kind::Rebuild) {
                    return false;
                }
                let options = ["--grace-secs", "2", "--lock-wait-secs", "0"];
                let child = self.command("rebuild", &[&["rebuild"][..], &options].concat()).spawn().unwrap();
                self.running.push((kind, child));
            }
            Kind::OverlappingRepairs => {
                if self.running.iter().any(|(k, _)| *k == Kind::OverlappingRepairs) {
                    return false;
                }
                let org = self.organization();
                for _ in 0..2 {
                    let child = self.command("repair", &["repair", "--organization", &org]).spawn().unwrap();
                    self.running.push((kind, child));
                }
            }
            Kind::RedisFlushed | Kind::RedisRestartedEmpty | Kind::RedisBackFromAnOlderSnapshot => {
                let Redis::One(redis) = &mut self.redis else { unreachable!("a fault of the one Redis") };
                match kind {
                    Kind::RedisFlushed => assert_eq!(redis.cli(&["FLUSHALL"]), "OK"),
                    Kind::RedisRestartedEmpty => {
                        redis.kill();
                        redis.forget_snapshot();
                        redis.restart();
                    }
                    _ => {
                        redis.kill();
                        redis.restart();
                    }
                }
            }
            Kind::PrimaryFlushed => {
                let Redis::Cluster(cluster) = &self.redis else { unreachable!("a fault of the cluster") };
                let primaries = primaries(cluster);
                let node = primaries[self.rng.below(primaries.len() as u64) as usize];
                cluster.nodes[node].cli(&["FLUSHALL"]);
            }
            Kind::PrimaryFailedOver => return self.fail_over(),
            Kind::HealHeldWhileItsStateIsFlushed => self.hold_a_heal_and_flush_its_state(),
            Kind::StaleSharesThenFlushed => self.stale_shares_then_flush(),
        }
        true
    }

    /// A third projector joins for 3 to 6 s (long enough to take its share under either membership),
    /// leaves as Kubernetes stops a pod, and Redis (one primary of a cluster) is flushed 0 to 2 s later.
    fn stale_shares_then_flush(&mut self) {
        let mut third = self.projector(PROJECTORS);
        std::thread::sleep(Duration::from_millis(3000 + self.rng.below(3000)));
        third.sigterm();
        let deadline = Instant::now() + Duration::from_secs(30);
        while third.try_wait().expect("projector status").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(third);
        std::thread::sleep(Duration::from_millis(self.rng.below(2000)));
        match &self.redis {
            Redis::One(redis) => assert_eq!(redis.cli(&["FLUSHALL"]), "OK"),
            Redis::Cluster(cluster) => {
                let primaries = primaries(cluster);
                let node = primaries[self.rng.below(primaries.len() as u64) as usize];
                cluster.nodes[node].cli(&["FLUSHALL"]);
            }
        }
    }

    /// Flushes a primary other than the one holding the healing state of the active generation, freezes
    /// every projector (SIGSTOP) as soon as a heal is marked there, or after 3 s, flushes the healing
    /// state's primary, and lets the projectors go on 1 to 3 s later.
    fn hold_a_heal_and_flush_its_state(&mut self) {
        let Redis::Cluster(cluster) = &self.redis else { unreachable!("a fault of the cluster") };
        let pointer = shared::Keyspace::active_generation(&self.prefix);
        let at = |key: &str| cluster.primary_of(shared::keys::slot(key));
        let generation: u64 = cluster.nodes[at(&pointer)].cli(&["GET", &pointer]).parse().unwrap_or(1);
        let healing = shared::Keyspace::new(self.prefix.clone(), generation).healing();
        let state = at(&healing);
        let others: Vec<usize> = primaries(cluster).into_iter().filter(|n| *n != state).collect();
        let first = others[self.rng.below(others.len() as u64) as usize];
        cluster.nodes[first].cli(&["FLUSHALL"]);
        let deadline = Instant::now() + Duration::from_secs(3);
        while !cluster.nodes[state].cli(&["HKEYS", &healing]).contains('/') && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for projector in &self.projectors {
            projector.freeze();
        }
        cluster.nodes[at(&healing)].cli(&["FLUSHALL"]);
        std::thread::sleep(Duration::from_millis(1000 + self.rng.below(2000)));
        for projector in &self.projectors {
            projector.thaw();
        }
    }

    /// Crashes a primary whose replica is in sync, waits until the replica is promoted, and starts the
    /// crashed node again (it comes back as a replica).
    fn fail_over(&mut self) -> bool {
        let Redis::Cluster(cluster) = &mut self.redis else { unreachable!("a fault of the cluster") };
        let pairs: Vec<(usize, usize)> = primaries(cluster)
            .into_iter()
            .filter_map(|primary| {
                let port = cluster.nodes[primary].port().to_string();
                let replica = (0..cluster.nodes.len()).find(|&n| {
                    let info = cluster.nodes[n].cli(&["INFO", "replication"]);
                    info.contains(&format!("master_port:{port}")) && info.contains("master_link_status:up")
                })?;
                Some((primary, replica))
            })
            .collect();
        if pairs.is_empty() || !cluster.nodes.iter().all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")) {
            return false;
        }
        let (primary, replica) = pairs[self.rng.below(pairs.len() as u64) as usize];
        cluster.nodes[primary].cli(&["DEBUG", "SEGFAULT"]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cluster.nodes[replica].cli(&["ROLE"]).starts_with("master") {
            assert!(Instant::now() < deadline, "the replica of a crashed primary was not promoted within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        self.promotions.push(Instant::now());
        cluster.nodes[primary].kill();
        cluster.nodes[primary].restart();
        true
    }

    fn organization(&mut self) -> String {
        self.organizations[self.rng.below(self.organizations.len() as u64) as usize].clone()
    }

    /// Writes down the operator commands that ended, and starts again a projector that ended by itself,
    /// as Kubernetes would.
    pub fn reap(&mut self) {
        for i in 0..PROJECTORS {
            if let Some(status) = self.projectors[i].try_wait().expect("projector status") {
                println!("[soak] projector {i} ended by itself ({status}): started again");
                self.exits.push(format!("projector {i}: {status}"));
                self.projectors[i] = self.projector(i);
            }
        }
        let mut still = Vec::new();
        for (kind, mut child) in self.running.drain(..) {
            match child.try_wait().expect("command status") {
                Some(status) => *self.ended.entry((kind, status.success())).or_insert(0) += 1,
                None => still.push((kind, child)),
            }
        }
        self.running = still;
    }

    /// Once the faults are over: every server up, and every operator command ended (killed past `within`,
    /// and counted as failed).
    pub fn settle(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.running.is_empty() && Instant::now() < deadline {
            self.reap();
            std::thread::sleep(Duration::from_millis(100));
        }
        for (kind, mut child) in self.running.drain(..) {
            println!("[soak] a {kind:?} command still ran after {within:?}: killed");
            let _ = child.kill();
            let _ = child.wait();
            *self.ended.entry((kind, false)).or_insert(0) += 1;
        }
        self.reap();
    }
}

/// The nodes of the cluster that are primaries now.
fn primaries(cluster: &OwnCluster) -> Vec<usize> {
    (0..cluster.nodes.len()).filter(|&n| cluster.nodes[n].cli(&["ROLE"]).starts_with("master")).collect()
}
