//! A held lock.

use std::time::{Duration, Instant};

use redlock_core::{Extend, ExtendOutcome, Lease, Release, Token};
use redlock_redis::{Error, ReleaseReport};

use tracing::Instrument;

use crate::client::Redlock;
use crate::driver::{Dispatch, drive};
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
    lease: Lease,
    /// The acquisition's dispatch, so that later requests queue behind its stragglers.
    /// `None` once released.
    dispatch: Option<Dispatch<R>>,
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
    pub(crate) fn new(client: Redlock<R>, lease: Lease, dispatch: Dispatch<R>) -> Self {
        Self {
            client,
            lease,
            dispatch: Some(dispatch),
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
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        match self.run_extend(ttl).await? {
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
    pub async fn release(mut self) -> ReleaseReport {
        let release = Release::new(Instant::now(), &self.client.inner.config, &self.lease);
        let dispatch = self.take_dispatch();
        self.client.run_release(dispatch, release).await
    }

    fn take_dispatch(&mut self) -> Dispatch<R> {
        match self.dispatch.take() {
            Some(dispatch) => dispatch,
            None => unreachable!("only release and drop take the dispatch, and each ends the lock"),
        }
    }
}

impl<R: Runtime> Drop for Lock<R> {
    fn drop(&mut self) {
        let Some(dispatch) = self.dispatch.take() else {
            return;
        };
        let release = Release::new(Instant::now(), &self.client.inner.config, &self.lease);
        let client = self.client.clone();
        tracing::debug!("lock dropped unreleased: releasing in the background");
        dispatch.runtime().clone().spawn(async move {
            client.run_release(dispatch, release).await;
        });
    }
}

impl<R: Runtime> Lock<R> {
    pub(crate) fn client(&self) -> &Redlock<R> {
        &self.client
    }

    /// Runs one extension and applies its outcome to the lease.
    pub(crate) async fn run_extend(
        &mut self,
        ttl: Duration,
    ) -> Result<ExtendOutcome, redlock_core::ConfigError> {
        let mut extend = Extend::new(Instant::now(), &self.client.inner.config, &self.lease, ttl)?;
        let Some(dispatch) = self.dispatch.as_mut() else {
            unreachable!("a lock that is not released has its dispatch");
        };
        let span = tracing::debug_span!("redlock.extend", ttl = ?ttl);
        let outcome = drive(dispatch, &mut extend).instrument(span).await;
        self.lease.apply(&outcome);
        Ok(outcome)
    }
}
