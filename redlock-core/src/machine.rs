//! The contract every operation machine offers its driver.

#![cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]

#[cfg(any(test, feature = "testing"))]
use {crate::id::RequestId, crate::output::Output, crate::reply::Reply, std::time::Instant};

/// What every operation machine ([`Acquire`](crate::Acquire), [`Extend`](crate::Extend),
/// [`Release`](crate::Release)) offers its driver, so that one loop runs them all. The
/// [`Lifecycle`](crate::Lifecycle) runs them in turn; drive a lock through it.
#[cfg(any(test, feature = "testing"))]
pub trait Machine {
    /// What the operation ends with.
    type Outcome;

    /// Hands in the reply to request `id`. Stale, duplicate, late and unknown replies are ignored.
    fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply);

    /// Lets deadlines pass: call when the instant of the last [`Output::Wait`] has come.
    /// Harmless at any other time.
    fn handle_timeout(&mut self, now: Instant);

    /// The next thing to do; drain after every input until `Wait`, `Done` or `Idle`.
    fn poll_output(&mut self, now: Instant) -> Output<Self::Outcome>;
}

/// Implements [`Machine`] for a type whose inherent methods of the same names do the work.
macro_rules! impl_machine {
    ($machine:ty, $outcome:ty) => {
        #[cfg(any(test, feature = "testing"))]
        impl $crate::machine::Machine for $machine {
            type Outcome = $outcome;
            fn handle_reply(
                &mut self,
                now: std::time::Instant,
                id: $crate::id::RequestId,
                reply: $crate::reply::Reply,
            ) {
                <$machine>::handle_reply(self, now, id, reply)
            }
            fn handle_timeout(&mut self, now: std::time::Instant) {
                <$machine>::handle_timeout(self, now)
            }
            fn poll_output(&mut self, now: std::time::Instant) -> $crate::output::Output<$outcome> {
                <$machine>::poll_output(self, now)
            }
        }
    };
}
pub(crate) use impl_machine;
