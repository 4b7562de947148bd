//! A background task owned by a guard: when the guard drops, however its owner ends (a return, an error, a
//! panic, a cancelled future), the task is aborted with it. One type for every task that must not outlive
//! what started it: a lease's renewal, the live projector's memory gauges, the query API's refresh.

use std::future::Future;

use tokio::task::JoinHandle;

/// A spawned task, aborted when this guard drops.
#[must_use = "the task is aborted as soon as its guard is dropped"]
pub struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    /// Spawns `task` on the current runtime, owned by the returned guard.
    pub fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(task))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_task_is_aborted_when_its_guard_drops() {
        let alive = Arc::new(());
        let held = alive.clone();
        let guard = AbortOnDrop::spawn(async move {
            let _held = held;
            std::future::pending::<()>().await
        });
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&alive), 2, "the task runs while its guard lives");
        drop(guard);
        for _ in 0..100 {
            if Arc::strong_count(&alive) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the task outlived its guard");
    }
}
