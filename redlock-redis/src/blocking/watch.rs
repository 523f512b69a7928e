//! The blocking view of a lock: the shared [`LeaseWatch`](crate::LeaseWatch), and a wait for its
//! loss that blocks the calling thread.

use std::time::Duration;

/// What anyone holding a lock can know about it (every getter of the shared
/// [`LeaseWatch`](crate::LeaseWatch), through `Deref`), and [`wait_lost`](LeaseWatch::wait_lost),
/// which blocks the calling thread. Cheap to clone, `Send + Sync`. Only the blocking client
/// hands it out: no async lock offers a call that blocks.
#[derive(Debug, Clone)]
pub struct LeaseWatch(crate::LeaseWatch);

impl LeaseWatch {
    pub(crate) fn new(watch: crate::LeaseWatch) -> Self {
        Self(watch)
    }

    /// Blocks the calling thread until the lock is lost (or released) or `timeout` passes;
    /// returns whether it is no longer held.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.0.wait_lost(timeout)
    }
}

impl std::ops::Deref for LeaseWatch {
    type Target = crate::LeaseWatch;

    fn deref(&self) -> &crate::LeaseWatch {
        &self.0
    }
}
