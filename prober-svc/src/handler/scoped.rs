//! An executor for hyper's HTTP/2 client whose tasks live and die inside one probe.
//!
//! hyper's HTTP/2 client hands the connection — which owns the socket — to an executor as a
//! task of its own. On tokio's executor that task outlives the probe that made it: against a
//! target that never reads, it keeps waiting to flush what it has queued, holding the socket,
//! long after the probe's deadline, and nothing bounds how many such tasks one pod's targets can
//! leave behind. Here the tasks are polled by the probe's own future ([`Scope::run`]) and dropped
//! with it, so the probe's deadline bounds everything the probe holds: its sockets close (through
//! the dialer's closer) when its future ends, on whatever thread drops it.
//!
//! hyper spawns a fixed handful of tasks per connection (the connection, and a body pipe per
//! request with a body), and a probe makes one request, so the task list is short; its channel is
//! unbounded only in type.

use std::future::Future;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;

/// Hands hyper's tasks to the [`Scope`] it was made with.
#[derive(Clone)]
pub(crate) struct ScopedExec(UnboundedSender<BoxFuture<'static, ()>>);

impl<F> hyper::rt::Executor<F> for ScopedExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        // The scope is gone only once the probe is over: its tasks are not wanted any more.
        let _ = self.0.unbounded_send(Box::pin(fut));
    }
}

/// The tasks of one probe, polled while it runs.
pub(crate) struct Scope {
    spawned: UnboundedReceiver<BoxFuture<'static, ()>>,
}

/// A new scope and the executor that feeds it.
pub(crate) fn scope() -> (ScopedExec, Scope) {
    let (tx, rx) = unbounded();
    (ScopedExec(tx), Scope { spawned: rx })
}

impl Scope {
    /// Runs `work` while polling every task handed to the executor; the tasks that are still
    /// running when `work` ends (or when this future is dropped) are dropped with it.
    pub(crate) async fn run<W: Future>(self, work: W) -> W::Output {
        let mut spawned = self.spawned;
        let mut tasks = FuturesUnordered::new();
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                out = &mut work => return out,
                Some(task) = spawned.next() => tasks.push(task),
                Some(()) = tasks.next(), if !tasks.is_empty() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use hyper::rt::Executor;

    use super::*;

    /// Sets its flag when dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn tasks_run_with_the_work_and_are_dropped_with_it() {
        let (exec, scope) = scope();
        let (ran, dropped) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (r, d) = (ran.clone(), Dropped(dropped.clone()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let out = scope
            .run(async move {
                exec.execute(async move {
                    let _d = d;
                    r.store(true, Ordering::SeqCst);
                    let _ = tx.send(());
                    std::future::pending::<()>().await;
                });
                // The task runs although nothing but the scope polls it.
                rx.await.expect("task ran");
                7
            })
            .await;
        assert_eq!(out, 7);
        assert!(ran.load(Ordering::SeqCst));
        assert!(
            dropped.load(Ordering::SeqCst),
            "the pending task went with the scope"
        );
    }
}
