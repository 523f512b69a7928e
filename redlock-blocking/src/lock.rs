//! A held lock.

use std::time::{Duration, Instant};

use redlock_core::{Lease, Lifecycle, ReleaseReport};
use redlock_redis::{Error, LeaseKeeper};

use crate::client::Redlock;
use crate::driver::{Dispatch, fire_and_forget, next_event};

/// A lock a quorum granted. Trust it until [`valid_until`](Lock::valid_until), not one instant
/// longer; [`extend`](Lock::extend) to keep it, [`release`](Lock::release) when done.
///
/// # Drop
/// Dropping a `Lock` that was not released hands its release to the node workers without
/// waiting for any answer (never blocking in `drop`); they run it after the lock's earlier
/// requests.
#[must_use = "a lock that is dropped at once is released at once"]
pub struct Lock {
    client: Redlock,
    /// The lease as the lifecycle last granted it.
    lease: Lease,
    lifecycle: Lifecycle,
    dispatch: Dispatch,
    released: bool,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("resources", self.lease.spec())
            .field("valid_until", &self.lease.valid_until())
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(
        client: Redlock,
        lease: Lease,
        lifecycle: Lifecycle,
        dispatch: Dispatch,
    ) -> Self {
        Self {
            client,
            lease,
            lifecycle,
            dispatch,
            released: false,
        }
    }

    redlock_redis::lock_accessors!();

    /// Extends the lock to `ttl` from now. On success the validity moves forward; on failure it
    /// is unchanged and nothing is deleted. An expired lock, or one that too few nodes still hold,
    /// fails with [`Error::Lost`].
    pub fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let _span = tracing::debug_span!("redlock.extend", ttl = ?ttl).entered();
        self.lifecycle.extend(Instant::now(), ttl)?;
        loop {
            let event = next_event(&self.dispatch, &mut self.lifecycle, None);
            if let Some(result) =
                redlock_redis::extended(&mut self.lease, self.client.nodes(), event)
            {
                return result;
            }
        }
    }

    /// Releases the lock on every node and reports what each did. Keys under another token are
    /// never touched; releasing an expired lock is a normal report.
    pub fn release(mut self) -> ReleaseReport {
        self.released = true;
        self.lifecycle.release(Instant::now());
        self.client.run_release(&self.dispatch, &mut self.lifecycle)
    }

    /// Runs the lock's auto-extension, telling the work through `keeper`, until the work is done
    /// (`None`) or the lock is lost (`Some`).
    pub(crate) fn keep(&mut self, keeper: &LeaseKeeper) -> Option<Error> {
        loop {
            let event = next_event(&self.dispatch, &mut self.lifecycle, Some(keeper))?;
            if let Some(lost) =
                redlock_redis::kept(&mut self.lease, self.client.nodes(), keeper, event)
            {
                return Some(lost);
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        tracing::debug!("lock dropped unreleased: releasing in the background");
        self.lifecycle.release(Instant::now());
        fire_and_forget(&self.dispatch, &mut self.lifecycle);
    }
}
