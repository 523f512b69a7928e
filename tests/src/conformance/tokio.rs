//! The conformance suite's view of `redlock-tokio`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_core::LockRequest;
use redlock_core::ReleaseReport;
use redlock_redis::Error;
use redlock_tokio::{Lock, Redlock};
use tokio::runtime::Runtime;

use super::adapter::{Adapter, HeldLock, Options, Work};

/// `redlock-tokio` on a two-worker runtime of its own.
pub struct Tokio {
    client: Redlock,
    runtime: Arc<Runtime>,
}

/// A `redlock-tokio` lock and the runtime it lives on.
#[derive(Debug)]
pub struct TokioLock {
    // Dropped before the runtime, so a background release can still be spawned.
    lock: Lock,
    runtime: Arc<Runtime>,
}

impl Adapter for Tokio {
    type Lock = TokioLock;
    const NAME: &'static str = "redlock-tokio";
    const CANCELLABLE: bool = true;

    fn build(urls: &[String], options: &Options) -> Result<Self, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let client = Redlock::builder(urls)
            .config(|c| options.configure(c))
            .build()?;
        Ok(Self {
            client,
            runtime: Arc::new(runtime),
        })
    }

    fn lock(&self, resource: &str, ttl: Duration) -> Result<TokioLock, Error> {
        let lock = self.runtime.block_on(self.client.lock(resource, ttl))?;
        Ok(self.wrap(lock))
    }

    fn try_lock(&self, resource: &str, ttl: Duration) -> Result<TokioLock, Error> {
        let lock = self.runtime.block_on(self.client.try_lock(resource, ttl))?;
        Ok(self.wrap(lock))
    }

    fn acquire(&self, request: LockRequest) -> Result<TokioLock, Error> {
        let lock = self.runtime.block_on(self.client.acquire(request))?;
        Ok(self.wrap(lock))
    }

    fn resume(&self, resource: &str, token: &[u8], ttl: Duration) -> Result<TokioLock, Error> {
        let lock = self
            .runtime
            .block_on(self.client.resume(resource, token, ttl))?;
        Ok(self.wrap(lock))
    }

    fn release_by_token(&self, resource: &str, token: &[u8]) -> Result<ReleaseReport, Error> {
        self.runtime
            .block_on(self.client.release_by_token(resource, token))
    }

    fn lock_abandoned_after(&self, resource: &str, ttl: Duration, after: Duration) -> bool {
        let attempt = async { tokio::time::timeout(after, self.client.lock(resource, ttl)).await };
        match self.runtime.block_on(attempt) {
            Ok(result) => {
                drop(result);
                true
            }
            Err(_elapsed) => false,
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
                if start.elapsed() >= midway_at {
                    if let Some(midway) = midway.take() {
                        helper = Some(tokio::task::spawn_blocking(midway));
                    }
                }
                tokio::select! {
                    () = lease.lost() => break true,
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            };
            if let Some(helper) = helper {
                helper.await.expect("the midway step ran");
            }
            *record.lock().expect("not poisoned") = Work {
                observed_loss,
                ran_for: start.elapsed(),
            };
        });
        let result = self.runtime.block_on(scoped);
        let work = *seen.lock().expect("not poisoned");
        (result, work)
    }
}

impl Tokio {
    fn wrap(&self, lock: Lock) -> TokioLock {
        TokioLock {
            lock,
            runtime: self.runtime.clone(),
        }
    }
}

impl HeldLock for TokioLock {
    fn token(&self) -> Vec<u8> {
        self.lock.token().as_bytes().to_vec()
    }

    fn valid_until(&self) -> Instant {
        self.lock.valid_until()
    }

    fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.runtime.block_on(self.lock.extend(ttl))
    }

    fn release(self) -> ReleaseReport {
        let Self { lock, runtime } = self;
        runtime.block_on(lock.release())
    }
}
