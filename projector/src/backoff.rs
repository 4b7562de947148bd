//! Waiting between attempts at something that failed for a reason outside the projector (Redis or the
//! broker away), without delaying a shutdown.

use std::time::Duration;

use tokio::sync::watch;

/// Exponential backoff from 100 ms to 5 s that gives up when the projector is shutting down.
pub struct Backoff(Duration);

impl Backoff {
    pub fn new() -> Self {
        Self(Duration::from_millis(100))
    }

    /// Waits the next delay; false when shut down meanwhile.
    pub async fn wait(&mut self, stopped: &mut watch::Receiver<bool>) -> bool {
        let delay = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }
}
