//! `projector digest`: prints the canonical digest of a generation, by default the active one, when this
//! build reads its layout.

use shared::Keyspace;

use crate::config::Config;
use crate::store::Digest;
use crate::Error;

pub async fn run(config: &Config, generation: Option<u64>) -> Result<(), Error> {
    let mut conn = super::status::connect(config).await?;
    let generation = match generation {
        Some(g) => g,
        None => crate::generation::pointer::required(&mut conn, &config.redis.key_prefix).await?,
    };
    let keys = Keyspace::new(config.redis.key_prefix.clone(), generation);
    // A layout this build does not read would be digested as if it were one it does: refused instead.
    crate::generation::check_layout(&mut conn, &keys).await?;
    let digest = Digest::of(&mut conn, &keys).await?;
    println!("generation {generation}: {digest}");
    Ok(())
}
