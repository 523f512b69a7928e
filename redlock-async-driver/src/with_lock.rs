//! `with_lock`: run work under a lock that the engine keeps extended, and learn when it is lost.

use std::future::Future;
use std::time::Duration;

use redlock_core::LockRequest;
use redlock_redis::{Error, LeaseWatch, lease_watch};

use crate::client::Redlock;
use crate::runtime::Runtime;

impl<R: Runtime> Redlock<R> {
    /// Locks `resource`, runs `work` while keeping the lock extended, then releases it.
    ///
    /// The lock is extended when half of its remaining validity has passed (the engine's
    /// auto-extension). If it cannot be kept (too few nodes hold it, or no extension can finish
    /// before validity ends), the work is told through [`LeaseWatch::lost`] — before validity
    /// ends — and `with_lock` returns [`Error::Lost`] once the work returns (its result is
    /// dropped). Work that ignores the signal keeps `with_lock` waiting, so watch it.
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
        let mut lock = self.acquire(request.auto_extend()).await?;
        let (keeper, watch) = lease_watch(lock.lease());
        let work = work(watch);
        tokio::pin!(work);
        let kept = {
            let keep = lock.keep(&keeper);
            tokio::pin!(keep);
            tokio::select! {
                value = &mut work => Ok(value),
                lost = &mut keep => Err(lost),
            }
        };
        keeper.work_done();
        match kept {
            Ok(value) => {
                lock.release().await;
                Ok(value)
            }
            Err(lost) => {
                let _ = work.await;
                lock.release().await;
                Err(lost)
            }
        }
    }
}
