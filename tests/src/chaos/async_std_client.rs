//! The `redlock-async-std` client of the workload: a task on async-std's global executor, with
//! its own `Redlock` (its own connections, through its own proxies) and its own connection to
//! the counter server.
//!
//! The `redis` crate is built with both its tokio and its smol support here (the tokio clients
//! need one, these the other); it picks smol for a connection made outside any tokio runtime's
//! context, which is where everything of these clients runs.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use async_std::task::JoinHandle;
use redis::aio::MultiplexedConnection;
use redlock_async_std::{LeaseWatch, Lock, Redlock};
use redlock_core::Config;
use redlock_core::ReleaseReport;
use redlock_redis::Error;

use super::adapter::{AdapterKind, Client, Finished, HeldLock, Lease, Running};
use super::config::ChaosConfig;
use super::section::{ScopedEnd, ScopedWork};

/// One `redlock-async-std` client of the run.
pub(crate) struct AsyncStdClient {
    redlock: Redlock,
    counter: MultiplexedConnection,
}

impl AsyncStdClient {
    /// A client for the nodes at `urls`, with the run's settings.
    ///
    /// # Panics
    /// If called inside a tokio runtime's context (the counter connection would be tokio's).
    pub(crate) fn connect(
        urls: &[String],
        counter: &redis::Client,
        config: &ChaosConfig,
    ) -> Result<Self, Error> {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "async-std clients are made outside tokio's context"
        );
        let redlock = Redlock::builder(urls)
            .config(|c| c.key_prefix(config.key_prefix.clone()).retry(config.retry))
            .io_timeout(config.io_timeout)
            .build()?;
        let counter = async_std::task::block_on(counter.get_multiplexed_async_connection())
            .expect("connect to the counter server");
        Ok(Self { redlock, counter })
    }
}

impl Client for AsyncStdClient {
    const KIND: AdapterKind = AdapterKind::AsyncStd;
    type Lock = Lock;
    type Counter = MultiplexedConnection;

    fn config(&self) -> &Config {
        self.redlock.config()
    }

    fn counter(&mut self) -> &mut MultiplexedConnection {
        &mut self.counter
    }

    async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.redlock.lock(resource, ttl).await
    }

    async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
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
                *end = Some(work.run(&AsyncStdLease(lease), counter).await);
            })
            .await
    }

    async fn sleep(duration: Duration) {
        async_std::task::sleep(duration).await;
    }

    async fn within<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        async_std::future::timeout(limit, future).await.ok()
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        async_std::task::block_on(future)
    }

    fn start(sections: impl Future<Output = Self> + Send + 'static) -> Box<dyn Running> {
        Box::new(AsyncStdTask(async_std::task::spawn(sections)))
    }
}

impl HeldLock for Lock {
    fn token(&self) -> Vec<u8> {
        Lock::token(self).as_bytes().to_vec()
    }

    fn valid_until(&self) -> Instant {
        Lock::valid_until(self)
    }

    fn ttl(&self) -> Duration {
        self.lease().ttl()
    }

    fn votes(&self) -> String {
        format!("{:?}", self.lease().votes())
    }

    async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        Lock::extend(self, ttl).await
    }

    async fn release(self) -> ReleaseReport {
        Lock::release(self).await
    }
}

/// `with_lock`'s lease, waited on with async-std's timer.
struct AsyncStdLease(LeaseWatch);

impl Lease for AsyncStdLease {
    fn valid_until(&self) -> Instant {
        self.0.valid_until()
    }

    fn is_lost(&self) -> bool {
        self.0.is_lost()
    }

    async fn lost_within(&self, duration: Duration) -> bool {
        async_std::future::timeout(duration, self.0.lost())
            .await
            .is_ok()
    }
}

/// A client's task.
struct AsyncStdTask(JoinHandle<AsyncStdClient>);

impl Running for AsyncStdTask {
    fn join(self: Box<Self>, by: Instant) -> Result<Box<dyn Finished>, String> {
        let mut task = self.0;
        let left = by.saturating_duration_since(Instant::now());
        // A task that panicked makes its handle panic when awaited (its own panic message was
        // printed when it happened).
        let joined = catch_unwind(AssertUnwindSafe(|| {
            async_std::task::block_on(async_std::future::timeout(left, &mut task))
        }));
        match joined {
            Ok(Ok(client)) => Ok(Box::new(client)),
            Ok(Err(_elapsed)) => {
                async_std::task::block_on(task.cancel());
                Err("still running".to_owned())
            }
            Err(_panic) => Err("panicked".to_owned()),
        }
    }
}
