//! The conformance suite's view of `redlock-blocking`.

use std::thread;
use std::time::{Duration, Instant};

use redlock_blocking::{Lock, Redlock};
use redlock_core::LockRequest;
use redlock_core::ReleaseReport;
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options, Work, transport};

/// `redlock-blocking`, called straight from the test's threads.
pub struct Blocking {
    client: Redlock,
}

/// A `redlock-blocking` lock.
#[derive(Debug)]
pub struct BlockingLock {
    lock: Lock,
}

impl Adapter for Blocking {
    type Lock = BlockingLock;
    const NAME: &'static str = "redlock-blocking";
    const CANCELLABLE: bool = false;

    fn build(urls: &[String], options: &Options) -> Result<Self, Error> {
        let builder = Redlock::builder(urls).config(|c| options.configure(c));
        let client = transport(builder, options).build()?;
        Ok(Self { client })
    }

    fn lock(&self, resource: &str, ttl: Duration) -> Result<BlockingLock, Error> {
        self.client
            .lock(resource, ttl)
            .map(|lock| BlockingLock { lock })
    }

    fn try_lock(&self, resource: &str, ttl: Duration) -> Result<BlockingLock, Error> {
        self.client
            .try_lock(resource, ttl)
            .map(|lock| BlockingLock { lock })
    }

    fn trust_nodes(&self) -> Result<usize, Error> {
        self.client
            .trust_nodes()
            .map(|votes| super::adapter::granted(&votes))
    }

    fn flush(&self, timeout: Duration) -> bool {
        self.client.flush(timeout)
    }

    fn acquire(&self, request: LockRequest) -> Result<BlockingLock, Error> {
        self.client
            .acquire(request)
            .map(|lock| BlockingLock { lock })
    }

    /// A blocking call cannot be abandoned half-way: it runs to its end (the lock, if any, is
    /// dropped unreleased).
    fn resume(&self, resource: &str, token: &[u8], ttl: Duration) -> Result<BlockingLock, Error> {
        self.client
            .resume(resource, token, ttl)
            .map(|lock| BlockingLock { lock })
    }

    fn release_by_token(&self, resource: &str, token: &[u8]) -> Result<ReleaseReport, Error> {
        self.client.release_by_token(resource, token)
    }

    fn lock_abandoned_after(&self, resource: &str, ttl: Duration, _after: Duration) -> bool {
        drop(self.client.lock(resource, ttl));
        true
    }

    fn with_lock_work(
        &self,
        resource: &str,
        ttl: Duration,
        hold: Duration,
        midway_at: Duration,
        midway: Box<dyn FnOnce() + Send>,
    ) -> (Result<(), Error>, Work) {
        let mut work = Work::default();
        let result = self.client.with_lock(resource, ttl, |lease| {
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
                    helper = Some(thread::spawn(midway));
                }
                if lease.wait_lost(Duration::from_millis(20)) {
                    break true;
                }
            };
            if let Some(helper) = helper {
                helper.join().expect("the midway step ran");
            }
            work = Work {
                observed_loss,
                ran_for: start.elapsed(),
            };
        });
        (result, work)
    }
}

impl HeldLock for BlockingLock {
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
        self.lock.extend(ttl)
    }

    fn release(self) -> ReleaseReport {
        self.lock.release()
    }

    fn extend_shared(&self, ttl: Duration) -> Result<(), Error> {
        self.lock.extend(ttl)
    }

    fn release_unawaited(self) {
        drop(self.lock);
    }

    fn extend_unawaited(&self, ttl: Duration) {
        let _ = self.lock.extend(ttl);
    }

    fn is_valid(&self) -> bool {
        self.lock.is_valid()
    }

    fn wait_lost(&self, timeout: Duration) -> bool {
        self.lock.wait_lost(timeout)
    }
}
