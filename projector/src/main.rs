use clap::Parser;
use projector::config::{Cli, Command, DlqAction};
use projector::rebuild::Options;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    shared::process::init_tracing(cli.config.log_format);
    let config = cli.config;
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => projector::run(config, shared::process::shutdown_signal()).await?,
        Command::Rebuild { grace_secs, handover_lag, handover_timeout_secs, lock_wait_secs } => {
            let options = Options {
                grace: std::time::Duration::from_secs(grace_secs),
                handover_lag,
                handover_timeout: std::time::Duration::from_secs(handover_timeout_secs),
                lock_wait: std::time::Duration::from_secs(lock_wait_secs),
            };
            projector::rebuild::run(config, options, projector::stop_signal(shared::process::shutdown_signal()))
                .await?;
        }
        Command::Digest { generation } => println!("{}", projector::admin::digest(&config, generation).await?),
        Command::Status => print!("{}", projector::admin::status(&config).await?),
        Command::Dlq { action: DlqAction::List } => {
            for letter in tokio::task::block_in_place(|| projector::dlq::list(&config))? {
                let key = letter.key.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                println!("{}/{}@{} key={key} reason={}", letter.topic, letter.partition, letter.offset, letter.reason);
            }
        }
        Command::Dlq { action: DlqAction::Replay } => {
            println!("replayed {} dead letters", projector::dlq::replay(&config).await?)
        }
    }
    Ok(())
}
