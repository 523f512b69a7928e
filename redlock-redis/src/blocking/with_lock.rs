//! `with_lock`: run work under a lock that the driver keeps extended, and learn when it is lost.

use std::time::Duration;

use crate::Error;
use redlock_core::LockRequest;

use super::client::Redlock;
use super::watch::LeaseWatch;

impl Redlock {
    /// Locks `resource`, runs `work` on this thread while the driver keeps the lock extended,
    /// then releases it.
    ///
    /// The lock is extended when half of its remaining validity has passed (the engine's
    /// auto-extension). If it cannot be kept, the work is told through [`LeaseWatch`] — before
    /// validity ends — and `with_lock` returns [`Error::Lost`] once the work returns (its result
    /// is dropped). Work that ignores the signal keeps `with_lock` waiting, so watch it. If the
    /// work panics, the lock is released on the way out.
    pub fn with_lock<T>(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
        work: impl FnOnce(LeaseWatch) -> T,
    ) -> Result<T, Error> {
        self.with_lock_request(LockRequest::new(resource, ttl), work)
    }

    /// [`with_lock`](Redlock::with_lock) for a lock `request` of your own (several resources,
    /// a retry policy, a fence, ...); it is auto-extended all the same.
    pub fn with_lock_request<T>(
        &self,
        request: LockRequest,
        work: impl FnOnce(LeaseWatch) -> T,
    ) -> Result<T, Error> {
        let lock = self.acquire(request.auto_extend())?;
        let value = work(lock.watch());
        let loss = lock.loss();
        lock.release();
        loss.map_or(Ok(value), Err)
    }
}
