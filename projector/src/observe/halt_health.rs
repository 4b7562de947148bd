//! The partitions the dead-letter limit halted (see `source/dead_letter_limit.rs`): a gauge, and where
//! and why for `/readyz`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicI64;
use std::sync::Mutex;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::source::{Halt, Partition};

#[derive(Default)]
pub struct HaltHealth {
    /// Partitions halted by the dead-letter limit.
    pub halted: Gauge<i64, AtomicI64>,
    /// Each halted partition: `<topic>/<partition> at <offset>: <reason>`.
    detail: Mutex<Vec<String>>,
}

impl HaltHealth {
    pub fn register(registry: &mut Registry) -> Self {
        let health = Self::default();
        registry.register(
            "partitions_halted",
            "Partitions halted by the dead-letter limit: so much of their latest messages would be poison \
             that nothing is set aside and they are read again later",
            health.halted.clone(),
        );
        health
    }

    /// What the limit holds halted now.
    pub fn set(&self, halted: &BTreeMap<Partition, Halt>) {
        self.halted.set(halted.len() as i64);
        let detail = halted.iter().map(|(p, halt)| format!("{p} at {}: {}", halt.offset, halt.reason)).collect();
        *self.detail.lock().expect("halt detail") = detail;
    }

    /// Each halted partition, where and why.
    pub fn detail(&self) -> Vec<String> {
        self.detail.lock().expect("halt detail").clone()
    }
}
