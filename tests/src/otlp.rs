//! A small OTLP trace receiver for the tests of traces: the binaries export to it as they would to a
//! collector, over the one transport it was started for (`POST /v1/traces` in protobuf or JSON, or gRPC's
//! `TraceService/Export`), and a test looks among the spans it collected.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

/// One span as received, its ids in lowercase hex as `traceparent` spells them.
#[derive(Debug, Clone)]
pub struct Span {
    /// The `service.name` of the resource that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// The trace and span ids of each link.
    pub links: Vec<(String, String)>,
    /// `SPAN_KIND_SERVER`, `SPAN_KIND_CONSUMER`, ... as OTLP names them.
    pub kind: String,
    /// `STATUS_CODE_UNSET`, `STATUS_CODE_OK` or `STATUS_CODE_ERROR`.
    pub status: String,
    /// The span's attributes, each value as text (an integer's digits, a string as it is).
    pub attributes: std::collections::BTreeMap<String, String>,
}

/// The receiver, listening on a free loopback port until dropped.
pub struct Receiver {
    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` is set to for a binary to export here.
    pub endpoint: String,
    /// What `OTEL_EXPORTER_OTLP_PROTOCOL` is set to: the one transport it takes.
    pub protocol: &'static str,
    spans: Arc<Mutex<Vec<Span>>>,
    server: tokio::task::JoinHandle<()>,
}

type Spans = Arc<Mutex<Vec<Span>>>;

impl Receiver {
    /// A receiver of OTLP over HTTP in protobuf, the default transport.
    pub async fn start() -> Self {
        Self::start_for("http/protobuf").await
    }

    /// A receiver of the transport `protocol` (`http/protobuf`, `http/json` or `grpc`) only.
    pub async fn start_for(protocol: &'static str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let server = match protocol {
            "grpc" => {
                let service = TraceServiceServer::new(Grpc(spans.clone()));
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                tokio::spawn(async move {
                    let server = tonic::transport::Server::builder().add_service(service);
                    server.serve_with_incoming(incoming).await.expect("receiver serves");
                })
            }
            _ => {
                let content_type = if protocol == "http/json" { JSON } else { PROTOBUF };
                let app = Router::new().route("/v1/traces", post(export)).with_state((spans.clone(), content_type));
                tokio::spawn(async move {
                    axum::serve(listener, app).await.expect("receiver serves");
                })
            }
        };
        Self { endpoint, protocol, spans, server }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans").clone()
    }

    /// Waits at most `timeout` for a span that `matches`, and returns it; fails the test with the spans
    /// that did arrive otherwise.
    pub async fn wait_for(&self, timeout: Duration, what: &str, matches: impl Fn(&Span) -> bool) -> Span {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if let Some(span) = spans.iter().find(|span| matches(span)) {
                return span.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; received {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// `POST /v1/traces`: an `ExportTraceServiceRequest` in the receiver's encoding, protobuf or OTLP's JSON;
/// its spans are kept. Another content type is refused.
async fn export(
    State((spans, content_type)): State<(Spans, &'static str)>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    if headers.get(header::CONTENT_TYPE).is_none_or(|t| t != content_type) {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, [(header::CONTENT_TYPE, content_type)], Vec::new());
    }
    let request = match content_type {
        JSON => serde_json::from_slice::<ExportTraceServiceRequest>(&body).ok(),
        _ => ExportTraceServiceRequest::decode(body).ok(),
    };
    let Some(request) = request else {
        return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, content_type)], Vec::new());
    };
    spans.lock().expect("spans").extend(received(request));
    let response = match content_type {
        JSON => b"{}".to_vec(),
        _ => ExportTraceServiceResponse::default().encode_to_vec(),
    };
    (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], response)
}

/// gRPC's `TraceService`: each export's spans are kept.
struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().expect("spans").extend(received(request.into_inner()));
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The spans of one export.
fn received(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let attributes = resource_spans.resource.map(|r| r.attributes).unwrap_or_default();
        let service = attributes.into_iter().find(|a| a.key == "service.name").and_then(|a| match a.value?.value? {
            Value::StringValue(name) => Some(name),
            _ => None,
        });
        for span in resource_spans.scope_spans.into_iter().flat_map(|scope| scope.spans) {
            let kind = span.kind().as_str_name().to_string();
            received.push(Span {
                service: service.clone().unwrap_or_default(),
                name: span.name,
                trace_id: hex::encode(span.trace_id),
                span_id: hex::encode(span.span_id),
                parent_span_id: hex::encode(span.parent_span_id),
                links: span.links.into_iter().map(|l| (hex::encode(l.trace_id), hex::encode(l.span_id))).collect(),
                kind,
                status: span.status.map(|s| s.code().as_str_name().to_string()).unwrap_or_default(),
                attributes: span
                    .attributes
                    .into_iter()
                    .map(|a| {
                        let text = match a.value.and_then(|v| v.value) {
                            Some(Value::StringValue(s)) => s,
                            Some(Value::IntValue(i)) => i.to_string(),
                            Some(Value::BoolValue(b)) => b.to_string(),
                            Some(Value::DoubleValue(d)) => d.to_string(),
                            other => format!("{other:?}"),
                        };
                        (a.key, text)
                    })
                    .collect(),
            });
        }
    }
    received
}
