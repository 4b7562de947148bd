//! What both binaries do around `run()`: set up logging and traces, and wait for a shutdown signal.
//!
//! Traces are off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set: then the spans of the product's own code
//! (a request of the API, a batch of the projector) are exported over OTLP, in batches, with the SDK's
//! standard variables honoured (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `_HEADERS`, `_TIMEOUT`,
//! `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) and the transport
//! `OTEL_EXPORTER_OTLP_PROTOCOL` names ([`protocol`]).

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

/// The variables naming the OTLP transport, the traces' own first.
const PROTOCOLS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"];

/// Why traces could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error("{variable}={value} is none of grpc, http/protobuf, http/json")]
    UnknownProtocol { variable: &'static str, value: String },
    #[error(transparent)]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The OTLP transport the first of [`PROTOCOLS`] that `var` finds set names; the specification's default,
/// `http/protobuf`, when neither is. The exporter's crate would pick JSON by default with every transport
/// built in, and take an unknown name for its default: here the default is the specification's, and an
/// unknown name turns traces off, saying so.
fn protocol(var: impl Fn(&str) -> Option<String>) -> Result<opentelemetry_otlp::Protocol, TracesError> {
    use opentelemetry_otlp::Protocol;
    let named = PROTOCOLS.into_iter().find_map(|variable| Some((variable, var(variable).filter(|v| !v.is_empty())?)));
    match named {
        None => Ok(Protocol::HttpBinary),
        Some((variable, value)) => match value.trim().to_ascii_lowercase().as_str() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpBinary),
            "http/json" => Ok(Protocol::HttpJson),
            _ => Err(TracesError::UnknownProtocol { variable, value }),
        },
    }
}

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
    let chosen = protocol(|variable| std::env::var(variable).ok());
    let transport = match chosen {
        Ok(opentelemetry_otlp::Protocol::Grpc) => "grpc",
        Ok(opentelemetry_otlp::Protocol::HttpJson) => "http/json",
        _ => "http/protobuf",
    };
    let (provider, failed) = match std::env::var(ENDPOINT) {
        Ok(endpoint) if !endpoint.is_empty() => match chosen.and_then(|protocol| tracer_provider(service, protocol)) {
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
        (Some(_), _) => tracing::info!(service, protocol = transport, "exporting traces over OTLP"),
        (None, Some(e)) => tracing::warn!(error = %e, "traces are off: the OTLP exporter could not be set up"),
        (None, None) => {}
    }
    Telemetry(provider)
}

/// The tracer provider: spans batched on the Tokio runtime (`OTEL_BSP_*`) and sent by the OTLP exporter
/// of `protocol` (its endpoint, headers and timeout from the `OTEL_EXPORTER_OTLP_*` variables).
fn tracer_provider(
    service: &'static str,
    protocol: opentelemetry_otlp::Protocol,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, TracesError> {
    use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
    use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;

    let exporter = match protocol {
        Protocol::Grpc => SpanExporter::builder().with_tonic().with_protocol(protocol).build()?,
        _ => SpanExporter::builder().with_http().with_protocol(protocol).build()?,
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_otlp::Protocol;

    fn resolved(set: &[(&str, &str)]) -> Result<Protocol, String> {
        let set: Vec<(String, String)> = set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        protocol(|variable| set.iter().find(|(k, _)| k == variable).map(|(_, v)| v.clone())).map_err(|e| e.to_string())
    }

    #[test]
    fn the_protocol_is_the_traces_own_then_the_general_one_then_http_protobuf() {
        assert_eq!(resolved(&[]), Ok(Protocol::HttpBinary));
        assert_eq!(resolved(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "")]), Ok(Protocol::HttpBinary));
        assert_eq!(resolved(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]), Ok(Protocol::Grpc));
        assert_eq!(resolved(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]), Ok(Protocol::HttpJson));
        assert_eq!(resolved(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "HTTP/Protobuf")]), Ok(Protocol::HttpBinary));
        let both = [("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")];
        assert_eq!(resolved(&both), Ok(Protocol::HttpJson));
        assert_eq!(
            resolved(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")]),
            Err("OTEL_EXPORTER_OTLP_PROTOCOL=thrift is none of grpc, http/protobuf, http/json".into())
        );
    }
}
