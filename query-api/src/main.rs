use clap::Parser;
use query_api::config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    shared::process::init_tracing(config.log_format);
    let listener = tokio::net::TcpListener::bind(config.listen_addr).await?;
    query_api::run(listener, config, shared::process::shutdown_signal()).await
}
