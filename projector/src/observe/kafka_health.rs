//! What the projector knows of its Kafka clients beyond one batch: the errors librdkafka reported. A
//! message the consumer cannot read (a compression it cannot undo, a topic it may not read or that
//! disappeared) is never skipped: librdkafka fetches it again and again, and its partition goes no
//! further. So each error is counted by code, logged at most every few seconds, and `/readyz` names it
//! while it keeps coming.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use shared::log_every::LogEvery;

/// How long an error keeps the projector unready after librdkafka last reported it.
pub const ERROR_WINDOW: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `consumer`: a message or partition could not be read; `client`: the connection, the login or
    /// the brokers (librdkafka retries these by itself); `commit`: an offset commit the broker refused
    /// or that could not be sent (the next commits carry the offsets again).
    pub source: String,
    pub code: String,
}

pub struct KafkaHealth {
    pub errors: Family<ErrorLabels, Counter<u64, AtomicU64>>,
    /// The last consumer error: when, and what librdkafka said.
    last: Mutex<Option<(Instant, String)>>,
    /// Errors are logged once every 10 s at most while they repeat.
    logged: LogEvery,
}

impl Default for KafkaHealth {
    fn default() -> Self {
        Self { errors: Family::default(), last: Mutex::default(), logged: LogEvery::millis(10_000) }
    }
}

impl KafkaHealth {
    pub fn register(registry: &mut Registry) -> Self {
        let health = Self::default();
        registry.register(
            "kafka_errors",
            "Errors reported by librdkafka, by source (consumer: a partition cannot be read; client; commit: an \
             offset commit refused) and code",
            health.errors.clone(),
        );
        health
    }

    /// Records an error of the consumer: a partition stops at a message it cannot read.
    pub fn consumer_error(&self, code: &str, message: &str) {
        self.count("consumer", code);
        *self.last.lock().expect("last kafka error") = Some((Instant::now(), message.to_string()));
        if let Some(skipped) = self.logged.allow() {
            tracing::error!(
                error = message,
                skipped,
                "the kafka consumer cannot read a partition; it stays where it is"
            );
        }
    }

    /// Records an offset commit the broker refused, or that could not be sent: nothing is lost (a
    /// projector reads from the read model's positions, and the commits that follow carry the offsets
    /// again; a batch may be applied again after a restart, which changes nothing), but commits refused
    /// for good leave the group's lag, and a start's check, behind the read model.
    /// Counted only: librdkafka logs each refusal itself (its `COMMITFAIL` line, at WARN).
    pub fn commit_refused(&self, code: &str) {
        self.count("commit", code);
    }

    /// Records an offset commit that failed before it was sent ([`Self::commit_refused`]), logged at
    /// most every few seconds while it repeats.
    pub fn commit_failed(&self, code: &str, message: &str) {
        self.commit_refused(code);
        if let Some(skipped) = self.logged.allow() {
            tracing::warn!(error = message, skipped, "an offset commit failed; the next commits carry it again");
        }
    }

    /// Records an error of a client (connection, login, brokers), which librdkafka retries by itself.
    pub fn client_error(&self, code: &str, message: &str) {
        self.count("client", code);
        if let Some(skipped) = self.logged.allow() {
            tracing::warn!(error = message, skipped, "kafka client error");
        }
    }

    /// The last consumer error, if it came within [`ERROR_WINDOW`].
    pub fn recent_consumer_error(&self) -> Option<String> {
        let last = self.last.lock().expect("last kafka error");
        last.as_ref().filter(|(at, _)| at.elapsed() < ERROR_WINDOW).map(|(_, message)| message.clone())
    }

    fn count(&self, source: &str, code: &str) {
        self.errors.get_or_create(&ErrorLabels { source: source.into(), code: code.into() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_error_is_counted_logged_once_in_a_while_and_named_while_recent() {
        let health = KafkaHealth::default();
        assert_eq!(health.recent_consumer_error(), None);
        health.consumer_error("BadCompression", "Local: Invalid compressed data");
        assert_eq!(health.logged.allow(), None, "the next one within the interval is not logged");
        health.client_error("AllBrokersDown", "all brokers down");
        assert_eq!(health.recent_consumer_error().as_deref(), Some("Local: Invalid compressed data"));
        let consumer = ErrorLabels { source: "consumer".into(), code: "BadCompression".into() };
        assert_eq!(health.errors.get_or_create(&consumer).get(), 1);
        *health.last.lock().unwrap() = Some((Instant::now() - ERROR_WINDOW, "old".into()));
        assert_eq!(
            health.recent_consumer_error(),
            None,
            "an error no longer repeated stops counting against readiness"
        );
    }
}
