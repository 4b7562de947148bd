//! The organizations of the generated stream and their sizes, for the repair benchmark: how many there
//! are, and the one of median size among those whose histories the stream holds whole (the stream ends
//! inside its last chunk of organizations), with its count of messages.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use benchmarks::report::Line;
use benchmarks::stream::Stream;
use clap::Parser;

#[derive(Parser)]
#[command(about = "Counts the generated stream's messages per organization and names a median one.")]
struct Args {
    /// Messages in the stream.
    #[arg(long, env = "EVENTS", default_value_t = 1_000_000)]
    events: usize,
    /// Seed of the stream.
    #[arg(long, env = "SEED", default_value_t = 7)]
    seed: u64,
}

/// The organization of a message: its key is its aggregate's id, which starts with the organization's.
fn organization(key: &str) -> &str {
    key.split_once('-').map_or(key, |(org, _)| org)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut stream = Stream::new(args.seed, args.events);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_chunk = Vec::new();
    let mut total = 0u64;
    while let Some(chunk) = stream.next_chunk() {
        last_chunk.clear();
        for message in &chunk {
            let org = organization(&message.key);
            *counts.entry(org.to_string()).or_default() += 1;
            if !last_chunk.iter().any(|o: &String| o == org) {
                last_chunk.push(org.to_string());
            }
        }
        total += chunk.len() as u64;
    }
    let organizations = counts.len();
    // The last chunk may end inside its organizations' histories; leave them out unless they are all.
    let mut whole: Vec<(u64, &String)> = counts
        .iter()
        .filter(|(org, _)| organizations <= last_chunk.len() || !last_chunk.contains(org))
        .map(|(o, n)| (*n, o))
        .collect();
    if whole.is_empty() {
        bail!("the stream of {} messages holds no organization", args.events);
    }
    whole.sort();
    let (events, org) = whole[whole.len() / 2];
    Line::default()
        .with("organizations", organizations)
        .with("whole", whole.len())
        .with("org", org)
        .with("org_events", events)
        .with("min_events", whole[0].0)
        .with("max_events", whole[whole.len() - 1].0)
        .with("messages", total)
        .print();
    Ok(())
}
