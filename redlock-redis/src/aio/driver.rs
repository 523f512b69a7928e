//! The client's driver: the state of every lock of the client (in [`DriverState`]), every
//! connection and timer, and the turn that carries calls in, batches out, replies and notices
//! in, and time; every decision is the engine's. The turn runs on the task of a caller waiting
//! for its answer, or on the driver's own task ([`super::turn`] says who and when).
//!
//! # What it never does
//! It never blocks the runtime, never spawns a task per request or per lock (the batches in
//! flight are polled by whoever runs the turn; the only other tasks are the driver's and one
//! release-notice subscriber per node, started on first contention), and holds no lock state
//! outside [`DriverState`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::answer::Turn;
use crate::{Answers, Call, Clock, DriverState, FromSubscriber, Output, Post};
use redlock_core::Batch;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::conn::Node;
use super::in_flight::InFlight;
use super::notices::Notices;
use super::runtime::Runtime;
use super::turn::{Backstop, Calls, Driven, Polls, TaskPoll};

/// How many rounds of inputs one turn handles before it lets the runtime run others.
const BUDGET: usize = 32;

/// How a turn ended.
pub(crate) enum Flow {
    /// Nothing more to do until a wake-up.
    Idle,
    /// Inputs keep coming: the driver's task goes on after the runtime ran others.
    Busy,
    /// The client is gone and every lock is over.
    Done,
}

/// What the driver owns besides the engine: connections, batches in flight, release-notice
/// subscribers and the timer.
pub(crate) struct Core<R, F: Future> {
    state: DriverState,
    nodes: Arc<[Node]>,
    notices: Notices<R>,
    heard: UnboundedReceiver<FromSubscriber>,
    /// Writes a batch to its node, saying whether a caller waits for it; resolves to one reply
    /// per request.
    write: fn(Arc<[Node]>, Batch, bool) -> F,
    /// Each batch in flight.
    in_flight: InFlight<F>,
    /// The replies one round took, handed in together (kept empty between rounds).
    arrived: Vec<Written>,
    /// What the turn tells its wake-ups: batches in flight no caller waits for, and whether a
    /// reply may wait for the next turn.
    backstop: Arc<Backstop>,
    /// The timer and the instant it is set for: set again only for an earlier instant (a
    /// timer that fires early costs a turn that finds nothing due).
    sleep: Option<(Instant, Sleep)>,
}

/// A runtime's timer, boxed (its type is the runtime's own).
type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

impl<R: Runtime, F: Future<Output = Written>> Core<R, F> {
    /// One turn: every queued call, reply, notice and due deadline, until none is left (or
    /// [`BUDGET`] rounds ran). Replies and notices are polled again with the runner's
    /// `polls` (the owner's or the driver task's), the timer with `timer`.
    pub(crate) fn turn(&mut self, polls: &Polls, timer: &Waker, calls: &Calls) -> Flow {
        let flow = self.rounds(polls, timer, calls);
        // Read by the wake-ups until the next turn: replies may wait for it only while a timer
        // is set and nothing queued is background work.
        let covered = self.sleep.is_some() && self.state.queued_are_awaited();
        self.backstop.covered.store(covered, Ordering::SeqCst);
        flow
    }

