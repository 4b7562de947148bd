//! The connections one instance holds, at most `MAX_CONNECTIONS`. Each holds a descriptor and its buffers
//! (about 15 KiB), so connections nobody bounds would take the process past its descriptor and memory
//! limits long before its requests do. Past the cap, a new connection is not refused while another is only
//! waiting: the one that has waited longest without a request in progress (idle between requests, or
//! still sending its head) is closed to make room, as its clocks would close it later. A client holding
//! connections open cannot shut out the clients that send requests: theirs are never the longest waiting.
//! Only when every connection is answering a request is the new one closed at once. Both are counted
//! (`api_connections_closed_total{cause="shed"|"refused"}`).
//!
//! A connection's stream (`super::deadlines`) tells its [`Watch`] when it starts and stops waiting, and
//! closes itself at its next wait once shed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::task::AtomicWaker;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

/// Not waiting: a request is in progress.
const BUSY: u64 = u64::MAX;

/// The open connections and the cap.
pub struct Connections {
    cap: usize,
    epoch: Instant,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Watch>>>,
    counts: Counts,
}

/// The metrics the cap moves.
#[derive(Clone, Default)]
pub struct Counts {
    pub open: Gauge,
    pub shed: Counter,
    pub refused: Counter,
}

/// One connection as the cap sees it: since when it waits (or that it is answering a request), and whether
/// it was asked to close.
pub struct Watch {
    epoch: Instant,
    waiting_since: AtomicU64,
    shed: AtomicBool,
    waker: AtomicWaker,
}

/// A connection admitted: it leaves the count when dropped.
pub struct Admitted {
    id: u64,
    connections: Arc<Connections>,
    pub watch: Arc<Watch>,
}

impl Connections {
    pub fn new(cap: usize, counts: Counts) -> Arc<Self> {
        let epoch = Instant::now();
        Arc::new(Connections { cap, epoch, next: AtomicU64::new(0), open: Mutex::default(), counts })
    }

    /// Admits a new connection, shedding the longest-waiting one when at the cap; `None` when every
    /// connection is answering a request (the new one is then closed).
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut open = self.open.lock().expect("connections lock");
        if open.len() >= self.cap {
            // Connections already asked to close still count until they are gone: a burst of new ones sheds
            // one each, not the same one again.
            let longest = open
                .values()
                .filter(|watch| !watch.shed.load(Ordering::Relaxed))
                .map(|watch| (watch.waiting_since.load(Ordering::Relaxed), watch))
                .filter(|(since, _)| *since != BUSY)
                .min_by_key(|(since, _)| *since);
            match longest {
                Some((_, watch)) => {
                    watch.shed.store(true, Ordering::Relaxed);
                    watch.waker.wake();
                    self.counts.shed.inc();
                }
                None => {
                    self.counts.refused.inc();
                    return None;
                }
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let watch = Arc::new(Watch::new(self.epoch));
        open.insert(id, watch.clone());
        self.counts.open.set(open.len() as i64);
        Some(Admitted { id, connections: self.clone(), watch })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.connections.open.lock().expect("connections lock");
        open.remove(&self.id);
        self.connections.counts.open.set(open.len() as i64);
    }
}

impl Watch {
    fn new(epoch: Instant) -> Self {
        let now = Instant::now().saturating_duration_since(epoch).as_micros() as u64;
        Watch { epoch, waiting_since: AtomicU64::new(now), shed: AtomicBool::new(false), waker: AtomicWaker::new() }
    }

    /// A watch of no cap's (a connection's clocks alone).
    #[cfg(test)]
    pub fn unwatched() -> Arc<Self> {
        Arc::new(Watch::new(Instant::now()))
    }

    /// The connection waits (for a request, or for the rest of its head) since `since`; `None`: it is
    /// answering one.
    pub fn waiting(&self, since: Option<Instant>) {
        let at = since.map_or(BUSY, |since| since.saturating_duration_since(self.epoch).as_micros() as u64);
        self.waiting_since.store(at, Ordering::Relaxed);
    }

    /// Whether the connection was asked to close; registers the task to wake when it is.
    pub fn shed(&self, cx: &std::task::Context<'_>) -> bool {
        self.waker.register(cx.waker());
        self.shed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_cap_the_longest_waiting_connection_is_shed_and_a_busy_one_never() {
        let connections = Connections::new(3, Counts::default());
        let now = Instant::now();
        let busy = connections.admit().unwrap();
        busy.watch.waiting(None);
        let old = connections.admit().unwrap();
        old.watch.waiting(Some(now));
        let young = connections.admit().unwrap();
        young.watch.waiting(Some(now + std::time::Duration::from_secs(1)));
        let fourth = connections.admit().expect("room is made");
        assert!(old.watch.shed.load(Ordering::Relaxed), "the longest waiting is shed");
        assert!(!busy.watch.shed.load(Ordering::Relaxed) && !young.watch.shed.load(Ordering::Relaxed));
        // The shed one still counts until it is gone: the next new one sheds another.
        fourth.watch.waiting(None);
        let _fifth = connections.admit().expect("room is made");
        assert!(young.watch.shed.load(Ordering::Relaxed));
        assert_eq!(connections.counts.shed.get(), 2);
        // Every connection not shed answering a request: no room, the new one is refused.
        drop((old, young));
        _fifth.watch.waiting(None);
        assert!(connections.admit().is_none());
        assert_eq!(connections.counts.refused.get(), 1);
        assert_eq!(connections.counts.open.get(), 3);
        drop((busy, fourth));
        assert_eq!(connections.counts.open.get(), 1);
    }
}
