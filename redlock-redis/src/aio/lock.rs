//! A held lock: a handle on a lock the client's driver owns.

use std::future::Future;
use std::time::Duration;

use crate::{Error, LeaseWatch, LockHandle};
use redlock_core::ReleaseReport;

/// A lock a quorum granted. Trust it until [`valid_until`](LeaseWatch::valid_until), not one
/// instant longer (check [`is_valid`](LeaseWatch::is_valid) or
/// [`remaining`](LeaseWatch::remaining)); [`extend`](Lock::extend) to keep it,
/// [`release`](Lock::release) when done. Its getters are [`LeaseWatch`]'s.
///
/// A handle: the client's driver owns the lock, extends it if it was asked to, and keeps this
/// handle's view current. `Send + Sync`: share it behind an `Arc`. Every operation is a message
/// to the driver, so dropping its future never drops the operation.
///
/// # Drop
/// Dropping a `Lock` releases it: the driver sends the release (never blocking in `drop`), and
/// auto-extension stops. [`detach`](Lock::detach) leaves it on the nodes instead.
#[must_use = "a lock that is dropped at once is released at once"]
#[derive(Debug)]
pub struct Lock {
    handle: LockHandle,
}

impl std::ops::Deref for Lock {
    type Target = LeaseWatch;

    fn deref(&self) -> &LeaseWatch {
        self.handle.watch()
    }
}

impl Lock {
    pub(crate) fn new(handle: LockHandle) -> Self {
        Self { handle }
    }

    /// A watch on the lock for other tasks (cheap; see [`LeaseWatch::lost`]).
    pub fn watch(&self) -> LeaseWatch {
        self.handle.watch().clone()
    }

    /// Extends the lock to `ttl` from now. On success the validity moves forward; on failure it
    /// is unchanged and nothing is deleted. An expired lock, or one that too few nodes still
    /// hold, fails with [`Error::Lost`]. The extension is sent when this is called and runs to
    /// its end even if the future is dropped (the validity still moves); concurrent calls run
    /// one after another, each answered by its own extension.
    pub fn extend(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let answer = self.handle.extend(ttl);
        async move { answer.await.unwrap_or(Err(Error::Stopped)) }
    }

    /// Releases the lock on every node and reports what each did. Keys under another token are
    /// never touched; releasing an expired lock is a normal report. The release is sent when
    /// this is called: dropping the future does not stop it.
    pub fn release(self) -> impl Future<Output = ReleaseReport> + Send + 'static {
        self.handle.release()
    }

    /// Stops driving the lock and leaves it held on the nodes until its TTL (for a lock another
    /// process resumes or releases by its token): no extension, no release. The requests
    /// already sent still run; [`Redlock::flush`](super::Redlock::flush) waits for them.
    pub fn detach(self) {
        self.handle.detach();
    }
}
