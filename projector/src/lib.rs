//! The projector: consumes the product's study, interview and API-key events from Kafka and keeps the
//! Redis read model that the query API serves; and the operator's commands around it (rebuild, digest,
//! status, dead letters).

pub mod admin;
pub mod aggregate;
pub mod assignment;
pub mod config;
pub mod control;
pub mod digest;
pub mod dlq;
pub mod http;
pub mod kafka;
pub mod live;
pub mod metrics;
pub mod participant;
pub mod pipeline;
pub mod rebuild;
pub mod stats;
pub mod status;
pub mod store;
pub mod transcript;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::sync::watch;

pub use config::Config;
pub use pipeline::Projector;
pub use stats::{Snapshot, Stats};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Refused(String),
}

/// A shutdown future as a watch channel that every loop can check.
pub fn stop_signal(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    stopped
}

/// Runs the live projector until `shutdown` completes; the batch in hand is finished and committed first.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
    let stopped = stop_signal(shutdown);
    let Some(projector) = Projector::connect(config, stopped.clone()).await? else {
        return Ok(());
    };
    serve_http(&projector, Arc::default()).await?;
    live::run(projector, stopped).await
}

/// Starts the HTTP server of metrics and health when an address is configured; returns where it listens.
pub async fn serve_http(projector: &Projector, rebuilding: Arc<AtomicBool>) -> Result<Option<SocketAddr>, Error> {
    let Some(addr) = projector.config.http_addr.0 else { return Ok(None) };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            // Projecting matters more than reporting: go on without the server, loudly.
            tracing::error!(%addr, error = %e, "could not start the metrics and health server");
            return Ok(None);
        }
    };
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "metrics and health");
    let health = http::Health { metrics: projector.metrics(), stall_after: projector.config.stall_after(), rebuilding };
    tokio::spawn(http::serve(listener, health));
    Ok(Some(bound))
}
