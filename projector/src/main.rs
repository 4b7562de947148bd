use clap::Parser;
use projector::ops::{self, Cli};

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    let _telemetry = shared::process::init_tracing(cli.config.log_format, "projector");
    Ok(ops::run(cli).await?)
}
