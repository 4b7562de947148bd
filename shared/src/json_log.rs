//! One JSON object per log line, in the shape log pipelines (Loki, Elasticsearch, Cloud Logging, Datadog)
//! read without a parsing rule: `timestamp`, `level`, `message`, `target`, then `trace_id` and `span_id`
//! when the line was written inside a traced span (so a log line leads to its trace and back), `span` (the
//! innermost span: its `name` and its fields, such as a request's `id`), and the event's own fields at the
//! top level. tracing-subscriber's own JSON nests the message and fields under `fields` and knows nothing
//! of OpenTelemetry's ids. The layer records span fields as JSON ([`layer`]), which this reads back.

use std::fmt;
use std::sync::{Arc, OnceLock};

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::dispatcher::WeakDispatch;
use tracing::field::{Field, Visit};
use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The names the line's own keys take; an event's field of the same name is written as `fields.<name>`.
const OWN: [&str; 7] = ["timestamp", "level", "message", "target", "trace_id", "span_id", "span"];

/// Formats each event as one flat JSON object (see the module's documentation). The span's OpenTelemetry
/// ids are asked of the subscriber it runs in, which [`layer`] hands it once registered: a formatter runs
/// inside the subscriber, where `Span::current()` finds no subscriber to ask.
#[derive(Debug, Default, Clone)]
pub struct JsonLine {
    dispatch: Arc<OnceLock<WeakDispatch>>,
}

/// Hands the subscriber it is registered in to its [`JsonLine`].
struct Registered(Arc<OnceLock<WeakDispatch>>);

impl<S: Subscriber> Layer<S> for Registered {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        let _ = self.0.set(subscriber.downgrade());
    }
}

/// A fmt layer writing [`JsonLine`]s to `writer`, span fields recorded as JSON.
pub fn layer<S, W>(writer: W) -> impl Layer<S> + Send + Sync
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let line = JsonLine::default();
    let registered = Registered(line.dispatch.clone());
    let fmt = tracing_subscriber::fmt::layer().fmt_fields(JsonFields::new()).event_format(line).with_writer(writer);
    registered.and_then(fmt)
}

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let mut line: Vec<(String, Value)> = vec![
            ("timestamp".into(), now.into()),
            ("level".into(), meta.level().as_str().into()),
            ("message".into(), fields.message.take().unwrap_or_default().into()),
            ("target".into(), meta.target().into()),
        ];
        if let Some(span) = ctx.lookup_current() {
            // Asked before the span's extensions are read below: the ids are kept there, behind a lock.
            let dispatch = self.dispatch.get().and_then(WeakDispatch::upgrade);
            let context = dispatch.and_then(|d| tracing_opentelemetry::get_otel_context(&span.id(), &d));
            let context = context.unwrap_or_default();
            let otel = context.span();
            let ids = otel.span_context();
            if ids.is_valid() {
                line.push(("trace_id".into(), ids.trace_id().to_string().into()));
                line.push(("span_id".into(), ids.span_id().to_string().into()));
            }
            let mut described = Map::new();
            described.insert("name".into(), span.name().into());
            if let Some(recorded) = span.extensions().get::<FormattedFields<N>>() {
                match serde_json::from_str::<Map<String, Value>>(&recorded.fields) {
                    Ok(fields) => described.extend(fields),
                    Err(_) if recorded.fields.is_empty() => {}
                    Err(_) => drop(described.insert("fields".into(), recorded.fields.as_str().into())),
                }
            }
            line.push(("span".into(), Value::Object(described)));
        }
        for (name, value) in fields.rest {
            let name = if OWN.contains(&name.as_str()) { format!("fields.{name}") } else { name };
            line.push((name, value));
        }
        writeln!(writer, "{}", Ordered(&line))
    }
}

/// An object written with its keys in this order (serde_json's own map sorts them).
struct Ordered<'a>(&'a [(String, Value)]);

impl fmt::Display for Ordered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (key, value)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}:{}", Value::String(key.clone()), value)?;
        }
        f.write_str("}")
    }
}

/// An event's fields: its message apart, the others as JSON values in the order they were recorded.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    rest: Vec<(String, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::String(text)) => self.message = Some(text),
            (name, value) => self.rest.push((name.trim_start_matches("r#").to_string(), value)),
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// What the layer wrote, line by line.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(buffer: &Buffer) -> Vec<String> {
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap().lines().map(String::from).collect()
    }

    fn keys(line: &str) -> Vec<String> {
        // The order as written: serde_json would sort the keys of a parsed map.
        let value: Value = serde_json::from_str(line).unwrap();
        let mut found: Vec<(usize, String)> =
            value.as_object().unwrap().keys().map(|k| (line.find(&format!("\"{k}\":")).unwrap(), k.clone())).collect();
        found.sort();
        found.into_iter().map(|(_, k)| k).collect()
    }

    #[test]
    fn a_line_is_flat_with_the_message_first_and_the_trace_and_span_ids_of_the_span_it_was_written_in() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
            .with(layer(move || writer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(partitions = 3, ok = true, "outside any span");
            let span = tracing::info_span!("batch", messages = 2);
            let _entered = span.enter();
            tracing::warn!(error = "broker away", level = "mine", "inside the batch");
        });
        let lines = lines(&buffer);
        assert_eq!(lines.len(), 2, "{lines:?}");

        assert_eq!(keys(&lines[0]), ["timestamp", "level", "message", "target", "partitions", "ok"]);
        let outside: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(outside["message"], "outside any span");
        assert_eq!(outside["level"], "INFO");
        assert_eq!(outside["partitions"], 3);
        assert_eq!(outside["ok"], true);

        let expected =
            ["timestamp", "level", "message", "target", "trace_id", "span_id", "span", "error", "fields.level"];
        assert_eq!(keys(&lines[1]), expected);
        let inside: Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(inside["level"], "WARN");
        assert_eq!(inside["fields.level"], "mine");
        assert_eq!(inside["span"], serde_json::json!({"name": "batch", "messages": 2}));
        let (trace, span) = (inside["trace_id"].as_str().unwrap(), inside["span_id"].as_str().unwrap());
        assert!(trace.len() == 32 && trace.chars().all(|c| c.is_ascii_hexdigit()) && trace != "0".repeat(32));
        assert!(span.len() == 16 && span.chars().all(|c| c.is_ascii_hexdigit()) && span != "0".repeat(16));
        chrono::DateTime::parse_from_rfc3339(inside["timestamp"].as_str().unwrap()).unwrap();
    }

    #[test]
    fn without_traces_a_line_inside_a_span_names_the_span_and_no_ids() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(layer(move || writer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let _entered = tracing::info_span!("request", id = "r-1").entered();
            tracing::info!("served");
        });
        let lines = lines(&buffer);
        assert_eq!(keys(&lines[0]), ["timestamp", "level", "message", "target", "span"]);
        let line: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(line["span"], serde_json::json!({"name": "request", "id": "r-1"}));
    }
}
