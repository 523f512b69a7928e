//! A one-shot answer from the driver to a caller, awaited by async code or waited for by
//! blocking code: the same type in every adapter.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::driver::{Call, Post};
use crate::sleepers::Sleepers;
#[cfg(feature = "blocking")]
use std::time::Duration;

struct State<T> {
    value: Option<T>,
    /// The responder is gone (answered or dropped).
    closed: bool,
    /// The answer is gone (dropped unread).
    abandoned: bool,
    waker: Option<Waker>,
}

struct Slot<T> {
    state: Mutex<State<T>>,
    /// A blocking caller sleeps here until the answer comes.
    ready: Sleepers,
}

impl<T> Slot<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The driver's end: answers once, or, dropped unanswered, tells the caller that no answer
/// will come.
pub(crate) struct Responder<T> {
    slot: Arc<Slot<T>>,
}

/// The caller's end: `.await` it, or [`wait`](Answer::wait) for it. `None` means the driver
/// stopped without answering. Dropping it unread drops the answer when it comes (a lock handle
/// in it then releases its lock as any dropped handle does).
pub(crate) struct Answer<T> {
    slot: Arc<Slot<T>>,
    /// The driver's turn, until this answer came or stopped being waited for.
    turn: Option<Arc<dyn Turn>>,
    /// This answer's caller runs the turn.
    runs: bool,
}

impl<T> std::fmt::Debug for Answer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer").finish_non_exhaustive()
    }
}

/// A driver whose turn the caller waiting for an answer may run on its own task (the async
/// driver, [`crate::aio`]), instead of waking the driver's task and being woken back by it. The
/// blocking driver has none.
///
/// # What it never does
/// It never lets an operation depend on the caller: a call it queued runs whether its answer
/// is polled, dropped, or polled on another runtime (the driver's task then runs it).
pub(crate) trait Turn: Send + Sync {
    /// Queues `call`, whose answer (`ticket`) then waits until [`leave`](Turn::leave), and
    /// sends it now.
    /// When no other answer waits and the caller is on the driver's runtime, the caller runs
    /// the turn at once and says so (`true`): the answer runs the turns that follow when
    /// polled. Otherwise it wakes the driver's task, whose one turn carries every call queued
    /// meanwhile in one write per node (many callers at once keep their pipelines).
    fn queue(&self, ticket: usize, call: Call) -> bool;

    /// Runs the driver's turn on the calling task if it may (on the driver's runtime, and no
    /// one runs it now) and there is a reason to (a wake-up marked work undone since the last
    /// turn started, or that turn polled the sources with other wakers than the owner's), and
    /// has `waker` woken by the replies and notices that come until [`leave`](Turn::leave);
    /// elsewhere it wakes the driver's task.
    fn enter(&self, ticket: usize, waker: &Waker);

    /// Caller `ticket` stops waiting. One that ran turns (`ran`) and stops inside its poll with
    /// its answer read (`on_task`, on the driver's runtime) runs the work left undone now; one
    /// that stops otherwise (its answer dropped unread, or waited for by a blocking caller)
    /// hands the turn's sources to the driver's task.
    fn leave(&self, ticket: usize, ran: bool, on_task: bool);
}

/// Sends `driver` the call `make` builds around a responder; the answer to it. On an idle
/// driver with a [`Turn`], the caller runs the turn that carries the call when it polls the
/// answer.
pub(crate) fn ask<T>(driver: &dyn Post, make: impl FnOnce(Responder<T>) -> Call) -> Answer<T> {
    let (responder, mut answer) = answer();
    let call = make(responder);
    match driver.turn() {
        Some(turn) => {
            answer.runs = turn.queue(answer.ticket(), call);
            answer.turn = Some(turn);
        }
        None => driver.post(call),
    }
    answer
}

/// A responder and its answer.
pub(crate) fn answer<T>() -> (Responder<T>, Answer<T>) {
    let slot = Arc::new(Slot {
        state: Mutex::new(State {
            value: None,
            closed: false,
            abandoned: false,
            waker: None,
        }),
        ready: Sleepers::default(),
    });
    (
        Responder { slot: slot.clone() },
        Answer {
            slot,
            turn: None,
            runs: false,
        },
    )
}

