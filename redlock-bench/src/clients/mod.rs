//! The lock clients the scenarios drive, behind one [`AsyncClient`] trait for tasks and one
//! [`BlockingClient`] trait for threads: take a key with the client's default retry policy,
//! give it back.
//!
//! Clients never measure, never retry beyond their own library's policy, and never choose a
//! runtime (the contender does).

pub(crate) mod raw;
pub(crate) mod raw_threads;
mod redlock;
mod rslock;

use std::future::Future;
use std::time::Duration;

/// TTL of every lock and raw key of the bench: long enough never to expire mid-cycle on a
/// loaded machine, so expiry never frees a key and every hand-over is a release.
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// A lock client as the async scenarios see it.
pub(crate) trait AsyncClient: Clone + Send + Sync + 'static {
    /// A held lock.
    type Held: Send + 'static;

    /// Locks `key` for [`TTL`], retrying as the library's default policy says. A lock that
    /// was not acquired is an `Err` with the library's reason.
    fn lock_key(&self, key: &str) -> impl Future<Output = Result<Self::Held, String>> + Send;

    /// Releases `held` on every node and waits for the answers.
    fn unlock(&self, held: Self::Held) -> impl Future<Output = ()> + Send;
}

/// A lock client as the blocking scenarios see it: shared by many threads.
pub(crate) trait BlockingClient: Sync {
    /// A held lock.
    type Held: Send;

    /// Locks `key` for [`TTL`], retrying as the library's default policy says. A lock that
    /// was not acquired is an `Err` with the library's reason.
    fn lock_key(&self, key: &str) -> Result<Self::Held, String>;

    /// Releases `held` on every node and waits for the answers.
    fn unlock(&self, held: Self::Held);
}
