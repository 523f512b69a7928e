//! The batches in flight: every batch written and not yet answered, polled by whoever runs the
//! driver's turn.
//!
//! A batch's write is a large future (the reading of its replies and the connection's request:
//! over 2 KB). Each one lives in a slot of its own on the heap, which a later batch uses again
//! once it is answered, up to [`KEPT`] idle slots. Each slot also has its own waker, made once
//! with the slot and kept for every later batch in it: a write's wake-up queues its slot and
//! wakes the turn, and a poll polls only the slots queued since the last. So a batch costs no
//! allocation once the client ran as many batches at once as it ever will (`FuturesUnordered`,
//! which this replaces, allocated a task for every batch and moved each write three times).
//!
//! # What it never does
//! It never polls a write after it ended, never drops one before it ended (except with the set,
//! when the driver ends), never keeps more than [`KEPT`] idle slots, and never wakes the turn
//! but for a write's own wake-up: a poll whose writes all wait leaves the turn asleep.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// How many answered batches' slots are kept for later batches: beyond it (a burst of more
/// batches at once), a slot is freed when its batch is answered.
pub(super) const KEPT: usize = 16;

/// A write's room on the heap: empty once its batch is answered, filled by a later batch.
type Slot<F> = Pin<Box<Option<F>>>;

/// The batches in flight, and the slots of answered ones.
pub(super) struct InFlight<F: Future> {
    /// Every place a write was ever in, by index: its slot (`None` once freed) and its waker.
    places: Vec<Place<F>>,
    /// Places whose slot is empty and kept (at most [`KEPT`]).
    idle: Vec<usize>,
    /// Places whose slot was freed.
    bare: Vec<usize>,
    /// Places to poll in this turn: the new writes, and those the wake-ups queued.
    due: Vec<usize>,
    /// What the places' wakers share with the set.
    woken: Arc<Woken>,
}

/// One place: a slot (holding a write until it ends), and the waker its writes are polled
/// with.
struct Place<F> {
    slot: Option<Slot<F>>,
    waker: Waker,
    wake: Arc<PlaceWake>,
}

/// The places woken since the last poll took them, and the turn to wake.
#[derive(Default)]
struct Woken {
    places: Mutex<Vec<usize>>,
    turn: AtomicWaker,
}

/// The waker of one place: queues it (once until the next poll of it) and wakes the turn.
struct PlaceWake {
    place: usize,
    queued: AtomicBool,
    woken: Arc<Woken>,
}

impl Wake for PlaceWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.woken
                .places
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.place);
        }
        self.woken.turn.wake();
    }
}

impl<F: Future> InFlight<F> {
    /// An empty set.
    pub(super) fn new() -> Self {
        Self {
            places: Vec::new(),
            idle: Vec::new(),
            bare: Vec::new(),
            due: Vec::new(),
            woken: Arc::default(),
        }
    }

    /// Adds the batch's write that `write` makes (not polled until the next
    /// [`poll_next`](Self::poll_next)), straight into its slot.
    pub(super) fn push(&mut self, write: impl FnOnce() -> F) {
        let index = match self.idle.pop().or_else(|| self.bare.pop()) {
            Some(index) => index,
            None => {
                let wake = Arc::new(PlaceWake {
                    place: self.places.len(),
                    queued: AtomicBool::new(false),
                    woken: self.woken.clone(),
                });
                self.places.push(Place {
                    slot: None,
                    waker: Waker::from(wake.clone()),
                    wake,
                });
                self.places.len() - 1
            }
        };
        let place = &mut self.places[index];
        place
            .slot
            .get_or_insert_with(|| Box::pin(None))
            .set(Some(write()));
        // Polled in the next call, once: a late wake-up of the place's previous write may
        // have queued it already.
        if !place.wake.queued.swap(true, Ordering::AcqRel) {
            self.due.push(index);
        }
    }

