//! A waker that counts its wake-ups, for the unit tests that check who a wake-up reaches (and
//! that no one is woken for nothing). Test-only: it never wakes a task.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

/// Counts the wake-ups of the wakers made from it.
#[derive(Default)]
pub(crate) struct Wakes(AtomicUsize);

impl Wakes {
    /// A counter and a waker that adds to it.
    pub(crate) fn counting() -> (Arc<Self>, Waker) {
        let wakes = Arc::new(Self::default());
        let waker = Waker::from(wakes.clone());
        (wakes, waker)
    }

    /// How many wake-ups came so far.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
