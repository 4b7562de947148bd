//! `projector dlq list` and `projector dlq replay`: the dead letters with their reasons, and publishing
//! them back to their original topics after a fix.

use crate::config::Config;
use crate::source::{list_dead_letters, replay_dead_letters};
use crate::Error;

pub fn list(config: &Config) -> Result<(), Error> {
    for listed in list_dead_letters(config)? {
        let letter = &listed.letter;
        let key = letter.key.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        println!("{}@{} key={key} reason={}", listed.at, listed.at_offset, letter.reason);
    }
    Ok(())
}

pub async fn replay(config: &Config) -> Result<(), Error> {
    println!("replayed {} dead letters", replay_dead_letters(config).await?);
    Ok(())
}
