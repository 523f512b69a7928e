//! `with_lock`: run work under a lock that a helper thread keeps extended, and learn when it is
//! lost.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use redlock_core::{ExtendFailure, ExtendOutcome, Renewal, RenewalStep, Vote};
use redlock_redis::{Error, LockFailure};

use crate::client::Redlock;
use crate::lock::Lock;

#[derive(Debug)]
struct State {
    valid_until: Instant,
    lost: bool,
    work_done: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.state());
        self.changed.notify_all();
    }
}

/// Tells the keeper thread that the work is over when dropped.
struct StopKeeper<'a>(&'a Shared);

impl Drop for StopKeeper<'_> {
    fn drop(&mut self) {
        self.0.update(|s| s.work_done = true);
    }
}

/// What the work inside [`Redlock::with_lock`] can know about its lock.
#[derive(Debug, Clone, Copy)]
pub struct LeaseWatch<'a> {
    shared: &'a Shared,
}

impl LeaseWatch<'_> {
    /// Whether the lock has been lost: stop the protected work then.
    pub fn is_lost(&self) -> bool {
        self.shared.state().lost
    }

    /// Blocks until the lock is lost or `timeout` passes; returns whether it was lost.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let state = self.shared.state();
        let (state, _) = self
            .shared
            .changed
            .wait_timeout_while(state, timeout, |s| !s.lost)
            .unwrap_or_else(PoisonError::into_inner);
        state.lost
    }

    /// The current end of validity (moves forward with each extension).
    pub fn valid_until(&self) -> Instant {
        self.shared.state().valid_until
    }

    /// Whether the lock may be trusted now: check before each step that must not overlap
    /// another holder's.
    pub fn is_valid(&self) -> bool {
        let state = self.shared.state();
        !state.lost && Instant::now() < state.valid_until
    }
}

impl Redlock {
    /// Locks `resource`, runs `work` on this thread while a helper thread keeps the lock
    /// extended, then releases it.
    ///
    /// The lock is extended when half of its remaining validity has passed. If it cannot be kept,
    /// the work is told through [`LeaseWatch`] — before validity ends — and `with_lock` returns
    /// [`Error::Lost`] once the work returns (its result is dropped). Work that ignores the
    /// signal keeps `with_lock` waiting, so watch it.
    pub fn with_lock<T>(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
        work: impl FnOnce(LeaseWatch<'_>) -> T,
    ) -> Result<T, Error> {
        let mut lock = self.lock(resource, ttl)?;
        let shared = Shared {
            state: Mutex::new(State {
                valid_until: lock.valid_until(),
                lost: false,
                work_done: false,
            }),
            changed: Condvar::new(),
        };
        let (value, lost) = thread::scope(|scope| {
            let keeper = scope.spawn(|| keep_alive(&mut lock, &shared));
            // Stops the keeper however the work ends, panics included: the scope waits for it.
            let stop = StopKeeper(&shared);
            let value = work(LeaseWatch { shared: &shared });
            drop(stop);
            let lost = keeper
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (value, lost)
        });
        lock.release();
        match lost {
            None => Ok(value),
            Some(lost) => {
                tracing::warn!("lock lost while work was running");
                Err(lost)
            }
        }
    }
}

/// Extends `lock` as the engine's renewal policy says until the work is done (`None`) or the
/// lock is lost (`Some`).
fn keep_alive(lock: &mut Lock, shared: &Shared) -> Option<Error> {
    let client = lock.client().clone();
    let node_timeout = client.inner.config.node_timeout(lock.lease().ttl());
    let mut renewal = Renewal::new(Instant::now(), lock.lease(), node_timeout);
    let mut last_votes: Vec<Vote> = Vec::new();
    loop {
        match renewal.poll(Instant::now()) {
            RenewalStep::Wait(until) => {
                let state = shared.state();
                let wait = until.saturating_duration_since(Instant::now());
                let (state, _) = shared
                    .changed
                    .wait_timeout_while(state, wait, |s| !s.work_done)
                    .unwrap_or_else(PoisonError::into_inner);
                if state.work_done {
                    return None;
                }
            }
            RenewalStep::Extend => {
                let ttl = lock.lease().ttl();
                // The TTL was accepted when the lock was taken, so this cannot fail; treat a
                // failure as the end of the lock all the same.
                let outcome = lock.run_extend(ttl).unwrap_or(ExtendOutcome::NotExtended {
                    reason: ExtendFailure::Expired,
                    votes: Vec::new(),
                });
                if let ExtendOutcome::NotExtended { votes, reason, .. } = &outcome {
                    tracing::debug!(?reason, "auto-extension failed");
                    last_votes.clone_from(votes);
                }
                renewal.handle_extended(Instant::now(), &outcome);
                let valid_until = lock.valid_until();
                shared.update(|s| s.valid_until = valid_until);
            }
            RenewalStep::Lost => {
                shared.update(|s| s.lost = true);
                return Some(Error::Lost(LockFailure::new(
                    &client.inner.labels,
                    &last_votes,
                    1,
                )));
            }
            _ => unreachable!("RenewalStep has three variants"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_work_stops_the_keeper() {
        // Port 1 on loopback refuses connections, so no lock can be taken: exercise the guard
        // directly, as with_lock uses it.
        let shared = Shared {
            state: Mutex::new(State {
                valid_until: Instant::now() + Duration::from_secs(60),
                lost: false,
                work_done: false,
            }),
            changed: Condvar::new(),
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _stop = StopKeeper(&shared);
            panic!("work failed");
        }));
        assert!(outcome.is_err());
        assert!(shared.state().work_done, "the keeper is told to stop");
    }
}
