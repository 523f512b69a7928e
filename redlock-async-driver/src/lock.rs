//! A held lock.

use std::time::{Duration, Instant};

use redlock_core::{Lease, Lifecycle, ReleaseReport};
use redlock_redis::{Error, LeaseKeeper, LockFailure};
use tracing::Instrument;

use crate::client::Redlock;
use crate::driver::{Dispatch, next_event};
use crate::runtime::Runtime;

/// A lock a quorum granted. Trust it until [`valid_until`](Lock::valid_until), not one instant
/// longer; [`extend`](Lock::extend) to keep it, [`release`](Lock::release) when done.
///
/// # Drop
/// Dropping a `Lock` that was not released releases it in the background on the runtime it was
/// acquired on (never blocking in `drop`). If that runtime is shutting down, the keys expire by
/// their TTL instead.
#[must_use = "a lock that is dropped at once is released at once"]
pub struct Lock<R: Runtime> {
    client: Redlock<R>,
    /// The lease as the lifecycle last granted it.
    lease: Lease,
    /// The lifecycle and the dispatch of its requests (so that later requests queue behind the
    /// acquisition's stragglers). `None` once released.
    run: Option<(Lifecycle, Dispatch<R>)>,
}

impl<R: Runtime> std::fmt::Debug for Lock<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("resources", self.lease.spec())
            .field("valid_until", &self.lease.valid_until())
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Lock<R> {
    pub(crate) fn new(
        client: Redlock<R>,
        lease: Lease,
        lifecycle: Lifecycle,
        dispatch: Dispatch<R>,
    ) -> Self {
        Self {
            client,
            lease,
            run: Some((lifecycle, dispatch)),
        }
    }

    redlock_redis::lock_accessors!();

    /// Extends the lock to `ttl` from now. On success the validity moves forward; on failure it
    /// is unchanged and nothing is deleted. An expired lock, or one that too few nodes still hold,
    /// fails with [`Error::Lost`].
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let Some((lifecycle, dispatch)) = &mut self.run else {
            return Err(Error::Lost(LockFailure::default()));
        };
        lifecycle.extend(Instant::now(), ttl)?;
        let labels = self.client.nodes();
        let lease = &mut self.lease;
        let span = tracing::debug_span!("redlock.extend", ttl = ?ttl);
        async {
            loop {
                let event = next_event(dispatch, lifecycle).await;
                if let Some(result) = redlock_redis::extended(lease, labels, event) {
                    return result;
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Releases the lock on every node and reports what each did. Keys under another token are
    /// never touched; releasing an expired lock is a normal report.
    pub async fn release(mut self) -> ReleaseReport {
        let Some((mut lifecycle, dispatch)) = self.run.take() else {
            return ReleaseReport { nodes: Vec::new() };
        };
        lifecycle.release(Instant::now());
        self.client.run_release(dispatch, lifecycle).await
    }

    /// Runs the lock's auto-extension, telling the work through `keeper`; returns only when the
    /// lock is lost.
    pub(crate) async fn keep(&mut self, keeper: &LeaseKeeper) -> Error {
        let labels = self.client.nodes();
        let Some((lifecycle, dispatch)) = &mut self.run else {
            keeper.lost();
            return Error::Lost(LockFailure::default());
        };
        loop {
            match next_event(dispatch, lifecycle).await {
                Some(event) => {
                    if let Some(lost) = redlock_redis::kept(&mut self.lease, labels, keeper, event)
                    {
                        return lost;
                    }
                }
                // An auto-extended lock always has a renewal to wait for until it is lost.
                None => std::future::pending::<()>().await,
            }
        }
    }
}

impl<R: Runtime> Drop for Lock<R> {
    fn drop(&mut self) {
        let Some((mut lifecycle, dispatch)) = self.run.take() else {
            return;
        };
        lifecycle.release(Instant::now());
        let client = self.client.clone();
        tracing::debug!("lock dropped unreleased: releasing in the background");
        dispatch.runtime().clone().spawn(async move {
            client.run_release(dispatch, lifecycle).await;
        });
    }
}
