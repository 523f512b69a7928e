//! What anyone holding a lock can know about it, kept current by the client's driver: the same
//! type in every adapter.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use redlock_core::{
    ExtendOutcome, Lease, LockSpec, NodeErrorKind, NodeRelease, ReleaseReport, Token, Vote,
};

use crate::clock::Clock;
use crate::error::Error;
use crate::sleepers::Sleepers;

#[derive(Debug)]
struct State {
    lease: Lease,
    /// Why the lock was lost, once it was.
    lost: Option<Error>,
    /// Released (or given up): no longer held, whatever it was before.
    ended: bool,
    wakers: Vec<Waker>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// A blocking waiter for the loss sleeps here.
    changed: Sleepers,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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

/// What anyone holding a lock can know about it: its validity (moved forward by every
/// extension) and whether it was lost. Cheap to clone, `Send + Sync`; the client's driver keeps
/// it current whether or not anyone looks. It never extends or releases anything itself.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    shared: Arc<Shared>,
    spec: LockSpec,
    fence: Option<u64>,
    /// The driver's clock: counts the time the machine was suspended (Linux).
    clock: Clock,
}

impl LeaseWatch {
    /// A watch on `lease`, whose instants are `clock`'s, for the driver to keep current.
    pub(crate) fn new(lease: Lease, clock: Clock) -> Self {
        Self {
            spec: lease.spec().clone(),
            fence: lease.fence(),
            clock,
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    lease,
                    lost: None,
                    ended: false,
                    wakers: Vec::new(),
                }),
                changed: Sleepers::default(),
            }),
        }
    }

    /// The token stored under the keys: with the resources, all another client needs to
    /// `resume` the lock or `release_by_token` it.
    pub fn token(&self) -> &Token {
        self.spec.token()
    }

    /// The locked resources, without the key prefix.
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.spec.resources()
    }

    /// The fencing token of a lock acquired with `LockRequest::fenced()`: larger than every
    /// earlier holder's of these resources. Send it with each write to the protected resource,
    /// and have the resource reject a write whose fence is below the largest it accepted.
    /// `None` for a lock acquired without fencing.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The TTL the keys were last set to (by the acquisition, or by the last extension that
    /// succeeded).
    pub fn ttl(&self) -> Duration {
        self.shared.state().lease.ttl()
    }

    /// What each node answered in the round that granted (or last extended) the lock, in node
    /// order.
    pub fn votes(&self) -> Vec<Vote> {
        self.shared.state().lease.votes().to_vec()
    }

    /// How many rounds the acquisition took.
    pub fn attempts(&self) -> u32 {
        self.shared.state().lease.attempts()
    }

    /// The engine's lease, for the driver (its instants ignore suspend time: users read
    /// [`valid_until`](LeaseWatch::valid_until), which counts it).
    pub(crate) fn lease(&self) -> Lease {
        self.shared.state().lease.clone()
    }

    /// The end of validity, as an [`Instant`] to compare with `Instant::now()`:
    /// `t0 + ttl − drift − READING_BOUND` (the clock's bound, 1 ms, taken up front), moved
    /// forward by each extension that succeeded. It never moves by itself: two reads of an
    /// unchanged lease are equal, and an extension that failed, or one to a shorter TTL (which
    /// never shortens the keys), leaves it as it was. **After the machine was suspended it moves
    /// backwards** by the time the machine slept beyond the bound (Linux): the nodes kept
    /// counting the keys' TTL while `Instant::now()` stood still, so less validity is left
    /// than before — never later than the truth, and this reports it. [`remaining`] and
    /// [`is_valid`] follow the same rule: `is_valid()` is `Instant::now() < valid_until()` for a
    /// lock neither lost nor released.
    ///
    /// [`remaining`]: LeaseWatch::remaining
    /// [`is_valid`]: LeaseWatch::is_valid
    pub fn valid_until(&self) -> Instant {
        let until = self.shared.state().lease.valid_until();
        // Reading the clock brings its count of suspend time up to date.
        self.clock.now();
        until.checked_sub(self.clock.suspended()).unwrap_or(until)
    }

    /// Validity left now (zero once it has passed, or once the lock was lost), counting any
    /// time the machine was suspended (Linux). The check to make before each step that must
    /// not overlap another holder's, with [`is_valid`](LeaseWatch::is_valid).
    pub fn remaining(&self) -> Duration {
        let state = self.shared.state();
        if state.lost.is_some() || state.ended {
            return Duration::ZERO;
        }
        state.lease.remaining(self.clock.now())
    }

    /// Whether the lock may be trusted now: not lost, and inside its validity, counting any
    /// time the machine was suspended (Linux). Check it before each step that must not overlap
    /// another holder's.
    pub fn is_valid(&self) -> bool {
        let state = self.shared.state();
        state.lost.is_none() && !state.ended && state.lease.is_valid(self.clock.now())
    }

    /// Whether the lock has been lost — an auto-extended lock that could not be kept, a lock
    /// without auto-extension whose validity ended, or a lock whose client's driver stopped:
    /// stop the protected work then.
    pub fn is_lost(&self) -> bool {
        self.shared.state().lost.is_some()
    }

    /// Why the lock was lost, once it was.
    pub fn loss(&self) -> Option<Error> {
        self.shared.state().lost.clone()
    }

    /// Blocks the calling thread until the lock is lost (or released) or `timeout` passes;
    /// returns whether it is no longer held: `blocking::LeaseWatch::wait_lost`, never reachable
    /// from an async lock.
    #[cfg(feature = "blocking")]
    pub(crate) fn wait_lost(&self, timeout: Duration) -> bool {
        let state = self
            .shared
            .changed
            .wait_timeout_while(self.shared.state(), timeout, |s| {
                s.lost.is_none() && !s.ended
            });
        state.lost.is_some() || state.ended
    }

    /// Resolves once the lock is lost (see [`is_lost`](LeaseWatch::is_lost)), or released:
    /// once it is not held any more. Never while it is kept.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        Lost {
            shared: self.shared.clone(),
        }
    }

    /// An extension ended: a successful one moves the validity forward.
    pub(crate) fn extended(&self, outcome: &ExtendOutcome) {
        self.shared.update(|s| s.lease.apply(outcome));
    }

    /// The lock is lost, for this reason (the first reason stays).
    pub(crate) fn set_lost(&self, error: Error) {
        self.shared.update(|s| {
            s.lost.get_or_insert(error);
        });
    }

    /// The lock was released: whoever waits for its loss can stop waiting.
    pub(crate) fn set_ended(&self) {
        self.shared.update(|s| s.ended = true);
    }

    /// What a release that got no answer reports: every node unreachable (the driver stopped
    /// before it could say), never a clean report.
    pub(crate) fn unanswered_release(&self) -> ReleaseReport {
        let nodes = self.shared.state().lease.votes().len();
        ReleaseReport {
            nodes: vec![NodeRelease::Failed(NodeErrorKind::Connection); nodes],
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
        if state.lost.is_some() || state.ended {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal but for the clock's reading jitter after a suspend (a few µs beyond the bound,
    /// counted as suspend: it errs on the side of less validity).
    fn close(a: Instant, b: Instant) -> bool {
        a.max(b).duration_since(a.min(b)) < Duration::from_millis(1)
    }
    use crate::clock::READING_BOUND;
    use redlock_core::ExtendFailure;
    use redlock_core::fake::lease as testing_lease;

    #[test]
    #[cfg(feature = "blocking")]
    fn the_watch_sees_what_the_driver_reports() {
        let t0 = Instant::now() + Duration::from_secs(60);
        let watch = LeaseWatch::new(testing_lease(t0, Some(7)), Clock::new());
        assert!(watch.is_valid() && !watch.is_lost());
        assert_eq!(watch.fence(), Some(7));
        let extended = |until| ExtendOutcome::Extended {
            valid_until: until,
            ttl: Duration::from_secs(1),
            votes: Vec::new(),
        };
        watch.extended(&extended(t0 + Duration::from_secs(5)));
        watch.extended(&extended(t0)); // never backwards
        assert_eq!(watch.valid_until(), t0 + Duration::from_secs(5));
        assert!(!watch.wait_lost(Duration::from_millis(1)));
        let waiter = std::thread::spawn({
            let watch = watch.clone();
            move || watch.wait_lost(Duration::from_secs(60))
        });
        watch.set_lost(Error::Lost(crate::LockFailure::default()));
        assert!(waiter.join().expect("no panic"));
        assert!(watch.is_lost() && !watch.is_valid());
        assert_eq!(watch.remaining(), Duration::ZERO);
    }

    /// A machine that slept through part of the validity: the nodes kept counting, so less is
    /// left. `remaining` and `is_valid` count the suspend; `valid_until` moves backwards by it
    /// (in `Instant::now()`'s timeline, which stood still).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_suspend_shortens_the_validity_left() {
        let until = Instant::now() + Duration::from_secs(60);
        let slept = LeaseWatch::new(
            testing_lease(until, None),
            Clock::after_suspend(Duration::from_secs(20)),
        );
        // The bound is taken up front by a real lease (this fake one does not): the clock
        // counts what grew beyond it.
        let slept_beyond = Duration::from_secs(20) - READING_BOUND;
        let left = slept.remaining();
        assert!(
            left <= Duration::from_secs(60) - slept_beyond && left > Duration::from_secs(35),
            "{left:?}"
        );
        assert!(close(slept.valid_until(), until - slept_beyond));
        assert!(slept.valid_until() <= until - slept_beyond);
        assert!(slept.is_valid());
        let overslept = LeaseWatch::new(
            testing_lease(until, None),
            Clock::after_suspend(Duration::from_secs(90)),
        );
        assert!(!overslept.is_valid(), "slept through the validity");
        assert_eq!(overslept.remaining(), Duration::ZERO);
        assert!(overslept.valid_until() < Instant::now());
        // The control: without a suspend, the same lease has its full validity.
        let awake = LeaseWatch::new(testing_lease(until, None), Clock::new());
        assert!(awake.remaining() > Duration::from_secs(55));
        assert_eq!(awake.valid_until(), until);
    }

    /// Without a suspend the validity holds still: read again and again, after an extension
    /// that failed, and after one to a shorter TTL; `is_valid` agrees with it.
    #[test]
    fn the_validity_never_moves_by_itself() {
        let until = Instant::now() + Duration::from_secs(60);
        let watch = LeaseWatch::new(testing_lease(until, None), Clock::new());
        for _ in 0..10_000 {
            assert_eq!(watch.valid_until(), until);
        }
        watch.extended(&ExtendOutcome::NotExtended {
            reason: ExtendFailure::Unavailable,
            votes: Vec::new(),
        });
        assert_eq!(
            watch.valid_until(),
            until,
            "a failed extension changes nothing"
        );
        watch.extended(&ExtendOutcome::Extended {
            valid_until: until - Duration::from_secs(30),
            ttl: Duration::from_secs(30),
            votes: Vec::new(),
        });
        assert_eq!(watch.valid_until(), until, "a shorter one neither");
        assert!(watch.is_valid() && Instant::now() < watch.valid_until());
        let left = watch.remaining();
        assert!(
            left <= until - Instant::now() + Duration::from_millis(1),
            "{left:?}"
        );
        // A lease whose validity has passed: neither valid nor any time left, in agreement.
        let past = LeaseWatch::new(testing_lease(Instant::now(), None), Clock::new());
        std::thread::sleep(Duration::from_millis(2));
        assert!(!past.is_valid() && Instant::now() >= past.valid_until());
        assert_eq!(past.remaining(), Duration::ZERO);
    }

    #[test]
    fn lost_resolves_when_the_driver_reports_it() {
        let watch = LeaseWatch::new(testing_lease(Instant::now(), None), Clock::new());
        let mut lost = Box::pin(watch.lost());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(lost.as_mut().poll(&mut cx).is_pending());
        watch.set_lost(Error::Lost(crate::LockFailure::default()));
        assert!(lost.as_mut().poll(&mut cx).is_ready());
    }
}
