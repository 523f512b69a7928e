//! A held lock.

use std::time::{Duration, Instant};

use redlock_core::{ConfigError, Extend, ExtendOutcome, Lease, Release, Token};
use redlock_redis::{Error, ReleaseReport};

use crate::client::Redlock;
use crate::driver::{Dispatch, drive, fire_and_forget};

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
    lease: Lease,
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
    pub(crate) fn new(client: Redlock, lease: Lease, dispatch: Dispatch) -> Self {
        Self {
            client,
            lease,
            dispatch,
            released: false,
        }
    }

    /// The token stored under the keys.
    pub fn token(&self) -> &Token {
        self.lease.token()
    }

    /// The locked resources, without the key prefix.
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.lease.spec().resources()
    }

    /// The end of validity (monotonic clock).
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Validity left now (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.lease.remaining(Instant::now())
    }

    /// The engine's view of the lock (votes, attempts, TTL).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Extends the lock to `ttl` from now. On success the validity moves forward; on failure it
    /// is unchanged and nothing is deleted. An expired lock, or one that too few nodes still hold,
    /// fails with [`Error::Lost`].
    pub fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        match self.run_extend(ttl)? {
            ExtendOutcome::NotExtended { reason, votes } => {
                tracing::debug!(?reason, "not extended");
                Err(Error::extend_failed(
                    &self.client.inner.labels,
                    reason,
                    &votes,
                ))
            }
            _ => Ok(()),
        }
    }

    /// Releases the lock on every node and reports what each did. Keys under another token are
    /// never touched; releasing an expired lock is a normal report.
    pub fn release(mut self) -> ReleaseReport {
        self.released = true;
        let release = Release::new(Instant::now(), &self.client.inner.config, &self.lease);
        let client = self.client.clone();
        client.run_release(&mut self.dispatch, release)
    }

    /// Runs one extension and applies its outcome to the lease.
    pub(crate) fn run_extend(&mut self, ttl: Duration) -> Result<ExtendOutcome, ConfigError> {
        let _span = tracing::debug_span!("redlock.extend", ttl = ?ttl).entered();
        let mut extend = Extend::new(Instant::now(), &self.client.inner.config, &self.lease, ttl)?;
        let outcome = drive(&mut self.dispatch, &mut extend);
        self.lease.apply(&outcome);
        Ok(outcome)
    }

    pub(crate) fn client(&self) -> &Redlock {
        &self.client
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        tracing::debug!("lock dropped unreleased: releasing in the background");
        let mut release = Release::new(Instant::now(), &self.client.inner.config, &self.lease);
        fire_and_forget(&mut self.dispatch, &mut release);
    }
}
