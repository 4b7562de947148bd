use clap::Parser;
use projector::ops::{self, Cli};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _telemetry = shared::process::init_tracing(cli.config.log_format, "projector");
    ops::run(cli).await?;
    Ok(())
}
