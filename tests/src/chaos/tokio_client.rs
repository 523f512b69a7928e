//! The `redlock-tokio` client of the workload: a task on the run's shared multi-thread runtime,
//! with its own `Redlock` (its own connections, through its own proxies) and its own connection
//! to the counter server.

use std::future::Future;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redlock_core::Config;
use redlock_core::ReleaseReport;
use redlock_redis::Error;
use redlock_tokio::{LeaseWatch, Lock, Redlock};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::adapter::{AdapterKind, Client, Finished, HeldLock, Lease, Running};
use super::config::ChaosConfig;
use super::section::{ScopedEnd, ScopedWork};

/// One `redlock-tokio` client of the run.
pub(crate) struct TokioClient {
    redlock: Redlock,
    counter: MultiplexedConnection,
    runtime: Handle,
}

impl TokioClient {
    /// A client for the nodes at `urls`, with the run's settings, on `runtime`.
    pub(crate) fn connect(
        urls: &[String],
        counter: &redis::Client,
        config: &ChaosConfig,
        runtime: Handle,
    ) -> Result<Self, Error> {
        let redlock = Redlock::builder(urls)
            .config(|c| c.key_prefix(config.key_prefix.clone()).retry(config.retry))
            .io_timeout(config.io_timeout)
            .build()?;
        let counter = runtime
            .block_on(counter.get_multiplexed_async_connection())
            .expect("connect to the counter server");
        Ok(Self {
            redlock,
            counter,
            runtime,
        })
    }
}

impl Client for TokioClient {
    const KIND: AdapterKind = AdapterKind::Tokio;
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
                *end = Some(work.run(&TokioLease(lease), counter).await);
            })
            .await
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }

    async fn within<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        tokio::time::timeout(limit, future).await.ok()
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Spawns the sections on the runtime whose context the caller has entered.
    fn start(sections: impl Future<Output = Self> + Send + 'static) -> Box<dyn Running> {
        let runtime = Handle::current();
        let task = runtime.spawn(sections);
        Box::new(TokioTask { task, runtime })
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

/// `with_lock`'s lease, waited on with tokio's timer.
struct TokioLease(LeaseWatch);

impl Lease for TokioLease {
    fn valid_until(&self) -> Instant {
        self.0.valid_until()
    }

    fn is_lost(&self) -> bool {
        self.0.is_lost()
    }

    async fn lost_within(&self, duration: Duration) -> bool {
        tokio::select! {
            () = self.0.lost() => true,
            () = tokio::time::sleep(duration) => false,
        }
    }
}

/// A client's task.
struct TokioTask {
    task: JoinHandle<TokioClient>,
    runtime: Handle,
}

impl Running for TokioTask {
    fn join(self: Box<Self>, by: Instant) -> Result<Box<dyn Finished>, String> {
        let Self { mut task, runtime } = *self;
        // The timer is made inside the runtime's context.
        let joined =
            runtime.block_on(async { tokio::time::timeout_at(by.into(), &mut task).await });
        match joined {
            Ok(Ok(client)) => Ok(Box::new(client)),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_elapsed) => {
                task.abort();
                Err("still running".to_owned())
            }
        }
    }
}
