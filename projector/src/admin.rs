//! The one-shot operator commands that only need a Redis connection: `digest` and `status`.

use shared::Keyspace;

use crate::config::Config;
use crate::pipeline::connect_redis;
use crate::{digest, status, store, Error};

async fn connect(config: &Config) -> Result<shared::connection::Connection, Error> {
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    connect_redis(config, &mut stopped).await?.ok_or_else(|| Error::Refused("redis is not reachable".into()))
}

/// The digest of a generation, by default the active one.
pub async fn digest(config: &Config, generation: Option<u64>) -> Result<String, Error> {
    let mut conn = connect(config).await?;
    let generation = match generation {
        Some(g) => g,
        None => store::active_generation(&mut conn, &config.key_prefix).await?,
    };
    let digest = digest::digest(&mut conn, &Keyspace::new(config.key_prefix.clone(), generation)).await?;
    Ok(format!("generation {generation}: {digest}"))
}

pub async fn status(config: &Config) -> Result<String, Error> {
    let mut conn = connect(config).await?;
    status::report(config, &mut conn).await
}
