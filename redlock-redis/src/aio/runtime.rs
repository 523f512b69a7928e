//! What the async driver needs from a runtime: spawning, and waking at an instant.

use std::future::Future;
use std::time::Instant;

/// An async runtime the driver can run on. Implemented by each async adapter; the driver itself
/// never names a runtime.
pub trait Runtime: Clone + Send + Sync + 'static {
    /// The runtime the calling task runs on (captured when an operation starts, so that
    /// background releases run on the same runtime), or what is missing for the driver to run
    /// there (no runtime, or one without timers), said to the caller as
    /// [`Error::NoRuntime`](crate::Error::NoRuntime). Never panics.
    fn current() -> Result<Self, &'static str>;

    /// Whether the calling task runs on this runtime: only there may a caller run its client's
    /// driver turn itself (its timers and connections belong to the driver's runtime).
    fn is_current(&self) -> bool;

    /// Runs `future` in the background.
    fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static;

    /// Resolves at `deadline` (at once if it has passed).
    fn sleep_until(deadline: Instant) -> impl Future<Output = ()> + Send;
}
