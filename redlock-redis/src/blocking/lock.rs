//! A held lock: a handle on a lock the client's driver owns.

use std::time::Duration;

use crate::{Error, LockHandle};
use redlock_core::ReleaseReport;

use super::watch::LeaseWatch;

/// A lock a quorum granted. Trust it until [`valid_until`](crate::LeaseWatch::valid_until), not one
/// instant longer (check [`is_valid`](crate::LeaseWatch::is_valid) or
/// [`remaining`](crate::LeaseWatch::remaining)); [`extend`](Lock::extend) to keep it,
/// [`release`](Lock::release) when done. Its getters are [`LeaseWatch`]'s.
///
/// A handle: the client's driver owns the lock (its state, driven by the driver thread, or by
/// a caller handing a call in), extends it if it was asked to, and keeps this handle's view
/// current. `Send + Sync`: share it between threads behind an `Arc`.
///
/// # Drop
/// Dropping a `Lock` releases it: the driver sends the release (never blocking in `drop`), and
/// auto-extension stops. [`detach`](Lock::detach) leaves it on the nodes instead.
#[must_use = "a lock that is dropped at once is released at once"]
pub struct Lock {
    handle: LockHandle,
    /// The handle's watch, as the blocking client shows it.
    watch: LeaseWatch,
}

impl std::fmt::Debug for Lock {
    /// The handle's: the same as an async lock's (no token, no password).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle.fmt(f)
    }
}

impl std::ops::Deref for Lock {
    type Target = LeaseWatch;

    fn deref(&self) -> &LeaseWatch {
        &self.watch
    }
}

impl Lock {
    pub(crate) fn new(handle: LockHandle) -> Self {
        let watch = LeaseWatch::new(handle.watch().clone());
        Self { handle, watch }
    }

    /// A watch on the lock for other threads (cheap; see [`LeaseWatch::wait_lost`]).
    pub fn watch(&self) -> LeaseWatch {
        self.watch.clone()
    }

    /// Extends the lock to `ttl` from now, blocking until the outcome. On success the validity
    /// moves forward; on failure it is unchanged and nothing is deleted. An expired lock, or one
    /// that too few nodes still hold, fails with [`Error::Lost`]. Concurrent calls run one after
    /// another, each answered by its own extension.
    pub fn extend(&self, ttl: Duration) -> Result<(), Error> {
        let _span = tracing::debug_span!("redlock.extend", ttl = ?ttl).entered();
        self.handle
            .extend(ttl)
            .wait()
            .unwrap_or(Err(Error::Stopped))
    }

    /// Releases the lock on every node and reports what each did. Keys under another token are
    /// never touched; releasing an expired lock is a normal report.
    pub fn release(self) -> ReleaseReport {
        self.handle.release().wait()
    }

    /// Stops driving the lock and leaves it held on the nodes until its TTL (for a lock another
    /// process resumes or releases by its token): no extension, no release. The requests
    /// already sent still run; [`Redlock::flush`](super::Redlock::flush) waits for them.
    pub fn detach(self) {
        self.handle.detach();
    }
}
