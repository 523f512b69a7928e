//! What the work inside `with_lock` can know about its lock, the same in every adapter.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use redlock_core::{Lease, Token};

#[derive(Debug)]
struct State {
    valid_until: Instant,
    lost: bool,
    work_done: bool,
    wakers: Vec<Waker>,
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

    /// Blocks while `waiting` holds, at most `timeout`; returns the state then.
    fn wait_while(
        &self,
        timeout: Duration,
        waiting: impl FnMut(&mut State) -> bool,
    ) -> MutexGuard<'_, State> {
        let (state, _) = self
            .changed
            .wait_timeout_while(self.state(), timeout, waiting)
            .unwrap_or_else(PoisonError::into_inner);
        state
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let wakers = {
            let mut state = self.state();
            f(&mut state);
            std::mem::take(&mut state.wakers)
        };
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// What the work inside `with_lock` can know about its lock: whether it is lost, and until when
/// it is valid. Cheap to clone; the same type in every adapter. It never extends or releases
/// anything itself: `with_lock` does.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    shared: Arc<Shared>,
    token: Token,
    fence: Option<u64>,
}

/// The adapter's side of a [`LeaseWatch`]: it reports extensions and the loss, and learns when
/// the work is over.
#[derive(Debug, Clone)]
pub struct LeaseKeeper {
    shared: Arc<Shared>,
}

/// A watch and its keeper, for `lease`'s lock.
pub fn lease_watch(lease: &Lease) -> (LeaseKeeper, LeaseWatch) {
    lease_watch_at(lease.valid_until(), lease.token().clone(), lease.fence())
}

/// A watch and its keeper for a lock valid until `valid_until`, with `token` and `fence`.
pub fn lease_watch_at(
    valid_until: Instant,
    token: Token,
    fence: Option<u64>,
) -> (LeaseKeeper, LeaseWatch) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            valid_until,
            lost: false,
            work_done: false,
            wakers: Vec::new(),
        }),
        changed: Condvar::new(),
    });
    (
        LeaseKeeper {
            shared: shared.clone(),
        },
        LeaseWatch {
            shared,
            token,
            fence,
        },
    )
}

impl LeaseWatch {
    /// The lock's token (for another process that should `resume` or release it).
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The lock's fencing token, if it was requested with `LockRequest::fenced()`.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Whether the lock has been lost: stop the protected work then.
    pub fn is_lost(&self) -> bool {
        self.shared.state().lost
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

    /// Blocks the calling thread until the lock is lost or `timeout` passes; returns whether it
    /// was lost. For blocking code; async code awaits [`lost`](LeaseWatch::lost) instead.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.shared.wait_while(timeout, |s| !s.lost).lost
    }

    /// Resolves once the lock is lost (never, if it is kept until the work ends).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        Lost {
            shared: self.shared.clone(),
        }
    }
}

struct Lost {
    shared: Arc<Shared>,
}

impl Future for Lost {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.shared.state();
        if state.lost {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl LeaseKeeper {
    /// An extension moved the validity.
    pub fn extended(&self, valid_until: Instant) {
        self.shared
            .update(|s| s.valid_until = s.valid_until.max(valid_until));
    }

    /// The lock is lost.
    pub fn lost(&self) {
        self.shared.update(|s| s.lost = true);
    }

    /// The work is over (however it ended).
    pub fn work_done(&self) {
        self.shared.update(|s| s.work_done = true);
    }

    /// Blocks until the work is over or `until` passes; returns whether it is over.
    pub fn wait_work_done(&self, until: Instant) -> bool {
        let wait = until.saturating_duration_since(Instant::now());
        self.shared.wait_while(wait, |s| !s.work_done).work_done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_lease(until: Instant) -> (Instant, Token, Option<u64>) {
        (until, Token::new(b"t".to_vec()).expect("valid"), Some(7))
    }

    fn lease_watch_at_(
        (until, token, fence): (Instant, Token, Option<u64>),
    ) -> (LeaseKeeper, LeaseWatch) {
        lease_watch_at(until, token, fence)
    }

    #[test]
    fn the_watch_sees_what_the_keeper_reports() {
        let t0 = Instant::now() + Duration::from_secs(60);
        let (keeper, watch) = lease_watch_at_(test_lease(t0));
        assert!(watch.is_valid() && !watch.is_lost());
        assert_eq!(
            (watch.token().as_bytes(), watch.fence()),
            (&b"t"[..], Some(7))
        );
        keeper.extended(t0 + Duration::from_secs(5));
        keeper.extended(t0); // never backwards
        assert_eq!(watch.valid_until(), t0 + Duration::from_secs(5));
        assert!(!watch.wait_lost(Duration::from_millis(1)));
        let waiter = std::thread::spawn({
            let watch = watch.clone();
            move || watch.wait_lost(Duration::from_secs(60))
        });
        keeper.lost();
        assert!(waiter.join().expect("no panic"));
        assert!(watch.is_lost() && !watch.is_valid());
    }

    #[test]
    fn lost_resolves_when_the_keeper_reports_it() {
        let (keeper, watch) = lease_watch_at_(test_lease(Instant::now()));
        let mut lost = Box::pin(watch.lost());
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(lost.as_mut().poll(&mut cx).is_pending());
        keeper.lost();
        assert!(lost.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn the_keeper_learns_when_the_work_is_done() {
        let (keeper, _watch) = lease_watch_at_(test_lease(Instant::now()));
        assert!(!keeper.wait_work_done(Instant::now() + Duration::from_millis(1)));
        keeper.work_done();
        assert!(keeper.wait_work_done(Instant::now() + Duration::from_secs(60)));
    }
}
