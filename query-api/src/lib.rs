//! The query API: a stateless, read-only HTTP server over the Redis read model (api.md).
//!
//! # Layout
//!
//! Where each rule of api.md lives, and the path of one request, from the socket to the read model:
//!
//! - [`edge`]: the HTTP edge. `accept` is the connection loop (graceful shutdown within
//!   `SHUTDOWN_DRAIN_MS`; a connection's clocks, a request head's and an idle connection's: `deadlines`; their cap: `connections`); `edge::app` lists the middleware in the order a request meets them
//!   (request id, log span, panic guard, `no-store` and `nosniff`, `If-None-Match`: `conditional`,
//!   compression, the concurrency cap and the timeout: `limits`; on `/v1`, the rate-limit and freshness
//!   headers), each in a file of its own; `tasks` owns the background tasks.
//! - [`api`]: the spec. `handlers` are the four endpoints of section 4, one function each, telling one
//!   request's life; `models` are the bodies of section 2, written from stored bytes by `json`;
//!   `pagination` is section 4.5 and the `Link` header; `etag` tags the study routes; `openapi` and
//!   `docs` the definition of section 9; `health` the operational routes. One route list (`api::v1`) feeds the router and the definition.
//! - [`auth`]: section 5. `credential` finds the key in the headers, looked up among the keys kept in
//!   memory (`read::push`) or in Redis; `rate_limit` throttles per key and unknown keys.
//! - [`read`]: the read path. `model` is every Redis read (one script each, the scripts in `scripts`),
//!   `key_by_key` the reads of interviews while their slot moves; `cache` keeps reads in memory, bounded
//!   in bytes; `transcript` decompresses a compressed transcript and sends one beyond a request's byte
//!   budget in chunks; `budget` bounds what all requests together read; `push` keeps the keys and organizations' epochs Redis pushes the changes of
//!   (client tracking), which vouch for what is kept (`push::kept` holds the rule, `push::upkeep` the
//!   connections); `generation` is the generation served; `freshness`
//!   how fresh it is, from the projectors' reports and the organization's epoch.
//! - [`links`]: section 8's video links: `credentials`, the hand-written signer `sigv4`, `bucket` rules.
//! - `state`: what requests share, and the refresh that keeps the generation and the freshness current
//!   (woken at once when Redis pushes a change of the generation). `error`: the one error type, mapped to section 7's statuses and bodies.
//!
//! Dependencies run one way: `edge` → `api` → `state` → `auth` → `read`, and `links`; none back.
//!
//! An interview has three shapes, each for one reader: the projector's fold state (`InterviewState`),
//! the stored document (`shared::InterviewDocument`, what Redis holds), and the served body
//! (`api::models::Interview`, section 2), written from the stored bytes, whose fields
//! `read::document::InterviewDoc` finds once when read, without building the served shape (tests keep the
//! two byte-identical).

/// What `--version` says: the workspace's version and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("GIT_COMMIT"), ")");

mod api;
mod auth;
pub mod config;
mod edge;
mod error;
#[cfg(test)]
mod held;
mod links;
mod metrics;
mod read;
mod state;

use tokio::net::TcpListener;

pub use config::Config;
/// The video-link signer, for its benchmark.
pub use links::sigv4;
/// The read model's scripts, for the benchmarks that load them.
pub use read::scripts::{INTERVIEWS_PAGE, ONE_INTERVIEW, STUDIES_PAGE};
pub use shared::keys::key_sha256;

use edge::tasks::Tasks;
use state::AppState;

/// Serves on `listener` (and the admin routes on `admin`) until `shutdown` completes, then finishes the
/// requests in flight, for at most `SHUTDOWN_DRAIN_MS`.
pub async fn run(
    listener: TcpListener,
    admin: Option<TcpListener>,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let target = config.redis.target();
    let tls = config.redis.tls.load(&target).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let links = links::Presigner::from_config(&config).await;
    let state = AppState::new(&config, tls, links)?;
    // The first connection is made beside the server, so that a Redis that is away or hangs delays nothing
    // (requests are answered 503 meanwhile). It is tried until it is made or Redis refuses it for good: a
    // refusal stops the server, before the background refresh starts (which would log the same failure
    // again); a timeout, on a busy machine, is no answer either way.
    let refused = std::sync::Arc::new(std::sync::OnceLock::new());
    let (made, mut connected) = tokio::sync::watch::channel(false);
    let first_connection = {
        let (model, refused) = (state.model.clone(), refused.clone());
        async move {
            match model.connect_at_start().await {
                Err(refusal) => drop(refused.set(refusal)),
                Ok(()) => {
                    let _ = made.send(true);
                    std::future::pending().await
                }
            }
        }
    };
    let shutdown = async move {
        tokio::select! {
            () = shutdown => {}
            () = first_connection => {}
        }
    };
    // Dropped when this function returns, however it returns: the tasks stop with the server.
    let mut tasks = Tasks::default();
    let refresh = state.clone().refresh_forever(config.generation_refresh());
    let mut pushes_connected = connected.clone();
    tasks.spawn(async move {
        if connected.wait_for(|made| *made).await.is_ok() {
            refresh.await
        }
    });
    // The connections Redis pushes changes on, once the first connection was made (a Redis that refuses
    // this instance stops it with one line, not this task's too).
    if state.tracker.keeps_anything() {
        let maintain = state.tracker.clone().maintain();
        tasks.spawn(async move {
            if pushes_connected.wait_for(|made| *made).await.is_ok() {
                maintain.await
            }
        });
    }
    tasks.spawn(state.clone().prune_rate_limit(std::time::Duration::from_secs(10)));
    tracing::info!(addr = %listener.local_addr()?, prefix = %config.redis.key_prefix, "query API listening");
    if config.trusted_proxies.is_empty() {
        tracing::info!(
            "TRUSTED_PROXIES is empty: each client is its connection's peer, whatever X-Forwarded-For says; behind \
             a proxy or an Ingress, set it to their ranges (forwarded headers from other peers are counted on the \
             admin /readyz)"
        );
    } else {
        tracing::info!(trusted_proxies = ?config.trusted_proxies, "X-Forwarded-For is believed from these peers");
    }
    if let Some(admin) = admin {
        tracing::info!(addr = %admin.local_addr()?, "admin listener: /metrics, /readyz, /livez");
        let app = edge::admin_app(state.clone());
        tasks.spawn(async move {
            if let Err(e) = axum::serve(admin, app).await {
                tracing::error!(error = %e, "the admin listener stopped");
            }
        });
    }
    let connections =
        edge::connections::Connections::new(config.max_connections as usize, state.metrics.connections.clone());
    let holding = edge::accept::Holding { clocks: config.clocks(), connections, drain: config.shutdown_drain() };
    let app = edge::app(state, &config);
    edge::accept::serve(listener, app, holding, shutdown).await;
    match refused.get() {
        Some(refusal) => Err(anyhow::anyhow!("cannot connect to the read model's Redis at {target}: {refusal}")),
        None => Ok(()),
    }
}
