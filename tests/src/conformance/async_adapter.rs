//! The conformance suite's view of the async adapters (`redlock-tokio`, `redlock-async-std`),
//! written once, generic over the [`Executor`] each call is run on.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_core::{LockRequest, ReleaseReport};
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options, Work, transport};
use crate::executor::{AsyncStdExecutor, Executor, SmolExecutor, TokioExecutor};

/// An async adapter, each call run to its end with the executor's `block_on`.
pub struct AsyncAdapter<E: Executor> {
    client: redlock_redis::aio::Redlock<E::Runtime>,
    executor: E,
}

/// An async adapter's lock and the executor it lives on.
pub struct AsyncLock<E: Executor> {
    // Dropped before the executor, so a background release can still be spawned.
    lock: redlock_redis::aio::Lock,
    executor: E,
}

/// `redlock-tokio` on a two-worker runtime of its own.
pub type Tokio = AsyncAdapter<TokioExecutor>;
/// A `redlock-tokio` lock.
pub type TokioLock = AsyncLock<TokioExecutor>;
/// `redlock-async-std` on async-std's global executor.
pub type AsyncStd = AsyncAdapter<AsyncStdExecutor>;
/// A `redlock-async-std` lock.
pub type AsyncStdLock = AsyncLock<AsyncStdExecutor>;

/// `redlock-smol`, driven by `smol::block_on` and smol's executor.
pub type Smol = AsyncAdapter<SmolExecutor>;
/// A `redlock-smol` lock.
pub type SmolLock = AsyncLock<SmolExecutor>;

/// How each executor is made for a test.
pub trait TestExecutor: Executor + std::fmt::Debug {
    /// A fresh executor for one client.
    fn for_test() -> Self;
}

impl TestExecutor for TokioExecutor {
    fn for_test() -> Self {
        TokioExecutor::owned()
    }
}

impl TestExecutor for AsyncStdExecutor {
    fn for_test() -> Self {
        AsyncStdExecutor
    }
}

impl TestExecutor for SmolExecutor {
    fn for_test() -> Self {
        SmolExecutor
    }
}

impl<E: Executor> std::fmt::Debug for AsyncLock<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.lock.fmt(f)
    }
}

impl<E: TestExecutor> AsyncAdapter<E> {
    fn wrap(&self, lock: redlock_redis::aio::Lock) -> AsyncLock<E> {
        AsyncLock {
            lock,
            executor: self.executor.clone(),
        }
    }
}

impl<E: TestExecutor> Adapter for AsyncAdapter<E> {
    type Lock = AsyncLock<E>;
    const NAME: &'static str = E::ADAPTER;
    const CANCELLABLE: bool = true;

    fn build(urls: &[String], options: &Options) -> Result<Self, Error> {
        let builder = redlock_redis::aio::Redlock::builder(urls).config(|c| options.configure(c));
        let client = transport(builder, options).build()?;
        Ok(Self {
            client,
            executor: E::for_test(),
        })
    }

    fn lock(&self, resource: &str, ttl: Duration) -> Result<AsyncLock<E>, Error> {
        let lock = self.executor.block_on(self.client.lock(resource, ttl))?;
        Ok(self.wrap(lock))
    }

    fn try_lock(&self, resource: &str, ttl: Duration) -> Result<AsyncLock<E>, Error> {
        let lock = self
            .executor
            .block_on(self.client.try_lock(resource, ttl))?;
        Ok(self.wrap(lock))
    }

    fn trust_nodes(&self) -> Result<usize, Error> {
        self.executor
            .block_on(self.client.trust_nodes())
            .map(|votes| super::adapter::granted(&votes))
    }

    fn flush(&self, timeout: Duration) -> bool {
        self.executor.block_on(self.client.flush(timeout))
    }

    fn acquire(&self, request: LockRequest) -> Result<AsyncLock<E>, Error> {
        let lock = self.executor.block_on(self.client.acquire(request))?;
        Ok(self.wrap(lock))
    }

    fn resume(&self, resource: &str, token: &[u8], ttl: Duration) -> Result<AsyncLock<E>, Error> {
        let lock = self
            .executor
            .block_on(self.client.resume(resource, token, ttl))?;
        Ok(self.wrap(lock))
    }

    fn release_by_token(&self, resource: &str, token: &[u8]) -> Result<ReleaseReport, Error> {
        self.executor
            .block_on(self.client.release_by_token(resource, token))
    }

    fn lock_abandoned_after(&self, resource: &str, ttl: Duration, after: Duration) -> bool {
        let attempt = E::timeout(after, self.client.lock(resource, ttl));
        match self.executor.block_on(attempt) {
            Some(result) => {
                drop(result);
                true
            }
            None => false,
        }
    }

    fn with_lock_work(
        &self,
        resource: &str,
        ttl: Duration,
        hold: Duration,
        midway_at: Duration,
        midway: Box<dyn FnOnce() + Send>,
    ) -> (Result<(), Error>, Work) {
        let seen = Arc::new(Mutex::new(Work::default()));
        let record = seen.clone();
        let scoped = self.client.with_lock(resource, ttl, |lease| async move {
            let start = Instant::now();
            let mut midway = Some(midway);
            let mut helper = None;
            let observed_loss = loop {
                if start.elapsed() >= hold {
                    break false;
                }
                if start.elapsed() >= midway_at
                    && let Some(midway) = midway.take()
                {
                    helper = Some(E::spawn_blocking(midway));
                }
                if E::timeout(Duration::from_millis(20), lease.lost())
                    .await
                    .is_some()
                {
                    break true;
                }
            };
            if let Some(helper) = helper {
                helper.await;
            }
            *record.lock().expect("not poisoned") = Work {
                observed_loss,
                ran_for: start.elapsed(),
            };
        });
        let result = self.executor.block_on(scoped);
        let work = *seen.lock().expect("not poisoned");
        (result, work)
    }
}

impl<E: TestExecutor> HeldLock for AsyncLock<E> {
    fn token(&self) -> Vec<u8> {
        self.lock.token().as_bytes().to_vec()
    }

    fn valid_until(&self) -> Instant {
        self.lock.valid_until()
    }

    fn fence(&self) -> Option<u64> {
        self.lock.fence()
    }

    fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.executor.block_on(self.lock.extend(ttl))
    }

    fn release(self) -> ReleaseReport {
        let Self { lock, executor } = self;
        executor.block_on(lock.release())
    }

    fn extend_shared(&self, ttl: Duration) -> Result<(), Error> {
        self.executor.block_on(self.lock.extend(ttl))
    }

    fn release_unawaited(self) {
        drop(self.lock.release());
    }

    fn extend_unawaited(&self, ttl: Duration) {
        drop(self.lock.extend(ttl));
    }

    fn is_valid(&self) -> bool {
        self.lock.is_valid()
    }

    fn wait_lost(&self, timeout: Duration) -> bool {
        let lost = E::timeout(timeout, self.lock.lost());
        self.executor.block_on(lost).is_some()
    }
}
