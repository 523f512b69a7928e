//! The async clients of the workload (`redlock-tokio`, `redlock-async-std`), written once,
//! generic over the [`Executor`]: each a task (tokio: on the run's shared multi-thread runtime;
//! async-std: on its global executor), with its own `Redlock` (its own connections, through its
//! own proxies) and its own connection to the counter server.
//!
//! The `redis` crate is built with both its tokio and its smol support here; it picks smol for a
//! connection made outside any tokio runtime's context, which is where everything of the
//! async-std clients runs.

use std::future::Future;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redlock_core::{Config, ReleaseReport};
use redlock_redis::{Error, LeaseWatch};

use super::adapter::{AdapterKind, Client, ClientLock, Finished, Lease, Running};
use super::config::ChaosConfig;
use super::section::{ScopedEnd, ScopedWork};
use crate::executor::{AsyncStdExecutor, Executor, Joinable, TokioExecutor};

/// Which [`AdapterKind`] an executor's clients are.
pub(crate) trait ChaosExecutor: Executor {
    const KIND: AdapterKind;
}

impl ChaosExecutor for TokioExecutor {
    const KIND: AdapterKind = AdapterKind::Tokio;
}

impl ChaosExecutor for AsyncStdExecutor {
    const KIND: AdapterKind = AdapterKind::AsyncStd;
}

/// One async client of the run.
pub(crate) struct AsyncClient<E: Executor> {
    redlock: redlock_redis::aio::Redlock<E::Runtime>,
    counter: MultiplexedConnection,
    executor: E,
}

impl<E: ChaosExecutor> AsyncClient<E> {
    /// A client for the nodes at `urls`, with the run's settings, on `executor`.
    pub(crate) fn connect(
        urls: &[String],
        counter: &redis::Client,
        config: &ChaosConfig,
        executor: E,
    ) -> Result<Self, Error> {
        let redlock = redlock_redis::aio::Redlock::builder(urls)
            .config(|c| config.configure(c))
            .io_timeout(config.io_timeout)
            .build()?;
        let counter = executor
            .block_on(counter.get_multiplexed_async_connection())
            .expect("connect to the counter server");
        Ok(Self {
            redlock,
            counter,
            executor,
        })
    }
}

impl<E: ChaosExecutor> Client for AsyncClient<E> {
    const KIND: AdapterKind = E::KIND;
    type Lock = redlock_redis::aio::Lock;
    type Counter = MultiplexedConnection;

    fn config(&self) -> &Config {
        self.redlock.config()
    }

    fn counter(&mut self) -> &mut MultiplexedConnection {
        &mut self.counter
    }

    async fn lock(&self, resource: &str, ttl: Duration) -> Result<Self::Lock, Error> {
        self.redlock.lock(resource, ttl).await
    }

    async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Self::Lock, Error> {
        self.redlock.try_lock(resource, ttl).await
    }

    async fn with_lock(
        &mut self,
        resource: &str,
        ttl: Duration,
        work: ScopedWork<'_>,
        end: &mut Option<ScopedEnd>,
    ) -> Result<(), Error> {
        let counter = &mut self.counter;
        self.redlock
            .with_lock(resource, ttl, |lease| async move {
                *end = Some(work.run(&AsyncLease::<E>::new(lease), counter).await);
            })
            .await
    }

    async fn sleep(duration: Duration) {
        E::sleep(duration).await;
    }

    async fn within<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        E::timeout(limit, future).await
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.executor.block_on(future)
    }

    fn start(sections: impl Future<Output = Self> + Send + 'static) -> Box<dyn Running> {
        Box::new(AsyncTask(E::start(sections)))
    }
}

impl ClientLock for redlock_redis::aio::Lock {
    fn token(&self) -> Vec<u8> {
        redlock_redis::LeaseWatch::token(self).as_bytes().to_vec()
    }

    fn valid_until(&self) -> Instant {
        redlock_redis::LeaseWatch::valid_until(self)
    }

    fn ttl(&self) -> Duration {
        (**self).ttl()
    }

    fn votes(&self) -> String {
        format!("{:?}", (**self).votes())
    }

    async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        redlock_redis::aio::Lock::extend(self, ttl).await
    }

    async fn release(self) -> ReleaseReport {
        redlock_redis::aio::Lock::release(self).await
    }
}

/// `with_lock`'s lease, waited on with the executor's timer.
struct AsyncLease<E> {
    watch: LeaseWatch,
    executor: std::marker::PhantomData<fn() -> E>,
}

impl<E> AsyncLease<E> {
    fn new(watch: LeaseWatch) -> Self {
        Self {
            watch,
            executor: std::marker::PhantomData,
        }
    }
}

impl<E: Executor> Lease for AsyncLease<E> {
    fn valid_until(&self) -> Instant {
        self.watch.valid_until()
    }

    fn is_lost(&self) -> bool {
        self.watch.is_lost()
    }

    async fn lost_within(&self, duration: Duration) -> bool {
        E::timeout(duration, self.watch.lost()).await.is_some()
    }
}

/// A client's task.
struct AsyncTask<E: Executor>(Box<dyn Joinable<AsyncClient<E>>>);

impl<E: ChaosExecutor> Running for AsyncTask<E> {
    fn join(self: Box<Self>, by: Instant) -> Result<Box<dyn Finished>, String> {
        let client = self.0.join(by)?;
        Ok(Box::new(client))
    }
}
