//! `with_lock`: run work under a lock that a helper thread keeps extended (as the engine's
//! auto-extension says), and learn when it is lost.

use std::thread;
use std::time::Duration;

use redlock_core::LockRequest;
use redlock_redis::{Error, LeaseKeeper, LeaseWatch, lease_watch};

use crate::client::Redlock;

/// Tells the keeper thread that the work is over when dropped (panics included).
struct WorkDone<'a>(&'a LeaseKeeper);

impl Drop for WorkDone<'_> {
    fn drop(&mut self) {
        self.0.work_done();
    }
}

impl Redlock {
    /// Locks `resource`, runs `work` on this thread while a helper thread keeps the lock
    /// extended, then releases it.
    ///
    /// The lock is extended when half of its remaining validity has passed (the engine's
    /// auto-extension). If it cannot be kept, the work is told through [`LeaseWatch`] — before
    /// validity ends — and `with_lock` returns [`Error::Lost`] once the work returns (its result
    /// is dropped). Work that ignores the signal keeps `with_lock` waiting, so watch it.
    pub fn with_lock<T>(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
        work: impl FnOnce(LeaseWatch) -> T,
    ) -> Result<T, Error> {
        self.with_lock_request(LockRequest::new(resource, ttl), work)
    }

    /// [`with_lock`](Redlock::with_lock) for a lock `request` of your own (several resources,
    /// a retry policy, a fence, ...); it is auto-extended all the same.
    pub fn with_lock_request<T>(
        &self,
        request: LockRequest,
        work: impl FnOnce(LeaseWatch) -> T,
    ) -> Result<T, Error> {
        let mut lock = self.acquire(request.auto_extend())?;
        let (keeper, watch) = lease_watch(lock.lease());
        let (value, lost) = thread::scope(|scope| {
            let keeping = scope.spawn(|| lock.keep(&keeper));
            let done = WorkDone(&keeper);
            let value = work(watch);
            drop(done);
            let lost = keeping
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (value, lost)
        });
        lock.release();
        match lost {
            None => Ok(value),
            Some(lost) => Err(lost),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_panicking_work_stops_the_keeper() {
        // Port 1 on loopback refuses connections, so no lock can be taken: exercise the guard
        // directly, as with_lock uses it.
        let token = redlock_core::Token::new(b"t".to_vec()).expect("valid");
        let (keeper, _watch) =
            redlock_redis::lease_watch_at(Instant::now() + Duration::from_secs(60), token, None);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _done = WorkDone(&keeper);
            panic!("work failed");
        }));
        assert!(outcome.is_err());
        assert!(
            keeper.wait_work_done(Instant::now()),
            "the keeper is told to stop"
        );
    }
}
