use clap::Parser;
use projector::ops::{self, Cli};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    shared::process::init_tracing(cli.config.log_format);
    ops::run(cli).await?;
    Ok(())
}
