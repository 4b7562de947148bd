//! `projector digest`: prints the canonical digest of a generation, by default the active one.

use shared::Keyspace;

use crate::config::Config;
use crate::store::{self, Digest};
use crate::Error;

pub async fn run(config: &Config, generation: Option<u64>) -> Result<(), Error> {
    let mut conn = super::status::connect(config).await?;
    let generation = match generation {
        Some(g) => g,
        None => store::active_generation(&mut conn, &config.redis.key_prefix).await?,
    };
    let digest = Digest::of(&mut conn, &Keyspace::new(config.redis.key_prefix.clone(), generation)).await?;
    println!("generation {generation}: {digest}");
    Ok(())
}
