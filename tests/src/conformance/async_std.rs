//! The conformance suite's view of `redlock-async-std`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_async_std::{Lock, Redlock};
use redlock_core::LockRequest;
use redlock_core::ReleaseReport;
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options, Work};

/// `redlock-async-std`, each call run with `async_std::task::block_on`.
pub struct AsyncStd {
    client: Redlock,
}

/// A `redlock-async-std` lock.
#[derive(Debug)]
pub struct AsyncStdLock {
    lock: Lock,
}

impl Adapter for AsyncStd {
    type Lock = AsyncStdLock;
    const NAME: &'static str = "redlock-async-std";
    const CANCELLABLE: bool = true;

    fn build(urls: &[String], options: &Options) -> Result<Self, Error> {
        let client = Redlock::builder(urls)
            .config(|c| options.configure(c))
            .build()?;
        Ok(Self { client })
    }

    fn lock(&self, resource: &str, ttl: Duration) -> Result<AsyncStdLock, Error> {
        let lock = async_std::task::block_on(self.client.lock(resource, ttl))?;
        Ok(AsyncStdLock { lock })
    }

    fn try_lock(&self, resource: &str, ttl: Duration) -> Result<AsyncStdLock, Error> {
        let lock = async_std::task::block_on(self.client.try_lock(resource, ttl))?;
        Ok(AsyncStdLock { lock })
    }

    fn acquire(&self, request: LockRequest) -> Result<AsyncStdLock, Error> {
        let lock = async_std::task::block_on(self.client.acquire(request))?;
        Ok(AsyncStdLock { lock })
    }

    fn resume(&self, resource: &str, token: &[u8], ttl: Duration) -> Result<AsyncStdLock, Error> {
        let lock = async_std::task::block_on(self.client.resume(resource, token, ttl))?;
        Ok(AsyncStdLock { lock })
    }

    fn release_by_token(&self, resource: &str, token: &[u8]) -> Result<ReleaseReport, Error> {
        async_std::task::block_on(self.client.release_by_token(resource, token))
    }

    fn lock_abandoned_after(&self, resource: &str, ttl: Duration, after: Duration) -> bool {
        let attempt = async_std::future::timeout(after, self.client.lock(resource, ttl));
        match async_std::task::block_on(attempt) {
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
                        helper = Some(async_std::task::spawn_blocking(midway));
                    }
                }
                tokio::select! {
                    () = lease.lost() => break true,
                    () = async_std::task::sleep(Duration::from_millis(20)) => {}
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
        let result = async_std::task::block_on(scoped);
        let work = *seen.lock().expect("not poisoned");
        (result, work)
    }
}

impl HeldLock for AsyncStdLock {
    fn token(&self) -> Vec<u8> {
        self.lock.token().as_bytes().to_vec()
    }

    fn valid_until(&self) -> Instant {
        self.lock.valid_until()
    }

    fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        async_std::task::block_on(self.lock.extend(ttl))
    }

    fn release(self) -> ReleaseReport {
        async_std::task::block_on(self.lock.release())
    }
}
