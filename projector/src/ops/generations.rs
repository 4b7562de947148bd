//! `projector generations`: the generations Redis still holds keys of, and what each one is; with
//! `--delete N`, deletes one left behind. A rebuild deletes the generation it switched from, but keeps it
//! when Redis undid the switch, and gives up after a minute of Redis failures (`generation::retire`): such a
//! generation is served by nothing and written by nothing, and only this command takes its memory back.
//!
//! A generation is found by its meta hash or its positions on any primary (`EXISTS`, not a walk of the
//! keyspace): a deletion takes the positions first and the meta last, so one stopped halfway is still
//! found.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::Serialize;
use shared::connection::Connection;
use shared::Keyspace;

use super::Output;
use crate::config::Config;
use crate::generation::rebuild::LOCK_TTL;
use crate::generation::{self, rebuild_state};
use crate::run::{live_instances, live_instances_known_for, tells_everyone};
use crate::Error;

/// What a generation holding keys is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// The one the API serves and the live projectors write.
    Active,
    /// A rebuild writes it, or will resume it.
    Building,
    /// Not active, but a live projector still writes it (one that has not followed a switch yet).
    Written,
    /// Nothing serves or writes it: memory an operator takes back with `--delete`.
    LeftBehind,
}

impl Role {
    fn describe(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Building => "being rebuilt",
            Role::Written => "written by a live projector",
            Role::LeftBehind => "left behind",
        }
    }
}

/// A generation that holds keys.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Generation {
    pub generation: u64,
    pub role: Role,
}

pub async fn run(config: &Config, delete: Option<u64>, output: Output) -> Result<(), Error> {
    let mut conn = super::status::connect(config).await?;
    let prefix = &config.redis.key_prefix;
    if let Some(generation) = delete {
        let keys = delete_left_behind(&mut conn, prefix, generation).await?;
        if output == Output::Text {
            println!("deleted generation {generation} ({keys} keys)");
        }
    }
    let pointers = Pointers::read(&mut conn, prefix).await?;
    let found = list(&mut conn, prefix, &pointers).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&found).expect("generations serialize")),
        Output::Text if found.is_empty() => println!("no generation holds keys"),
        Output::Text => {
            for Generation { generation, role } in &found {
                println!("generation {generation}: {}", role.describe());
            }
        }
    }
    Ok(())
}

/// What tells a generation's role: read once, here or by `status` beside what it prints.
pub struct Pointers {
    /// The active generation.
    pub active: Option<u64>,
    /// The last generation ever started.
    pub counter: Option<u64>,
    /// The generation a rebuild writes or will resume.
    pub building: Option<u64>,
    /// The generations the live projectors report writing.
    pub written: BTreeSet<u64>,
}

impl Pointers {
    /// The rebuild's state and the reports first, the pointers last: a rebuild that switched and ended
    /// meanwhile shows as the generation it switched to.
    pub async fn read(conn: &mut Connection, prefix: &str) -> Result<Self, Error> {
        let building = rebuild_state(conn, prefix).await?.generation;
        let written = live_instances(conn, prefix).await?.values().map(|i| i.generation).collect();
        let pointers = generation::Pointers::read(conn, prefix).await?;
        Ok(Self::of(pointers, building, written))
    }

    /// The pointers, given the ones already read.
    pub fn of(pointers: generation::Pointers, building: Option<u64>, written: BTreeSet<u64>) -> Self {
        Self { active: pointers.active, counter: pointers.counter, building, written }
    }

    fn role(&self, generation: u64) -> Role {
        if self.active == Some(generation) {
            Role::Active
        } else if self.building == Some(generation) {
            Role::Building
        } else if self.written.contains(&generation) {
            Role::Written
        } else {
            Role::LeftBehind
        }
    }
}

/// Every generation that holds keys, from the first to the last one ever started, with what it is.
pub async fn list(conn: &mut Connection, prefix: &str, pointers: &Pointers) -> Result<Vec<Generation>, Error> {
    let last = [pointers.active, pointers.counter, pointers.building].into_iter().flatten().max().unwrap_or(0);
    let holding = generation::holding_keys(conn, prefix, last).await?;
    Ok(holding.into_iter().map(|generation| Generation { generation, role: pointers.role(generation) }).collect())
}

/// Deletes `generation` if it is left behind, while the active pointer does not name it (read again
/// before every 500 keys); returns how many keys it had.
async fn delete_left_behind(conn: &mut Connection, prefix: &str, generation: u64) -> Result<usize, Error> {
    let pointers = Pointers::read(conn, prefix).await?;
    // Without the active pointer (its primary lost it) the served generation reads as left behind: a
    // missing key is no evidence that a generation is not served. A projector's start puts it back.
    if pointers.active.is_none() {
        return Err(Error::NoActiveGeneration { key: Keyspace::active_generation(prefix) });
    }
    let found = list(conn, prefix, &pointers).await?;
    match found.iter().find(|g| g.generation == generation) {
        None => return Err(Error::Refused(format!("generation {generation} holds no keys"))),
        Some(Generation { role: Role::LeftBehind, .. }) => {}
        Some(Generation { role, .. }) => {
            return Err(Error::Refused(format!(
                "generation {generation} is {}: only a generation left behind is deleted",
                role.describe()
            )))
        }
    }
    nobody_writes(conn, prefix, generation, pointers.active).await?;
    let keys = Keyspace::new(prefix.to_string(), generation);
    match generation::delete_generation_while(conn, &keys, |active| active != Some(generation)).await? {
        Ok(count) => Ok(count),
        Err(_) => Err(Error::Refused(format!("generation {generation} became active: its deletion stopped"))),
    }
}

/// Makes sure no live projector and no rebuild writes `generation`, whose role read as left behind: a
/// missing key is no evidence, since Redis may have lost it with its primary. The projectors' reports
/// must have been known whole for the liveness timeout (every live projector reports within it), and a
/// generation above the active one (a rebuild's) must have had no rebuild lock for the lock's TTL (a
/// running rebuild takes a lost lock again within a quarter of it). Waits for that, up to 10 s.
async fn nobody_writes(conn: &mut Connection, prefix: &str, generation: u64, active: Option<u64>) -> Result<(), Error> {
    let above = active.is_none_or(|active| generation > active);
    let started = Instant::now();
    let mut said = false;
    loop {
        let (instances, known_for) = live_instances_known_for(conn, prefix).await?;
        if instances.values().any(|i| i.generation == generation) {
            return Err(Error::Refused(format!(
                "generation {generation} is written by a live projector: only a generation left behind is deleted"
            )));
        }
        if above && rebuild_state(conn, prefix).await?.locked {
            return Err(Error::Refused(format!(
                "generation {generation} may be the one a running rebuild writes (a rebuild holds its lock, its \
                 state unreadable): only a generation left behind is deleted; try again when no rebuild runs"
            )));
        }
        if tells_everyone(known_for) && (!above || started.elapsed() >= LOCK_TTL) {
            return Ok(());
        }
        if !said {
            eprintln!("making sure nothing writes generation {generation} (up to {} s)", LOCK_TTL.as_secs());
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
