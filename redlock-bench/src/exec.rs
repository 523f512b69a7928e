//! The async runtimes a scenario runs on, behind one small [`Executor`] trait: block on a
//! future, run futures as separate tasks and wait for them, or run them until a deadline and
//! cancel what is left.
//!
//! It never measures and never knows which client runs; it only schedules.

use std::future::Future;
use std::time::Instant;

/// A runtime a scenario's tasks run on.
pub(crate) trait Executor {
    /// Runs `future` to completion on the calling thread.
    fn block_on<F: Future>(&self, future: F) -> F::Output;

    /// Spawns each future as a task of its own and waits for all of them.
    ///
    /// # Panics
    /// If a task panicked (the panic is carried over).
    fn join_tasks<F>(&self, tasks: Vec<F>) -> Vec<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static;

    /// Spawns each future as a task of its own, waits until `deadline` and cancels (drops)
    /// every task still running.
    fn run_until<F>(&self, tasks: Vec<F>, deadline: Instant)
    where
        F: Future<Output = ()> + Send + 'static;
}

/// A tokio runtime, current-thread or multi-thread (one worker per core).
#[derive(Debug)]
pub(crate) struct TokioExec(tokio::runtime::Runtime);

impl TokioExec {
    /// A current-thread runtime: every task on the thread that blocks on it.
    pub(crate) fn current_thread() -> Self {
        Self(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread tokio runtime"),
        )
    }

    /// A multi-thread runtime with tokio's default worker count (one per core).
    pub(crate) fn multi_thread() -> Self {
        Self(
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("a multi-thread tokio runtime"),
        )
    }
}

impl Executor for TokioExec {
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.0.block_on(future)
    }

    fn join_tasks<F>(&self, tasks: Vec<F>) -> Vec<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.0.block_on(async {
            let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
            let mut outputs = Vec::with_capacity(handles.len());
            for handle in handles {
                match handle.await {
                    Ok(output) => outputs.push(output),
                    Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
                    Err(err) => panic!("a bench task was cancelled: {err}"),
                }
            }
            outputs
        })
    }

    fn run_until<F>(&self, tasks: Vec<F>, deadline: Instant)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.0.block_on(async {
            let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
            tokio::time::sleep_until(deadline.into()).await;
            for handle in &handles {
                handle.abort();
            }
            for handle in handles {
                if let Err(err) = handle.await
                    && err.is_panic()
                {
                    std::panic::resume_unwind(err.into_panic());
                }
            }
        });
    }
}

/// The async-std global executor (on async-io, like smol).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AsyncStdExec;

impl Executor for AsyncStdExec {
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        async_std::task::block_on(future)
    }

    fn join_tasks<F>(&self, tasks: Vec<F>) -> Vec<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        async_std::task::block_on(in_order(
            tasks.into_iter().map(async_std::task::spawn).collect(),
        ))
    }

    fn run_until<F>(&self, tasks: Vec<F>, deadline: Instant)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        async_std::task::block_on(async {
            let handles: Vec<_> = tasks.into_iter().map(async_std::task::spawn).collect();
            async_std::task::sleep(deadline.saturating_duration_since(Instant::now())).await;
            for handle in handles {
                handle.cancel().await;
            }
        });
    }
}

/// smol's global executor (on async-io), which `redlock-smol`'s driver spawns on too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SmolExec;

impl Executor for SmolExec {
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        smol::block_on(future)
    }

    fn join_tasks<F>(&self, tasks: Vec<F>) -> Vec<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        smol::block_on(in_order(tasks.into_iter().map(smol::spawn).collect()))
    }

    fn run_until<F>(&self, tasks: Vec<F>, deadline: Instant)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        smol::block_on(async {
            let handles: Vec<_> = tasks.into_iter().map(smol::spawn).collect();
            smol::Timer::at(deadline).await;
            for handle in handles {
                handle.cancel().await;
            }
        });
    }
}

/// Each spawned task's output, in the order the tasks were spawned.
async fn in_order<H: Future>(handles: Vec<H>) -> Vec<H::Output> {
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.await);
    }
    outputs
}
