//! The async runtimes the tests run the async adapters on, behind one trait, so that the test
//! adapters (conformance and chaos) are written once, generic over it: tokio, async-std, and
//! smol (driving `redlock-smol`).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_async_std::AsyncStd;
use redlock_tokio::Tokio;

/// A task started by [`Executor::start`], to be joined by a deadline.
pub trait Joinable<T>: Send {
    /// Waits for the task until `by`; a task still running then is stopped (`Err`), as is one
    /// that panicked (its message was printed when it happened).
    fn join(self: Box<Self>, by: Instant) -> Result<T, String>;
}

/// An async runtime, as the tests use it.
pub trait Executor: Clone + Send + Sync + 'static {
    /// The adapter's runtime type, which names the adapter's `Redlock` and `Lock`.
    type Runtime: redlock_redis::aio::Runtime;
    /// The adapter crate, for messages.
    const ADAPTER: &'static str;

    /// Runs `future` to its end on this runtime, blocking the calling thread.
    fn block_on<F: Future>(&self, future: F) -> F::Output;

    /// Resolves after `duration`.
    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send;

    /// `future`'s output, or `None` if `limit` passes first.
    fn timeout<F>(limit: Duration, future: F) -> impl Future<Output = Option<F::Output>> + Send
    where
        F: Future + Send,
        F::Output: Send;

    /// Starts `work` at once on a thread that may block; the future resolves when it is done.
    fn spawn_blocking(work: Box<dyn FnOnce() + Send>) -> impl Future<Output = ()> + Send;

    /// Starts `future` as a task (tokio: on the runtime whose context the caller entered).
    fn start<T: Send + 'static>(
        future: impl Future<Output = T> + Send + 'static,
    ) -> Box<dyn Joinable<T>>;
}

/// tokio: a handle, and the runtime itself when the executor owns it.
#[derive(Clone, Debug)]
pub struct TokioExecutor {
    handle: tokio::runtime::Handle,
    /// Kept alive while the executor lives (dropped last by whoever holds the last clone).
    _owned: Option<Arc<tokio::runtime::Runtime>>,
}

impl TokioExecutor {
    /// A two-worker multi-thread runtime of its own.
    ///
    /// # Panics
    /// If the runtime cannot be built.
    pub fn owned() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Self {
            handle: runtime.handle().clone(),
            _owned: Some(Arc::new(runtime)),
        }
    }

    /// The runtime behind `handle` (owned elsewhere).
    pub fn on(handle: tokio::runtime::Handle) -> Self {
        Self {
            handle,
            _owned: None,
        }
    }
}

impl Executor for TokioExecutor {
    type Runtime = Tokio;
    const ADAPTER: &'static str = "redlock-tokio";

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }

    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        tokio::time::timeout(limit, future).await.ok()
    }

    fn spawn_blocking(work: Box<dyn FnOnce() + Send>) -> impl Future<Output = ()> + Send {
        // Spawned here, not when first polled.
        let task = tokio::task::spawn_blocking(work);
        async move { task.await.expect("the blocking step ran") }
    }

    fn start<T: Send + 'static>(
        future: impl Future<Output = T> + Send + 'static,
    ) -> Box<dyn Joinable<T>> {
        let handle = tokio::runtime::Handle::current();
        let task = handle.spawn(future);
        Box::new(TokioTask { task, handle })
    }
}

struct TokioTask<T> {
    task: tokio::task::JoinHandle<T>,
    handle: tokio::runtime::Handle,
}

impl<T: Send + 'static> Joinable<T> for TokioTask<T> {
    fn join(self: Box<Self>, by: Instant) -> Result<T, String> {
        let Self { mut task, handle } = *self;
        // The timer is made inside the runtime's context.
        let joined = handle.block_on(async { tokio::time::timeout_at(by.into(), &mut task).await });
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_elapsed) => {
                task.abort();
                Err("still running".to_owned())
            }
        }
    }
}

/// async-std's global executor (async-io underneath, as smol's).
#[derive(Clone, Copy, Debug, Default)]
pub struct AsyncStdExecutor;

impl Executor for AsyncStdExecutor {
    type Runtime = AsyncStd;
    const ADAPTER: &'static str = "redlock-async-std";

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        async_std::task::block_on(future)
    }

    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send {
        async_std::task::sleep(duration)
    }

    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        async_std::future::timeout(limit, future).await.ok()
    }

    fn spawn_blocking(work: Box<dyn FnOnce() + Send>) -> impl Future<Output = ()> + Send {
        // Spawned here, not when first polled.
        async_std::task::spawn_blocking(work)
    }

    fn start<T: Send + 'static>(
        future: impl Future<Output = T> + Send + 'static,
    ) -> Box<dyn Joinable<T>> {
        Box::new(AsyncStdTask(async_std::task::spawn(future)))
    }
}

struct AsyncStdTask<T>(async_std::task::JoinHandle<T>);

impl<T: Send + 'static> Joinable<T> for AsyncStdTask<T> {
    fn join(self: Box<Self>, by: Instant) -> Result<T, String> {
        let mut task = self.0;
        let left = by.saturating_duration_since(Instant::now());
        // A task that panicked makes its handle panic when awaited.
        let joined = catch_unwind(AssertUnwindSafe(|| {
            async_std::task::block_on(async_std::future::timeout(left, &mut task))
        }));
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_elapsed)) => {
                async_std::task::block_on(task.cancel());
                Err("still running".to_owned())
            }
            Err(_panic) => Err("panicked".to_owned()),
        }
    }
}

/// smol: `smol::block_on` and smol's global executor, driving `redlock-smol` (whose driver
/// runs on smol's global executor and async-io's timers).
#[derive(Clone, Copy, Debug, Default)]
pub struct SmolExecutor;

impl Executor for SmolExecutor {
    type Runtime = redlock_smol::Smol;
    const ADAPTER: &'static str = "redlock-smol";

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        smol::block_on(future)
    }

    async fn sleep(duration: Duration) {
        smol::Timer::after(duration).await;
    }

    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        smol::future::or(async { Some(future.await) }, async {
            smol::Timer::after(limit).await;
            None
        })
        .await
    }

    fn spawn_blocking(work: Box<dyn FnOnce() + Send>) -> impl Future<Output = ()> + Send {
        // Started here, not when first polled.
        smol::unblock(work)
    }

    fn start<T: Send + 'static>(
        future: impl Future<Output = T> + Send + 'static,
    ) -> Box<dyn Joinable<T>> {
        Box::new(SmolTask(smol::spawn(future)))
    }
}

struct SmolTask<T>(smol::Task<T>);

impl<T: Send + 'static> Joinable<T> for SmolTask<T> {
    fn join(self: Box<Self>, by: Instant) -> Result<T, String> {
        let mut task = self.0;
        let left = by.saturating_duration_since(Instant::now());
        // A task that panicked makes its handle panic when awaited.
        let joined = catch_unwind(AssertUnwindSafe(|| {
            smol::block_on(SmolExecutor::timeout(left, &mut task))
        }));
        match joined {
            Ok(Some(value)) => Ok(value),
            Ok(None) => {
                smol::block_on(task.cancel());
                Err("still running".to_owned())
            }
            Err(_panic) => Err("panicked".to_owned()),
        }
    }
}