    /// [`turn`](Core::turn)'s rounds.
    fn rounds(&mut self, polls: &Polls, timer: &Waker, calls: &Calls) -> Flow {
        // Whether the outputs and the timer were polled since the state last changed: a round
        // that then hands in no input ends the turn without polling them again (a deadline that
        // came due meanwhile fires the timer, which starts a turn).
        let mut settled = false;
        for _ in 0..BUDGET {
            let mut changed = false;
            while let Some(call) = calls.pop() {
                let now = self.state.clock().now();
                self.state.handle_call(now, call);
                changed = true;
            }
            // Replies and notices before the outputs: letting a due deadline pass (which
            // `poll_output` does) never fails a request whose reply this turn takes before the
            // deadline. (A reply handed in at or after its deadline counts as a timeout even if
            // it came earlier: the instant it is handed in is the only one known.)
            let mut cx = Context::from_waker(&polls.replies);
            while let Poll::Ready(written) = self.in_flight.poll_next(&mut cx) {
                self.arrived.push(written);
            }
            if !self.arrived.is_empty() {
                // One instant for the replies taken together, read after the last was taken:
                // never earlier than any of them came. A later one only errs on the safe side:
                // a shorter validity, and a reply that came just before its deadline counted
                // as a timeout a little more often (the poll of the others is in it).
                let now = self.state.clock().now();
                for Written { replies, awaited } in self.arrived.drain(..) {
                    if !awaited {
                        self.backstop.unawaited.fetch_sub(1, Ordering::SeqCst);
                    }
                    self.state.handle_replies(now, replies);
                }
                changed = true;
            }
            // No subscriber task was ever started: no notice can come, and none will wake a
            // turn (the round that starts the first one asks for another round, which polls
            // the channel and leaves its waker there).
            let mut cx = Context::from_waker(&polls.notices);
            while self.notices.may_come()
                && let Poll::Ready(Some(heard)) = self.heard.poll_recv(&mut cx)
            {
                tracing::trace!(?heard, "release-notice subscriber");
                let now = self.state.clock().now();
                self.state.handle_heard(now, &heard);
                changed = true;
            }
            if settled && !changed {
                return Flow::Idle;
            }
            let mut sent = false;
            // The first subscriber task started in this round: the channel was never polled.
            let mut listening = false;
            while let Some(output) = self.state.poll_output() {
                match output {
                    Output::Transmit(batch) => {
                        let awaited = self.state.is_awaited(&batch);
                        if !awaited {
                            self.backstop.unawaited.fetch_add(1, Ordering::SeqCst);
                        }
                        let (write, nodes) = (self.write, &self.nodes);
                        self.in_flight.push(|| write(nodes.clone(), batch, awaited));
                        // Written once the next round polls it.
                        sent = true;
                    }
                    Output::Subscription(change, through) => {
                        let state = &self.state;
                        listening |= self.notices.apply(&change, through, || state.channels());
                    }
                    Output::Done => return Flow::Done,
                }
            }
            let fired = self.poll_timer(timer);
            if !(changed || sent || fired || listening) {
                return Flow::Idle;
            }
            settled = !fired;
        }
        Flow::Busy
    }

    /// Sets the timer for the state's next wake-up if that is earlier than the one set; lets
    /// due deadlines pass once it fired. Whether it fired.
    fn poll_timer(&mut self, timer: &Waker) -> bool {
        if let Some(at) = self.state.wake_at()
            && self.sleep.as_ref().is_none_or(|(set, _)| at < *set)
        {
            self.sleep = Some((at, Box::pin(R::sleep_until(at))));
        }
        let Some((_, sleep)) = &mut self.sleep else {
            return false;
        };
        if sleep
            .as_mut()
            .poll(&mut Context::from_waker(timer))
            .is_pending()
        {
            return false;
        }
        self.sleep = None;
        let timeout = self.state.poll_timeout();
        tracing::trace!(reason = ?timeout.map(|t| t.reason), "wake-up");
        let now = self.state.clock().now();
        self.state.handle_timeout(now);
        true
    }
}

/// How calls reach the driver: its queue, and the turn a waiting caller may run.
pub(crate) struct Mailbox(Arc<dyn Inbox>);

/// The driver as the client and the handles see it.
trait Inbox: Turn {
    fn post(&self, call: Call);
    fn is_closed(&self) -> bool;
}

impl<R: Runtime, F> Inbox for Driven<R, F>
where
    F: Future<Output = Written> + Send + 'static,
{
    fn post(&self, call: Call) {
        Driven::post(self, call);
    }

    fn is_closed(&self) -> bool {
        Driven::is_closed(self)
    }
}

