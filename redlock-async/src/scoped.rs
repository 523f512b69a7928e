//! `with_lock`: run work under a lock that extends itself, and learn when it is lost.

use std::future::Future;
use std::time::{Duration, Instant};

use redlock_core::{ExtendFailure, ExtendOutcome, Renewal, RenewalStep, Vote};
use redlock_redis::{Error, LockFailure};
use tokio::sync::watch;

use crate::client::Redlock;
use crate::lock::Lock;
use crate::runtime::Runtime;

#[derive(Debug, Clone, Copy)]
struct State {
    valid_until: Instant,
    lost: bool,
}

/// What the work inside [`Redlock::with_lock`] can know about its lock.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    state: watch::Receiver<State>,
}

impl LeaseWatch {
    /// Resolves once the lock is lost: stop the protected work then.
    pub async fn lost(&self) {
        let mut state = self.state.clone();
        // An error means the lock's keeper is gone, which only happens once `with_lock` returns.
        let _ = state.wait_for(|s| s.lost).await;
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        self.state.borrow().lost
    }

    /// The current end of validity (moves forward with each extension).
    pub fn valid_until(&self) -> Instant {
        self.state.borrow().valid_until
    }

    /// Whether the lock may be trusted now: check before each step that must not overlap
    /// another holder's.
    pub fn is_valid(&self) -> bool {
        let state = *self.state.borrow();
        !state.lost && Instant::now() < state.valid_until
    }
}

impl<R: Runtime> Redlock<R> {
    /// Locks `resource`, runs `work` while keeping the lock extended, then releases it.
    ///
    /// The lock is extended when half of its remaining validity has passed. If it cannot be kept
    /// (too few nodes hold it, or no extension can finish before validity ends), the work is told
    /// through [`LeaseWatch::lost`] — before validity ends — and `with_lock` returns
    /// [`Error::Lost`] once the work returns (its result is dropped). Work that ignores the
    /// signal keeps `with_lock` waiting, so watch it.
    pub async fn with_lock<T, F, Fut>(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseWatch) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut lock = self.lock(resource, ttl).await?;
        let (tx, rx) = watch::channel(State {
            valid_until: lock.valid_until(),
            lost: false,
        });
        let work = work(LeaseWatch { state: rx });
        tokio::pin!(work);
        let kept = {
            let keeper = keep_alive(&mut lock, &tx);
            tokio::pin!(keeper);
            tokio::select! {
                value = &mut work => Ok(value),
                lost = &mut keeper => Err(lost),
            }
        };
        match kept {
            Ok(value) => {
                lock.release().await;
                Ok(value)
            }
            Err(lost) => {
                tx.send_modify(|s| s.lost = true);
                tracing::warn!("lock lost while work was running");
                let _ = work.await;
                lock.release().await;
                Err(lost)
            }
        }
    }
}

/// Extends `lock` as the engine's renewal policy says; returns only when the lock is lost.
async fn keep_alive<R: Runtime>(lock: &mut Lock<R>, tx: &watch::Sender<State>) -> Error {
    let client = lock.client().clone();
    let node_timeout = client.inner.config.node_timeout(lock.lease().ttl());
    let mut renewal = Renewal::new(Instant::now(), lock.lease(), node_timeout);
    let mut last_votes: Vec<Vote> = Vec::new();
    loop {
        match renewal.poll(Instant::now()) {
            RenewalStep::Wait(until) => R::sleep_until(until).await,
            RenewalStep::Extend => {
                let ttl = lock.lease().ttl();
                // The TTL was accepted when the lock was taken, so this cannot fail; treat a
                // failure as the end of the lock all the same.
                let outcome = lock
                    .run_extend(ttl)
                    .await
                    .unwrap_or(ExtendOutcome::NotExtended {
                        reason: ExtendFailure::Expired,
                        votes: Vec::new(),
                    });
                if let ExtendOutcome::NotExtended { votes, reason, .. } = &outcome {
                    tracing::debug!(?reason, "auto-extension failed");
                    last_votes.clone_from(votes);
                }
                renewal.handle_extended(Instant::now(), &outcome);
                tx.send_modify(|s| s.valid_until = lock.valid_until());
            }
            RenewalStep::Lost => {
                tx.send_modify(|s| s.lost = true);
                return Error::Lost(LockFailure::new(&client.inner.labels, &last_votes, 1));
            }
            _ => unreachable!("RenewalStep has three variants"),
        }
    }
}