impl<T> Responder<T> {
    /// Answers; gives the value back if nobody waits for it any more.
    pub(crate) fn send(self, value: T) -> Result<(), T> {
        let mut state = self.slot.state();
        if state.abandoned {
            return Err(value);
        }
        state.value = Some(value);
        Ok(())
        // Drop wakes the caller.
    }

    /// Whether the caller dropped its answer.
    #[cfg(all(test, feature = "blocking"))]
    fn is_abandoned(&self) -> bool {
        self.slot.state().abandoned
    }
}

impl<T> Drop for Responder<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.slot.state();
            state.closed = true;
            state.waker.take()
        };
        self.slot.ready.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Answer<T> {
    /// This answer among those waiting at once (its slot's address, alive while it waits).
    fn ticket(&self) -> usize {
        Arc::as_ptr(&self.slot).cast::<()>() as usize
    }

    /// Stops running the driver's turn (see [`Turn::leave`]).
    fn leave(&mut self, on_task: bool) {
        if let Some(turn) = self.turn.take() {
            turn.leave(self.ticket(), self.runs, on_task);
        }
    }

    /// The answer if it came (`Some(None)`: the driver stopped), else registers `waker`
    /// (`taken`, the one registered before, if it wakes the same task).
    fn settled(&self, waker: &Waker, taken: Option<Waker>) -> Option<Option<T>> {
        let mut state = self.slot.state();
        if state.closed {
            return Some(state.value.take());
        }
        let taken = taken.filter(|taken| taken.will_wake(waker));
        match &mut state.waker {
            Some(registered) if registered.will_wake(waker) => {}
            slot => *slot = Some(taken.unwrap_or_else(|| waker.clone())),
        }
        None
    }

    /// Blocks the calling thread until the answer comes; `None` if the driver stopped first.
    #[cfg(feature = "blocking")]
    pub(crate) fn wait(mut self) -> Option<T> {
        self.leave(false);
        let mut state = self.slot.state();
        while !state.closed {
            state = self.slot.ready.wait(state);
        }
        state.value.take()
    }

    /// Blocks at most `timeout`; gives the answer back unread if it has not come by then.
    #[cfg(feature = "blocking")]
    pub(crate) fn wait_timeout(mut self, timeout: Duration) -> Result<Option<T>, Self> {
        self.leave(false);
        {
            let mut state = self
                .slot
                .ready
                .wait_timeout_while(self.slot.state(), timeout, |s| !s.closed);
            if state.closed {
                return Ok(state.value.take());
            }
        }
        Err(self)
    }
}

impl<T> Future for Answer<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut taken = None;
        if self.runs
            && let Some(turn) = &self.turn
        {
            // Read, and the slot's lock let go, before the turn: the turn may answer this
            // slot. A caller about to run the turn takes its waker out of the slot first: an
            // answer its own turn brings then wakes no one. (Left in, it woke this very task
            // while it ran: on tokio's multi-thread runtime a task woken while it runs is
            // queued again behind the others, and the other worker is unparked to steal it —
            // a wasted turn and a move to another thread, after every answer but the first
            // poll's.) A caller that never runs turns (`runs` false) takes the slot's lock
            // once, in `settled`.
            let open = {
                let mut state = self.slot.state();
                if !state.closed {
                    taken = state.waker.take();
                }
                !state.closed
            };
            if open {
                // The turn first, the waker after: an answer this turn brings wakes no one,
                // and one that comes later (another thread's turn) finds the waker, which
                // `settled` registers under the slot's lock — or `settled` finds the answer
                // there.
                turn.enter(self.ticket(), cx.waker());
            }
        }
        match self.settled(cx.waker(), taken) {
            Some(value) => {
                self.leave(true);
                Poll::Ready(value)
            }
            None => Poll::Pending,
        }
    }
}

