//! What both binaries do around `run()`: set up logging and traces, and wait for a shutdown signal.
//!
//! Traces are off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set: then the spans of the product's own code
//! (a request of the API, a batch of the projector) are exported over OTLP/HTTP as protobuf, in batches,
//! with the SDK's standard variables honoured (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `_HEADERS`,
//! `_TIMEOUT`, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).

/// A listen address, or none (`off`, or empty): for a server a deployment may turn off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalAddr(pub Option<std::net::SocketAddr>);

impl std::str::FromStr for OptionalAddr {
    type Err = std::net::AddrParseError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "off" | "" => Ok(Self(None)),
            addr => addr.parse().map(|a| Self(Some(a))),
        }
    }
}

/// Log format of a binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// What turns traces on: the standard variable naming the collector.
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Logs to stderr, as text or JSON lines, at the level `RUST_LOG` sets (info by default); and, when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set, exports the product's spans at info and above as `service`,
/// whatever `RUST_LOG` says. Called within the binary's (multi-threaded) Tokio runtime, where the
/// exporter runs; the returned guard is held until the process ends.
pub fn init_tracing(format: LogFormat, service: &'static str) -> Telemetry {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{fmt, EnvFilter, Layer};

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = match format {
        LogFormat::Text => fmt::layer().with_writer(std::io::stderr).boxed(),
        LogFormat::Json => crate::json_log::layer(std::io::stderr).boxed(),
    };
    let (provider, failed) = match std::env::var(ENDPOINT) {
        Ok(endpoint) if !endpoint.is_empty() => match tracer_provider(service) {
            Ok(provider) => (Some(provider), None),
            Err(e) => (None, Some(e)),
        },
        _ => (None, None),
    };
    // The product's own spans only: the exporter's own logs (and every library's spans) stay out of traces.
    let product = Targets::new()
        .with_target("query_api", LevelFilter::INFO)
        .with_target("projector", LevelFilter::INFO)
        .with_target("shared", LevelFilter::INFO);
    let traces = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider as _;
        tracing_opentelemetry::layer().with_tracer(provider.tracer(service)).with_filter(product)
    });
    tracing_subscriber::registry().with(logs.with_filter(filter)).with(traces).init();
    match (&provider, failed) {
        (Some(_), _) => tracing::info!(service, "exporting traces over OTLP"),
        (None, Some(e)) => tracing::warn!(error = %e, "traces are off: the OTLP exporter could not be set up"),
        (None, None) => {}
    }
    Telemetry(provider)
}

/// The tracer provider: spans batched on the Tokio runtime (`OTEL_BSP_*`) and sent by the OTLP/HTTP
/// protobuf exporter (its endpoint, headers and timeout from the `OTEL_EXPORTER_OTLP_*` variables).
fn tracer_provider(
    service: &'static str,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;

    let exporter =
        opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary).build()?;
    let processor = BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    // The resource's defaults read OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; a name set there wins.
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service);
    }
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build())
}

/// What [`init_tracing`] set up that must be closed: dropped, it exports the spans still queued and
/// stops the exporter. Nothing when traces are off.
#[must_use = "dropping it stops exporting traces"]
pub struct Telemetry(Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl Drop for Telemetry {
    fn drop(&mut self) {
        let Some(provider) = self.0.take() else { return };
        // Shutting down waits for the exporter's task on the runtime: the waiting worker hands its other
        // tasks to the rest of the runtime meanwhile.
        let shutdown = || provider.shutdown();
        let done = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(shutdown),
            _ => shutdown(),
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, "the trace exporter did not shut down cleanly");
        }
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown requested");
}
