//! The batches in flight: every batch written and not yet answered, polled by whoever runs the
//! driver's turn.
//!
//! A batch's write is a large future (the reading of its replies and the connection's request:
//! over 2 KB). Each one lives in a slot of its own on the heap, which a later batch uses again
//! once it is answered: the set holds and moves a pointer, never the write's state
//! (`FuturesUnordered` moved each future three times on its way in, then the largest cost of a
//! batch on our side), and a slot costs no allocation once the client ran as many batches at
//! once as it ever will, up to [`KEPT`] (the set still allocates its own small task per
//! batch, as it did).
//!
//! # What it never does
//! It never polls a write after it ended, never drops one before it ended (except with the set,
//! when the driver ends), and never keeps more than [`KEPT`] idle slots.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use futures_util::future::Either;
use futures_util::stream::FuturesUnordered;

/// How many answered batches' slots are kept for later batches: beyond it (a burst of more
/// batches at once), a slot is freed when its batch is answered.
pub(super) const KEPT: usize = 16;

/// A write's room on the heap: empty once its batch is answered, filled by a later batch.
type Slot<F> = Pin<Box<Option<F>>>;

/// The batches in flight, and the slots of answered ones.
pub(super) struct InFlight<F: Future> {
    set: FuturesUnordered<Either<Filled<F>, std::future::Pending<Answered<F>>>>,
    idle: Vec<Slot<F>>,
}

/// A batch's output and the slot it leaves.
type Answered<F> = (<F as Future>::Output, Slot<F>);

impl<F: Future> InFlight<F> {
    /// An empty set, holding one future that never ends. `FuturesUnordered` wakes its task when
    /// one poll polled every future it holds (a yield, so that a large set does not starve the
    /// executor): a turn that just pushed its batches, all still waiting for their replies, was
    /// woken by its own poll — the owner's turn again, or, before the caller first polled its
    /// answer, the driver's task (on a multi-thread runtime, a turn on another thread per call,
    /// contending for the turn's mutex). The future that never ends is polled once, in the
    /// driver's first turn (whose yield wakes one turn for nothing), and never woken: no later
    /// poll polls every future, and only the replies wake the turn.
    pub(super) fn new() -> Self {
        let set = FuturesUnordered::new();
        set.push(Either::Right(std::future::pending()));
        Self {
            set,
            idle: Vec::new(),
        }
    }

    /// Adds the batch's write that `write` makes (not polled until the next
    /// [`poll_next`](Self::poll_next)), straight into its slot.
    pub(super) fn push(&mut self, write: impl FnOnce() -> F) {
        let mut slot = self.idle.pop().unwrap_or_else(|| Box::pin(None));
        slot.set(Some(write()));
        self.set.push(Either::Left(Filled(Some(slot))));
    }

    /// The output of a batch that was answered, if any; its slot is kept for a later batch.
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        match self.set.poll_next_unpin(cx) {
            Poll::Ready(Some((output, slot))) => {
                if self.idle.len() < KEPT {
                    self.idle.push(slot);
                }
                Poll::Ready(Some(output))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// How many slots wait for a later batch.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.len()
    }
}

/// A slot holding a write until it ends; then the write's output, and the slot emptied.
struct Filled<F>(Option<Slot<F>>);

impl<F: Future> Future for Filled<F> {
    type Output = Answered<F>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `Filled` is `Unpin` (it holds a pinned box), so its own pinning promises nothing.
        let this = self.get_mut();
        // A set never polls a future after it ended, and `push` fills every slot it adds: a
        // silent `Pending` here would leave a batch unanswered for good.
        let slot = this
            .0
            .as_mut()
            .expect("a write is never polled after it ended");
        let write = slot
            .as_mut()
            .as_pin_mut()
            .expect("a slot in flight holds its write");
        let output = std::task::ready!(write.poll(cx));
        // The write's state is dropped in place, where it was pinned.
        slot.set(None);
        let slot = this.0.take().expect("taken once, as the write ends");
        Poll::Ready((output, slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wakes::Wakes;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A write that ends on its second poll, and counts its drops.
    struct Write {
        polled: bool,
        ended: bool,
        value: usize,
        dropped: Arc<AtomicUsize>,
    }

    impl Future for Write {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            assert!(!self.ended, "polled after it ended");
            if self.polled {
                self.ended = true;
                return Poll::Ready(self.value);
            }
            self.polled = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    impl Drop for Write {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Polls `set` until `count` writes were answered (or a bound of polls ran: the set
    /// yields after a few writes woke themselves).
    fn drain(set: &mut InFlight<Write>, cx: &mut Context<'_>, count: usize) -> Vec<usize> {
        let mut outputs = Vec::new();
        for _ in 0..100 * count {
            if outputs.len() == count {
                break;
            }
            if let Poll::Ready(Some(output)) = set.poll_next(cx) {
                outputs.push(output);
            }
        }
        outputs.sort();
        outputs
    }

    #[test]
    fn every_write_is_answered_once_and_its_slot_serves_the_next() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let write = |value| Write {
            polled: false,
            ended: false,
            value,
            dropped: dropped.clone(),
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut set = InFlight::new();
        for value in 0..3 {
            set.push(|| write(value));
        }
        assert_eq!(drain(&mut set, &mut cx, 3), [0, 1, 2]);
        // Each write was dropped when it ended, where it was pinned; its slot waits.
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
        assert_eq!(set.idle(), 3);
        // The next batches use the slots again.
        set.push(|| write(7));
        set.push(|| write(8));
        assert_eq!(set.idle(), 1);
        assert_eq!(drain(&mut set, &mut cx, 2), [7, 8]);
        assert_eq!(dropped.load(Ordering::SeqCst), 5);
        assert_eq!(set.idle(), 3);
    }

    #[test]
    fn a_burst_keeps_no_more_than_kept_slots() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut set = InFlight::new();
        for value in 0..KEPT + 5 {
            set.push(|| Write {
                polled: false,
                ended: false,
                value,
                dropped: dropped.clone(),
            });
        }
        assert_eq!(drain(&mut set, &mut cx, KEPT + 5).len(), KEPT + 5);
        assert_eq!(set.idle(), KEPT);
    }

    #[test]
    fn a_write_in_flight_is_dropped_with_the_set() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut set = InFlight::new();
        set.push(|| Write {
            polled: false,
            ended: false,
            value: 1,
            dropped: dropped.clone(),
        });
        assert!(set.poll_next(&mut cx).is_pending());
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        drop(set);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    /// A write whose reply never comes: it never ends and never wakes the turn.
    struct Quiet;

    impl Future for Quiet {
        type Output = usize;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<usize> {
            Poll::Pending
        }
    }

    #[test]
    fn a_poll_of_writes_that_all_wait_does_not_wake_the_turn() {
        let (wakes, waker) = Wakes::counting();
        let mut cx = Context::from_waker(&waker);
        let mut set = InFlight::new();
        // The first poll polls the future that never ends, alone: one wake for nothing.
        assert!(set.poll_next(&mut cx).is_pending());
        let first = wakes.count();
        set.push(|| Quiet);
        assert!(set.poll_next(&mut cx).is_pending());
        // The write waits for its reply: nothing is due until it wakes the turn.
        assert_eq!(wakes.count(), first);
    }
}
