//! The background tasks of a server (the refresh, the admin listener, pruning), owned by a guard: when the
//! server stops, however it stops, the guard is dropped and the tasks stop with it.

use std::future::Future;

use shared::task::AbortOnDrop;

#[derive(Default)]
pub struct Tasks(Vec<AbortOnDrop>);

impl Tasks {
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.push(AbortOnDrop::spawn(task));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_tasks_stop_when_their_guard_is_dropped() {
        let alive = Arc::new(());
        let mut tasks = Tasks::default();
        let held = alive.clone();
        tasks.spawn(async move {
            let _held = held;
            std::future::pending::<()>().await
        });
        assert_eq!(Arc::strong_count(&alive), 2);
        drop(tasks);
        for _ in 0..100 {
            if Arc::strong_count(&alive) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the task outlived its guard");
    }
}
