//! One Redis connection for the two deployments the service supports: a single server, and a Redis
//! Cluster reached through some of its nodes. Every script and every pipeline of the service declares its
//! keys and stays in one hash slot, so both binaries run the same code on either. The two things that
//! differ live here: a batch of independent commands that may span slots ([`Connection::query_all`]),
//! and a SCAN that must visit every primary ([`Connection::scan`]). `rediss://` URLs trust and present what
//! [`crate::redis_tls`] read from the TLS options.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::cluster_nodes::{self, Primary};
use crate::cluster_pipeline::Pipelines;
use crate::redis_tls::{self, Tls};
use crate::redis_url::Target;

/// Timeouts and retries of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Bound of one call (and of connecting).
    pub timeout: Duration,
    /// Retries of a call on a cluster, after a redirection, a slot migration or a lost node.
    pub cluster_retries: u32,
}

/// A cheap-to-clone connection; clones share the underlying multiplexed connections.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    Cluster(Arc<Cluster>),
}

/// A cluster connection that replaces itself when a call times out. After a storm of redirections
/// while a slot moves, the client's connection can stay wedged, answering nothing; a new one works.
pub struct Cluster {
    client: ClusterClient,
    /// The connection in use and how many times it was replaced.
    current: RwLock<(u64, ClusterConnection)>,
    /// Held while a connection is replaced: the calls that timed out together on a wedged connection
    /// wait for the one replacement, so none of them tries again on the wedged one.
    replacing: tokio::sync::Mutex<()>,
    /// Batches of independent commands: a pipeline per primary ([`crate::cluster_pipeline`]).
    pipelines: Pipelines,
}

impl Cluster {
    fn current(&self) -> (u64, ClusterConnection) {
        let current = self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        (current.0, current.1.clone())
    }

    /// Replaces the connection of `epoch` (unless another call already did). Returns once the connection
    /// in use is not that of `epoch`, or connecting failed.
    async fn replace(&self, epoch: u64) {
        let _replacing = self.replacing.lock().await;
        if self.current().0 != epoch {
            return;
        }
        match self.client.get_async_connection().await {
            Ok(fresh) => {
                let mut current = self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner());
                if current.0 == epoch {
                    tracing::warn!("a call to the redis cluster timed out; replaced the connection");
                    *current = (epoch + 1, fresh);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not reconnect to the redis cluster"),
        }
    }

    /// Runs a call on the current connection, replacing the connection if the call times out.
    async fn call<T>(&self, call: impl AsyncFnOnce(&mut ClusterConnection) -> RedisResult<T>) -> RedisResult<T> {
        let (epoch, mut conn) = self.current();
        let result = call(&mut conn).await;
        if matches!(&result, Err(e) if e.is_timeout()) {
            self.replace(epoch).await;
        }
        result
    }
}

impl Connection {
    /// Connects with the system's roots for a `rediss://` URL, and no client certificate.
    pub async fn connect(target: &Target, settings: Settings) -> RedisResult<Self> {
        Self::connect_with(target, settings, &Tls::default()).await
    }

    /// Connects, trusting and presenting what `tls` holds on `rediss://` URLs.
    pub async fn connect_with(target: &Target, settings: Settings, tls: &Tls) -> RedisResult<Self> {
        redis_tls::install_crypto_provider();
        match target {
            Target::Single(url) => {
                let client = match tls.certificates() {
                    Some(certificates) => redis::Client::build_with_tls(url.as_str(), certificates.clone())?,
                    None => redis::Client::open(url.as_str())?,
                };
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(settings.timeout))
                    .set_connection_timeout(Some(settings.timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(2));
                Ok(Connection::Single(ConnectionManager::new_with_config(client, config).await?))
            }
            Target::Cluster(seeds) => {
                let mut builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str));
                if let Some(certificates) = tls.certificates() {
                    builder = builder.certs(certificates.clone());
                }
                let client = builder
                    .connection_timeout(settings.timeout)
                    .response_timeout(settings.timeout)
                    .retries(settings.cluster_retries)
                    // Waits of 10 ms doubling up to 0.5 s: a MOVED or TRYAGAIN during a resharding is
                    // over in milliseconds, and callers of the API should not wait seconds for it.
                    .min_retry_wait(10)
                    .max_retry_wait(500)
                    .retry_wait_formula(10, 2)
                    .build()?;
                let conn = client.get_async_connection().await?;
                let seed = seeds.first().map(String::as_str).unwrap_or_default();
                let pipelines = Pipelines::new(seed, tls, settings.timeout);
                Ok(Connection::Cluster(Arc::new(Cluster {
                    client,
                    current: RwLock::new((0, conn)),
                    replacing: Default::default(),
                    pipelines,
                })))
            }
        }
    }

    /// Runs independent commands that may touch different slots, and returns their replies in order. On
    /// one server that is one pipeline; on a cluster, one pipeline per primary, all sent at once, each
    /// redirected command sent again where it belongs ([`crate::cluster_pipeline`]). Each command is
    /// atomic on its own; the batch as a whole is not.
    pub async fn query_all(&mut self, commands: &[Cmd]) -> RedisResult<Vec<Value>> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Connection::Single(conn) => {
                let mut pipe = redis::pipe();
                for cmd in commands {
                    pipe.add_command(cmd.clone());
                }
                pipe.query_async(conn).await
            }
            Connection::Cluster(cluster) => {
                let slots = || async {
                    let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
                    cluster.call(async |c| slots.query_async::<Value>(c).await).await
                };
                cluster.pipelines.query_all(commands, slots).await
            }
        }
    }

    /// Every slot range of the primary serving `slot` (every slot on one server), as the cluster's slot
    /// map last read says: with [`crate::keys::position_tag`], where that primary's positions are kept.
    pub async fn ranges_serving(&mut self, slot: u16) -> RedisResult<Vec<(u16, u16)>> {
        match self {
            Connection::Single(_) => Ok(vec![(0, 16383)]),
            Connection::Cluster(cluster) => {
                let slots = || async {
                    let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
                    cluster.call(async |c| slots.query_async::<Value>(c).await).await
                };
                cluster.pipelines.ranges_serving(slot, slots).await
            }
        }
    }

    /// Every key matching `pattern`, by SCAN over every primary of a cluster (or over the one server).
    pub async fn scan(&mut self, pattern: &str) -> RedisResult<Vec<String>> {
        match self {
            Connection::Single(conn) => scan_node(conn, pattern).await,
            Connection::Cluster(cluster) => {
                let (_, mut conn) = cluster.current();
                let mut all = Vec::new();
                for primary in primaries(&mut conn).await? {
                    all.extend(scan_cluster_node(&mut conn, pattern, primary.host, primary.port).await?);
                }
                Ok(all)
            }
        }
    }
}