    /// The output of a batch that was answered, if any; its slot is kept for a later batch.
    /// Call until `Pending`, which leaves `cx`'s waker to be woken by the next write that
    /// wakes (a `Ready` may leave queued writes unpolled, and they wake nothing again).
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.woken.turn.register(cx.waker());
        // The queue is taken once per call, before any poll: a write that wakes itself while
        // polled is polled again in the next call (its wake-up woke the turn), never in a
        // loop here.
        {
            let mut woken = self
                .woken
                .places
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if self.due.is_empty() {
                std::mem::swap(&mut self.due, &mut woken);
            } else {
                self.due.append(&mut woken);
            }
        }
        loop {
            let Some(index) = self.due.pop() else {
                return Poll::Pending;
            };
            let place = &mut self.places[index];
            // Before the poll, and a read-modify-write: a wake-up's own swap then either
            // comes after it (and queues the place again) or is read by it (and what the
            // waker's side did before waking, a reply sent, is seen by the poll). A plain
            // store could land after the poll read "no reply yet" and after the wake-up read
            // "queued": the reply would never be polled.
            place.wake.queued.swap(false, Ordering::AcqRel);
            // An empty slot: a late wake-up of a write that ended.
            let Some(slot) = place.slot.as_mut() else {
                continue;
            };
            let Some(write) = slot.as_mut().as_pin_mut() else {
                continue;
            };
            let Poll::Ready(output) = write.poll(&mut Context::from_waker(&place.waker)) else {
                continue;
            };
            // The write's state is dropped in place, where it was pinned.
            slot.set(None);
            if self.idle.len() < KEPT {
                self.idle.push(index);
            } else {
                place.slot = None;
                self.bare.push(index);
            }
            return Poll::Ready(output);
        }
    }

    /// How many slots wait for a later batch.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.len()
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

    /// Polls `set` until `count` writes were answered (or a bound of polls ran: a write that
    /// wakes itself is polled once per call).
    fn drain(set: &mut InFlight<Write>, cx: &mut Context<'_>, count: usize) -> Vec<usize> {
        let mut outputs = Vec::new();
        for _ in 0..100 * count {
            if outputs.len() == count {
                break;
            }
            if let Poll::Ready(output) = set.poll_next(cx) {
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
        assert!(set.poll_next(&mut cx).is_pending());
        set.push(|| Quiet);
        assert!(set.poll_next(&mut cx).is_pending());
        // The write waits for its reply: nothing is due until it wakes the turn.
        assert_eq!(wakes.count(), 0);
    }

    /// A write whose reply comes when the test says: it counts its polls, keeps the waker of
    /// its last poll and ends once `answered` is set.
    #[derive(Clone, Default)]
    struct Awaited {
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
        answered: Arc<AtomicBool>,
    }

    impl Awaited {
        fn answer(&self) {
            self.answered.store(true, Ordering::SeqCst);
            self.wake();
        }

        fn wake(&self) {
            if let Some(waker) = self.waker.lock().unwrap().as_ref() {
                waker.wake_by_ref();
            }
        }

        fn polls(&self) -> usize {
            self.polls.load(Ordering::SeqCst)
        }
    }

    impl Future for Awaited {
        type Output = usize;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.answered.load(Ordering::SeqCst) {
                return Poll::Ready(self.polls());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn a_poll_polls_only_the_writes_woken_since_the_last_and_the_wake_up_reaches_the_turn() {
        let (wakes, waker) = Wakes::counting();
        let mut cx = Context::from_waker(&waker);
        let mut set = InFlight::new();
        let (a, b) = (Awaited::default(), Awaited::default());
        set.push(|| a.clone());
        set.push(|| b.clone());
        assert!(set.poll_next(&mut cx).is_pending());
        assert_eq!((a.polls(), b.polls()), (1, 1), "a new write is polled once");
        assert!(set.poll_next(&mut cx).is_pending());
        assert_eq!((a.polls(), b.polls()), (1, 1), "no write woke: none polled");
        assert_eq!(wakes.count(), 0);
        b.answer();
        assert_eq!(wakes.count(), 1, "a write's wake-up wakes the turn");
        assert_eq!(set.poll_next(&mut cx), Poll::Ready(2));
        assert!(set.poll_next(&mut cx).is_pending());
        assert_eq!(a.polls(), 1, "the write that did not wake is not polled");
        a.answer();
        assert_eq!(set.poll_next(&mut cx), Poll::Ready(2));
        assert_eq!(set.idle(), 2);
    }

    #[test]
    fn a_write_that_wakes_itself_is_polled_once_per_poll_and_wakes_the_turn() {
        let (wakes, waker) = Wakes::counting();
        let mut cx = Context::from_waker(&waker);
        let mut set = InFlight::new();
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        set.push(move || {
            std::future::poll_fn(move |cx: &mut Context<'_>| {
                counted.fetch_add(1, Ordering::SeqCst);
                cx.waker().wake_by_ref();
                Poll::<usize>::Pending
            })
        });
        for poll in 1..=3 {
            assert!(set.poll_next(&mut cx).is_pending());
            assert_eq!(polls.load(Ordering::SeqCst), poll);
            assert_eq!(wakes.count(), poll, "each wake-up reaches the turn");
        }
    }

    /// A set whose one write was answered (its place now idle), and that write.
    fn one_answered(cx: &mut Context<'_>) -> (InFlight<Awaited>, Awaited) {
        let mut set = InFlight::new();
        let first = Awaited::default();
        set.push(|| first.clone());
        assert!(set.poll_next(cx).is_pending());
        first.answer();
        assert_eq!(set.poll_next(cx), Poll::Ready(2));
        (set, first)
    }

    #[test]
    fn a_place_queued_by_a_late_wake_up_and_then_reused_is_polled_once() {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut set, first) = one_answered(&mut cx);
        // A late wake-up queues the place; a new write fills it before the next poll.
        first.wake();
        let next = Awaited::default();
        set.push(|| next.clone());
        assert!(set.poll_next(&mut cx).is_pending());
        assert_eq!(next.polls(), 1, "queued once, polled once");
    }

    #[test]
    fn a_wake_up_of_an_ended_write_polls_nothing_and_its_slot_serves_the_next() {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut set, first) = one_answered(&mut cx);
        // A late wake-up of the write that ended (a waker clone kept elsewhere).
        first.wake();
        assert!(set.poll_next(&mut cx).is_pending());
        assert_eq!(first.polls(), 2, "an ended write is never polled again");
        let next = Awaited::default();
        set.push(|| next.clone());
        assert_eq!(set.idle(), 0, "the slot serves the next batch");
        assert!(set.poll_next(&mut cx).is_pending());
        next.answer();
        assert_eq!(set.poll_next(&mut cx), Poll::Ready(2));
    }
}
