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

/// jemalloc, not glibc's malloc: with 100,000 organizations' keys and pages kept, glibc's arenas held 49 MB
/// free beside 117 MiB in use (180 MiB resident); jemalloc, 128 MiB resident for the same (BENCHMARKS.md,
/// row "100,000 organizations"; history in "The API's own memory at 100,000 organizations").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