impl Mailbox {
    /// Whether the driver is gone (its runtime shut down).
    pub(crate) fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

impl Post for Mailbox {
    fn post(&self, call: Call) {
        // If the driver is gone, the call (and its answer slot) is dropped: the caller learns
        // that no answer will come.
        self.0.post(call);
    }

    fn turn(&self) -> Option<Arc<dyn Turn>> {
        Some(self.0.clone())
    }
}

/// Starts a driver task on `runtime` for `nodes`; returns its mailbox.
pub(crate) fn start<R: Runtime>(
    runtime: R,
    config: redlock_core::Config,
    labels: Arc<[Arc<str>]>,
    nodes: Arc<[Node]>,
    clock: Clock,
) -> Result<Arc<Mailbox>, crate::Error> {
    let driven = Arc::new(Driven::new(runtime.clone()));
    let mailbox = Arc::new(Mailbox(driven.clone()));
    let state = DriverState::new(config, labels, mailbox.clone(), clock)?;
    let (heard_tx, heard) = unbounded_channel();
    let notices = Notices::new(runtime.clone(), nodes.clone(), heard_tx);
    driven.install(Core {
        state,
        nodes,
        notices,
        heard,
        write,
        in_flight: InFlight::new(),
        arrived: Vec::new(),
        backstop: driven.backstop(),
        sleep: None,
    });
    runtime.spawn(run(Ending(driven)));
    Ok(mailbox)
}

/// Ends the driver when dropped: with the driver task's future, whether or not it was ever
/// polled (a runtime shutting down drops a task it never ran).
struct Ending<R: Runtime, F>(Arc<Driven<R, F>>)
where
    F: Future<Output = Written> + Send + 'static;

impl<R: Runtime, F> Drop for Ending<R, F>
where
    F: Future<Output = Written> + Send + 'static,
{
    fn drop(&mut self) {
        self.0.shut_down();
    }
}

/// The driver's task: runs the turns no caller runs; ends with the driver, and ends the driver
/// if the runtime drops it first (shut down).
///
/// Woken while several callers wait ([`Driven::is_crowded`]), it first yields once to the
/// runtime (it wakes itself and returns `Pending`: every runtime queues it again behind the
/// tasks already queued, and polls it at once if there are none), so that the callers the
/// runtime has ready run first
/// and queue their calls; the turn then carries them all in one write per node. Without it, a
/// multi-thread tokio runtime runs the task a caller woke right after that caller (its LIFO
/// slot), and each turn carried few calls (3.7 on average, 64 tasks on one client): those
/// tasks spent half again as much of the client's CPU per cycle, most of it in turns, which
/// only one thread at a time can run. The yield delays no turn past the next poll, and never
/// happens twice in a row: a poll whose own turns left work undone (a turn that ended
/// [`Flow::Busy`], or turns woken again and again) woke the task itself, which queued it behind
/// the others already, so its next poll runs the turn at once.
async fn run<R: Runtime, F>(ending: Ending<R, F>)
where
    F: Future<Output = Written> + Send + 'static,
{
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if !yielded && ending.0.is_crowded() {
            yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match ending.0.poll_task(cx.waker()) {
            TaskPoll::Ended => Poll::Ready(()),
            // Its own wake-up already queued it behind the others: no second yield.
            TaskPoll::GaveWay => {
                yielded = true;
                Poll::Pending
            }
            TaskPoll::Waits => {
                yielded = false;
                Poll::Pending
            }
        }
    })
    .await;
}

/// A batch written and answered: the replies, one per request, and whether a caller waited for
/// it ([`DriverState::is_awaited`], as it was when the batch went out).
pub(crate) struct Written {
    replies: Answers,
    awaited: bool,
}

/// Writes `batch` to its node; the replies, one per request, with `awaited` as it was.
async fn write(nodes: Arc<[Node]>, batch: Batch, awaited: bool) -> Written {
    Written {
        replies: nodes[batch.node].run(&batch.transmits).await,
        awaited,
    }
}
