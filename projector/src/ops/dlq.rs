//! `projector dlq list` and `projector dlq replay`: the dead letters with their reasons (as text, or as
//! JSON for automation: the [`Listed`] type as serialized), and publishing them back to their original
//! topics after a fix (`--dry-run`: listing what would be, publishing nothing).

use std::collections::HashMap;

use serde::Serialize;
use shared::Keyspace;

use super::Output;
use crate::config::Config;
use crate::repair::redrive;
use crate::source::{dead_letters_to_replay, list_dead_letters, replay_dead_letters, ReplayError};
use crate::Error;

/// One dead letter as `dlq list -o json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    /// Where the dead letter is: its dead-letter topic, partition and offset.
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Where the message was first read from.
    pub original_topic: String,
    pub original_partition: i32,
    pub original_offset: i64,
    /// The message's key, as UTF-8 (bytes that are not are replaced).
    pub key: Option<String>,
    pub reason: String,
    /// In `dlq replay --dry-run`: whether a corrected value given replaces the letter's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected: Option<bool>,
}

impl Listed {
    fn of(listed: crate::source::ListedLetter, corrected: Option<bool>) -> Self {
        Listed {
            topic: listed.at.topic,
            partition: listed.at.partition,
            offset: listed.at_offset,
            original_topic: listed.letter.topic,
            original_partition: listed.letter.partition,
            original_offset: listed.letter.offset,
            key: listed.letter.key.as_deref().map(|k| String::from_utf8_lossy(k).into_owned()),
            reason: listed.letter.reason,
            corrected,
        }
    }
}

pub fn list(config: &Config, output: Output) -> Result<(), Error> {
    let listed: Vec<Listed> = list_dead_letters(config)?.into_iter().map(|listed| Listed::of(listed, None)).collect();
    print_letters(&listed, output);
    Ok(())
}

fn print_letters(listed: &[Listed], output: Output) {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(listed).expect("dead letters serialize")),
        Output::Text => {
            for l in listed {
                let key = l.key.as_deref().unwrap_or_default();
                let corrected = if l.corrected == Some(true) { " (corrected)" } else { "" };
                println!("{}/{}@{} key={key} reason={}{corrected}", l.topic, l.partition, l.offset, l.reason);
            }
        }
    }
}

/// Publishes the letters again (with the corrected values given), then repairs every aggregate that
/// moved on past one; prints what became of them. Refused before anything is published when this build
/// does not read the active generation's layout.
pub async fn replay(config: &Config, corrected: &[String], dry_run: bool, output: Output) -> Result<(), Error> {
    let mut values = HashMap::new();
    for spec in corrected {
        let (at, file) = spec
            .split_once('=')
            .ok_or_else(|| Error::Config(format!("--corrected takes TOPIC/PARTITION@OFFSET=FILE, not {spec:?}")))?;
        let value = std::fs::read(file).map_err(|e| Error::Config(format!("cannot read {file}: {e}")))?;
        values.insert(at.to_string(), value);
    }
    // Nothing is published back for a read model this build would misread when it repairs what moved on.
    let mut conn = super::status::connect(config).await?;
    let generation = crate::generation::pointer::required(&mut conn, &config.redis.key_prefix).await?;
    crate::generation::check_layout(&mut conn, &Keyspace::new(config.redis.key_prefix.clone(), generation)).await?;
    let refused = |e| match e {
        ReplayError::Broker(e) => Error::Kafka(e),
        unknown => Error::Config(unknown.to_string()),
    };
    if dry_run {
        let pending = dead_letters_to_replay(config, &values).map_err(refused)?;
        let listed: Vec<Listed> = pending
            .into_iter()
            .map(|l| {
                let corrected = values.contains_key(&crate::source::letter_at(&l));
                Listed::of(l, Some(corrected))
            })
            .collect();
        if output == Output::Text {
            println!("would replay {} dead letters (nothing published):", listed.len());
        }
        print_letters(&listed, output);
        return Ok(());
    }
    let letters = replay_dead_letters(config, &values).await.map_err(refused)?;
    let shown = super::repair::Shown::new();
    let redriven = redrive::after_replay(config, &letters, &|read, total| shown.show(read, total)).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&redriven).expect("a report serializes")),
        Output::Text => {
            println!(
                "replayed {} dead letters: {} applied in order, {} repaired, {} still poison, {} skipped, {} refused",
                redriven.replayed,
                redriven.applied,
                redriven.repaired,
                redriven.still_poison,
                redriven.skipped,
                redriven.refused
            );
            for aggregate in &redriven.repaired_aggregates {
                println!("repaired {aggregate}");
            }
        }
    }
    Ok(())
}
