//! A small OTLP/HTTP trace receiver for the tests of traces: the binaries export to it as they would to a
//! collector (`POST /v1/traces`, protobuf), and a test looks among the spans it collected.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
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
    spans: Arc<Mutex<Vec<Span>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new().route("/v1/traces", post(export)).with_state(spans.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("receiver serves");
        });
        Self { endpoint, spans, server }
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

/// `POST /v1/traces`: an `ExportTraceServiceRequest` in protobuf; its spans are kept.
async fn export(State(spans): State<Arc<Mutex<Vec<Span>>>>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    if headers.get(header::CONTENT_TYPE).is_none_or(|t| t != PROTOBUF) {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, [(header::CONTENT_TYPE, PROTOBUF)], Vec::new());
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, PROTOBUF)], Vec::new());
    };
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
    spans.lock().expect("spans").extend(received);
    (StatusCode::OK, [(header::CONTENT_TYPE, PROTOBUF)], ExportTraceServiceResponse::default().encode_to_vec())
}