impl Connection {
    /// Runs `cmd` on the one server, or on every primary of a cluster; the replies in that order.
    pub async fn on_every_primary(&mut self, cmd: &Cmd) -> RedisResult<Vec<Value>> {
        match self {
            Connection::Single(conn) => Ok(vec![cmd.query_async(conn).await?]),
            Connection::Cluster(cluster) => {
                let (_, mut conn) = cluster.current();
                let mut replies = Vec::new();
                for primary in primaries(&mut conn).await? {
                    let routing = SingleNodeRoutingInfo::ByAddress { host: primary.host, port: primary.port };
                    replies.push(conn.route_command(cmd.clone(), RoutingInfo::SingleNode(routing)).await?);
                }
                Ok(replies)
            }
        }
    }
}

/// A primary of the read model: where it is and which slots it serves (every slot on one server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `host:port`, or `redis` for the one server.
    pub address: String,
    /// Inclusive slot ranges.
    pub slots: Vec<(u16, u16)>,
}

impl Connection {
    /// Every primary that serves slots (the one server on its own).
    pub async fn nodes(&mut self) -> RedisResult<Vec<Node>> {
        match self {
            Connection::Single(_) => Ok(vec![Node { address: "redis".into(), slots: vec![(0, 16383)] }]),
            Connection::Cluster(cluster) => {
                let primaries = cluster.call(async |c| primaries(c).await).await?;
                Ok(primaries.into_iter().map(|p| Node { address: p.address(), slots: p.slots }).collect())
            }
        }
    }

    /// Runs `cmd` on one primary (on the one server, whatever `node` says).
    pub async fn on_node(&mut self, node: &Node, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Connection::Single(conn) => cmd.query_async(conn).await,
            Connection::Cluster(cluster) => {
                let (host, port) = node.address.rsplit_once(':').unwrap_or((&node.address, "6379"));
                let port = port.parse().unwrap_or(6379);
                let routing = SingleNodeRoutingInfo::ByAddress { host: host.to_string(), port };
                // Through `call`, so that a wedged connection that times out is replaced.
                cluster.call(async |c| c.route_command(cmd.clone(), RoutingInfo::SingleNode(routing)).await).await
            }
        }
    }
}

/// The address of every primary that serves slots.
async fn primaries(conn: &mut ClusterConnection) -> RedisResult<Vec<Primary>> {
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    Ok(cluster_nodes::primaries(&nodes))
}

fn scan_page(cursor: u64, pattern: &str) -> Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000);
    cmd
}

async fn scan_node(conn: &mut ConnectionManager, pattern: &str) -> RedisResult<Vec<String>> {
    let (mut cursor, mut all) = (0u64, Vec::new());
    loop {
        let (next, page): (u64, Vec<String>) = scan_page(cursor, pattern).query_async(conn).await?;
        all.extend(page);
        if next == 0 {
            return Ok(all);
        }
        cursor = next;
    }
}

async fn scan_cluster_node(
    conn: &mut ClusterConnection,
    pattern: &str,
    host: String,
    port: u16,
) -> RedisResult<Vec<String>> {
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
    let (mut cursor, mut all) = (0u64, Vec::new());
    loop {
        let reply = conn.route_command(scan_page(cursor, pattern), routing.clone()).await?;
        let (next, page): (u64, Vec<String>) = redis::from_redis_value(reply).map_err(parsing)?;
        all.extend(page);
        if next == 0 {
            return Ok(all);
        }
        cursor = next;
    }
}

fn parsing(e: redis::ParsingError) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::other(e.to_string()))
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(cluster) => {
                let cluster = cluster.clone();
                Box::pin(async move { cluster.call(async |c| c.req_packed_command(cmd).await).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(cluster) => {
                let cluster = cluster.clone();
                Box::pin(async move { cluster.call(async |c| c.req_packed_commands(cmd, offset, count).await).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_target_is_every_non_empty_seed() {
        assert_eq!(
            Target::new("redis://a:1, redis://b:2,", true),
            Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(Target::new(" redis://a:1 ", false), Target::Single("redis://a:1".into()));
    }

    #[test]
    fn a_target_is_shown_without_passwords() {
        let cluster = Target::new("rediss://u:one@a:1,rediss://u:two@b:2", true);
        for shown in [format!("{cluster}"), format!("{cluster:?}")] {
            assert!(!shown.contains("one") && !shown.contains("two") && shown.contains("u:***@b:2"), "{shown}");
        }
        assert_eq!(format!("{:?}", Target::new("redis://:pw@a:1", false)), r#"Single("redis://:***@a:1")"#);
    }
}
