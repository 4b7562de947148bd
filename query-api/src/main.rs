use clap::Parser;
use query_api::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let _telemetry = shared::process::init_tracing(config.log_format, "query-api");
    let listener = tokio::net::TcpListener::bind(config.listen_addr).await?;
    let admin = match config.admin_addr.0 {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await?),
        None => None,
    };
    query_api::run(listener, admin, config, shared::process::shutdown_signal()).await
}
