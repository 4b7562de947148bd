//! `projector rebuild`: runs a rebuild ([`crate::generation::rebuild`]) and prints what it tells.

use std::time::Duration;

use crate::config::Config;
use crate::generation::rebuild::{self, Options};
use crate::Error;

pub fn options(grace_secs: u64, handover_lag: i64, handover_timeout_secs: u64, lock_wait_secs: u64) -> Options {
    Options {
        grace: Duration::from_secs(grace_secs),
        handover_lag,
        handover_timeout: Duration::from_secs(handover_timeout_secs),
        lock_wait: Duration::from_secs(lock_wait_secs),
    }
}

pub async fn run(config: Config, options: Options) -> Result<(), Error> {
    let stopped = crate::stop_signal(shared::process::shutdown_signal());
    rebuild::run(config, options, stopped, &|notice| println!("{notice}")).await?;
    Ok(())
}