impl<T> Drop for Answer<T> {
    fn drop(&mut self) {
        let value = {
            let mut state = self.slot.state();
            state.abandoned = true;
            state.value.take()
        };
        // After abandoning: an answer the driver's task brings now is refused at once.
        self.leave(false);
        // Dropped outside the lock: a lock handle's drop posts its release.
        drop(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wakes::Wakes;
    use std::sync::atomic::{AtomicUsize, Ordering};

    // The blocking waits are the blocking client's.
    #[cfg(feature = "blocking")]
    #[test]
    fn an_answer_reaches_a_blocking_and_an_async_caller() {
        let (tx, rx) = answer();
        let waiter = std::thread::spawn(move || rx.wait());
        tx.send(7).expect("someone waits");
        assert_eq!(waiter.join().expect("no panic"), Some(7));

        let (tx, rx) = answer::<u8>();
        let mut rx = Box::pin(rx);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(rx.as_mut().poll(&mut cx).is_pending());
        tx.send(3).expect("someone waits");
        assert_eq!(rx.as_mut().poll(&mut cx), Poll::Ready(Some(3)));
    }

    #[cfg(feature = "blocking")]
    #[test]
    fn a_dropped_responder_means_no_answer_and_a_dropped_answer_refuses_the_value() {
        let (tx, rx) = answer::<u8>();
        drop(tx);
        assert_eq!(rx.wait(), None);

        let (tx, rx) = answer::<u8>();
        drop(rx);
        assert!(tx.is_abandoned());
        assert_eq!(tx.send(1), Err(1));

        let (_tx, rx) = answer::<u8>();
        assert!(rx.wait_timeout(Duration::from_millis(1)).is_err());
    }

    /// A turn that answers on its `answers_on`-th entry (0-based), as a caller's own turn
    /// bringing its answer does.
    struct Answering {
        responder: Mutex<Option<Responder<u8>>>,
        entered: AtomicUsize,
        answers_on: usize,
    }

    impl Turn for Answering {
        fn queue(&self, _: usize, _: Call) -> bool {
            true
        }

        fn enter(&self, _: usize, _: &Waker) {
            if self.entered.fetch_add(1, Ordering::SeqCst) == self.answers_on
                && let Some(responder) = self.responder.lock().ok().and_then(|mut r| r.take())
            {
                let _ = responder.send(7);
            }
        }

        fn leave(&self, _: usize, _: bool, _: bool) {}
    }

    /// An answer whose caller runs the turn, the turn answering on entry `answers_on`; the
    /// responder too when the turn never answers.
    fn running(answers_on: usize) -> (Answer<u8>, Option<Responder<u8>>) {
        let (responder, mut answer) = answer();
        let (kept, given) = match answers_on {
            usize::MAX => (Some(responder), None),
            _ => (None, Some(responder)),
        };
        answer.turn = Some(Arc::new(Answering {
            responder: Mutex::new(given),
            entered: AtomicUsize::new(0),
            answers_on,
        }));
        answer.runs = true;
        (answer, kept)
    }

    #[test]
    fn an_answer_the_callers_own_turn_brings_wakes_no_one() {
        let (wakes, waker) = Wakes::counting();
        let mut cx = Context::from_waker(&waker);
        // The first poll registers the waker; the second poll's turn brings the answer.
        let (mut answer, _) = running(1);
        assert!(Pin::new(&mut answer).poll(&mut cx).is_pending());
        assert_eq!(Pin::new(&mut answer).poll(&mut cx), Poll::Ready(Some(7)));
        assert_eq!(wakes.count(), 0, "woken by its own turn");
    }

    #[test]
    fn an_answer_that_comes_between_polls_wakes_the_caller() {
        let (wakes, waker) = Wakes::counting();
        let mut cx = Context::from_waker(&waker);
        let (mut answer, responder) = running(usize::MAX);
        // Twice: the waker taken out for the second poll's turn is registered again.
        assert!(Pin::new(&mut answer).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut answer).poll(&mut cx).is_pending());
        let _ = responder.expect("kept").send(9);
        assert_eq!(wakes.count(), 1);
        assert_eq!(Pin::new(&mut answer).poll(&mut cx), Poll::Ready(Some(9)));
    }
}
