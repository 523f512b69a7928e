//! `with_lock`: run work under a lock that the driver keeps extended, and learn when it is lost.

use std::future::Future;
use std::time::Duration;

use crate::{Error, LeaseWatch};
use redlock_core::LockRequest;

use super::client::Redlock;
use super::runtime::Runtime;

impl<R: Runtime> Redlock<R> {
    /// Locks `resource`, runs `work` while the driver keeps the lock extended, then releases it.
    ///
    /// The lock is extended when half of its remaining validity has passed (the engine's
    /// auto-extension). If it cannot be kept (too few nodes hold it, or no extension can finish
    /// before validity ends), the work is told through [`LeaseWatch::lost`] — before validity
    /// ends — and `with_lock` returns [`Error::Lost`] once the work returns (its result is
    /// dropped). Work that ignores the signal keeps `with_lock` waiting, so watch it. If the
    /// work panics or the future is dropped, the lock is released all the same.
    pub async fn with_lock<T, F, Fut>(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseWatch) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_lock_request(LockRequest::new(resource, ttl), work)
            .await
    }

    /// [`with_lock`](Redlock::with_lock) for a lock `request` of your own (several resources,
    /// a retry policy, a fence, ...); it is auto-extended all the same.
    pub async fn with_lock_request<T, F, Fut>(
        &self,
        request: LockRequest,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseWatch) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.acquire(request.auto_extend()).await?;
        let value = work(lock.watch()).await;
        let loss = lock.loss();
        lock.release().await;
        loss.map_or(Ok(value), Err)
    }
}
