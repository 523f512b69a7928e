//! Who runs the driver's turn: a caller waiting for its answer, on its own task, or else the
//! driver's task. A lock call on an idle client thus travels caller → node → caller, as a bare
//! `redis` call does, instead of waking the driver's task and being woken back by it.
//!
//! The turn ([`Core::turn`]) is one function behind one mutex: whoever holds the mutex is the
//! driver for that turn, so one place still holds every lock's state, and the per-node FIFO and
//! the batching are the multiplexer's as before.
//!
//! # Who runs it
//! A call made while no other answer waits (a sequential caller) is sent by its caller, in a
//! turn run at once (every operation is sent when it is called), without waking anyone; the
//! caller runs the turns that follow when it polls the answer: it becomes the *owner* (a poll
//! that finds no wake-up since the last turn, a turn that polled the sources with the owner's
//! wakers, runs none). A
//! call made while another answer waits (many callers at once) wakes the driver's task, whose
//! one turn carries every call queued meanwhile in one write per node, as before (the task
//! yields once to the runtime first, so that the callers ready to run queue theirs: see
//! [`super::driver`]'s task). A caller on
//! another runtime never runs the turn: the driver's timers and connections belong to its
//! runtime.
//!
//! # Wake-ups
//! The release notices wake whoever polled them last: polled in a caller's turn, the owner
//! (while it is the only caller waiting; else, and once it left, the driver's task); polled
//! in the driver task's turn, the driver's task. The replies wake the owner once it has
//! polled its answer and while it is the only caller waiting, and the driver's task while
//! work no caller waits for (an auto-extension, a dropped handle's release, an abandoned
//! acquisition) is in flight or queued, or no timer is set; while no caller waits at all they
//! wake no one, and the next turn takes them (see [`Target::Settle`]). The timer and posted
//! calls (a dropped handle's release) always wake the driver's task. Each wake-up first marks
//! the work undone; whoever finishes a turn looks at the mark after letting go of the mutex
//! and runs again if it is set, and an answer that stops waiting runs the work left undone (or
//! wakes the driver's task for it), so no wake-up is lost to a runner that had already polled
//! its source or to a caller on its way out.
//!
//! # What it never does
//! It never makes an operation depend on a caller. A dropped answer, or one a blocking caller
//! waits for, hands the turn's sources to the driver's task; so does a call whose caller has
//! not polled its answer yet, for each reply. Work no caller waits for wakes the driver's
//! task alone (`a_caller_that_stops_polling_midway_stalls_no_lock` holds an auto-extended lock
//! through five TTLs beside a caller that polled once and set its future aside; with replies
//! routed to the owner alone it was lost). What such a set-aside owner holds back is its own
//! operation: its replies wait for its next poll or for a turn the timer starts (while a lock
//! runs, a timer is set for at most [`SUSPEND_CHECK`](crate::driver::SUSPEND_CHECK) ahead: the
//! next deadline or the suspend check; with no lock, the next deadline, a released channel's
//! linger included), and a reply handed in at or after its request's
//! deadline counts as a timeout even if it came in time: the set-aside operation may fail a
//! vote as at a slow node (an acquisition then retries). A panic inside a turn ends the
//! driver, as a panicking driver task did.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::task::{Wake, Waker};

use futures_util::task::AtomicWaker;

use super::driver::{Core, Flow, Written};
use super::runtime::Runtime;
use crate::Call;
use crate::answer::Turn;

/// How many turns one poll runs at most while wake-ups keep coming.
const ROUNDS: usize = 4;

/// How a poll of the driver's task ended ([`Driven::poll_task`]).
pub(crate) enum TaskPoll {
    /// The driver ended.
    Ended,
    /// Its turns left work undone and it woke itself for it: like any task woken during its
    /// own poll, every runtime queues it behind the tasks already ready, so it has already
    /// given way to them.
    GaveWay,
    /// Nothing undone: it waits for a wake-up.
    Waits,
}

/// Where the turn's wake-ups go.
pub(crate) struct Router {
    /// The caller running turns now, by its answer's ticket, and its waker (`None` until its
    /// answer's first poll: a caller that sent its call in a turn of its own is about to poll).
    owner: Mutex<Option<(usize, Option<Waker>)>>,
    /// The driver's task.
    driver: AtomicWaker,
    /// Work is undone: a wake-up came since the last turn started.
    dirty: AtomicBool,
    /// How many answers are outstanding (asked, not yet read or dropped; an answer that came
    /// and is not read yet still counts): a call made while another waits goes to the driver's task, to
    /// share a write with the others; and while another waits, replies wake the driver's task
    /// rather than the owner, so that no waiting caller depends on another caller's polls.
    waiting: AtomicUsize,
    /// Whether replies may wait for the next turn (kept by the turn).
    backstop: Arc<Backstop>,
}

/// What the turn tells its wake-ups about the work in hand: whether a reply a caller's turn
/// polled may wait for the next turn instead of waking someone ([`Target::Settle`]). Kept by
/// each turn under the core's mutex, read by the wake-ups on any thread.
#[derive(Default)]
pub(crate) struct Backstop {
    /// Batches in flight no caller waits for.
    pub(crate) unawaited: AtomicUsize,
    /// At the end of the last turn a timer was set (it starts a turn of the driver's task:
    /// while a lock runs within [`SUSPEND_CHECK`](crate::driver::SUSPEND_CHECK), else at the
    /// next deadline, at most a channel's linger away) and every request queued and not yet
    /// sent was one a caller waits for.
    pub(crate) covered: AtomicBool,
}

impl Backstop {
    /// Whether replies may wait: nothing in flight or queued that no caller waits for, and a
    /// timer that starts a turn if no caller does.
    fn lets_wait(&self) -> bool {
        self.unawaited.load(Ordering::SeqCst) == 0 && self.covered.load(Ordering::SeqCst)
    }
}

impl Router {
    fn owner(&self) -> MutexGuard<'_, Option<(usize, Option<Waker>)>> {
        self.owner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the work undone. The fence pairs with [`is_dirty`](Router::is_dirty)'s: a
    /// runner that lets go of the mutex and then finds no mark was not yet unlocked when the
    /// marker tried it (and the marker's wake-up, or that runner's next round, takes the work).
    fn mark(&self) {
        self.dirty.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    fn is_dirty(&self) -> bool {
        fence(Ordering::SeqCst);
        self.dirty.load(Ordering::SeqCst)
    }

    /// Marks the work undone and wakes the driver's task.
    pub(crate) fn wake_driver(&self) {
        self.mark();
        self.driver.wake();
    }

    /// Marks the work undone and wakes the owner if it is the only caller waiting and has
    /// polled its answer, or else the driver's task; with `settle` (see [`Target::Settle`]),
    /// the driver's task while background work is in flight or queued or no timer is set, and
    /// no one while no caller waits.
    fn wake_owner(&self, settle: bool) {
        self.mark();
        let waiting = self.waiting.load(Ordering::SeqCst);
        if settle {
            if !self.backstop.lets_wait() {
                self.driver.wake();
                return;
            }
            if waiting == 0 {
                return;
            }
        }
        let owner = if waiting <= 1 {
            self.owner().as_ref().map(|(_, waker)| waker.clone())
        } else {
            None
        };
        match owner {
            Some(Some(owner)) => owner.wake(),
            _ => self.driver.wake(),
        }
    }
}

/// Whom a source's wake-up goes to.
#[derive(Clone, Copy)]
enum Target {
    /// The driver's task: the timer, and whatever the driver task's turn polled.
    Driver,
    /// The owner while it is the only caller waiting, else the driver's task: release notices
    /// a caller's turn polled.
    Owner,
    /// The replies, polled in a caller's turn or in a turn of the driver's task while an
    /// owner waits: as [`Owner`](Target::Owner) while a timer is set and nothing in flight or
    /// queued is work no caller waits for ([`Backstop`]), else the driver's task; and no one
    /// while no caller waits. Those replies are the late ones of operations already answered
    /// (a round decided at its quorum): the next turn takes them, whoever runs it, at the
    /// latest the one that timer starts; counted late they change nothing but the node's
    /// queue. A caller's replies that come before it first polls its answer wake the driver's
    /// task, whose turn polls them again this way, so the owner takes the rest once it polls:
    /// one hand-off at most per call instead of every reply's
    /// (`an_extension_never_polled_still_moves_the_validity` holds the call that is never
    /// polled).
    Settle,
}

/// A waker of the turn's sources: to the owner (replies and notices polled by a caller), or
/// to the driver's task (the timer, and whatever the driver's task polled).
struct Route {
    router: Arc<Router>,
    to: Target,
}

impl Wake for Route {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self.to {
            Target::Driver => self.router.wake_driver(),
            Target::Owner => self.router.wake_owner(false),
            Target::Settle => self.router.wake_owner(true),
        }
    }
}

/// The wakers one runner's turn polls the replies and the notices with.
pub(crate) struct Polls {
    pub(crate) replies: Waker,
    pub(crate) notices: Waker,
}

/// The wakers of a driver's turns.
pub(crate) struct Wakers {
    /// A caller's turn.
    by_owner: Polls,
    /// The driver task's turn.
    by_driver: Polls,
    /// The driver task's turn while an owner waits: its replies settle, its notices wake the
    /// driver's task.
    by_driver_for_owner: Polls,
    /// The timer's (whoever runs the turn).
    pub(crate) timer: Waker,
}

impl Wakers {
    fn new(router: &Arc<Router>) -> Self {
        let route = |to| {
            Waker::from(Arc::new(Route {
                router: router.clone(),
                to,
            }))
        };
        Self {
            by_owner: Polls {
                replies: route(Target::Settle),
                notices: route(Target::Owner),
            },
            by_driver: Polls {
                replies: route(Target::Driver),
                notices: route(Target::Driver),
            },
            by_driver_for_owner: Polls {
                replies: route(Target::Settle),
                notices: route(Target::Driver),
            },
            timer: route(Target::Driver),
        }
    }
}

/// The calls not yet taken by a turn; closed (and emptied) once the driver ended.
#[derive(Default)]
pub(crate) struct Calls {
    queue: Mutex<(VecDeque<Call>, bool)>,
}

impl Calls {
    fn queue(&self) -> MutexGuard<'_, (VecDeque<Call>, bool)> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `call`; whether it was queued. Once the driver ended, `call` is dropped (outside
    /// the lock: its answer slot then tells its caller that no answer will come).
    fn push(&self, call: Call) -> bool {
        let refused = {
            let mut queue = self.queue();
            if queue.1 {
                Some(call)
            } else {
                queue.0.push_back(call);
                None
            }
        };
        refused.is_none()
    }

    /// The next call, oldest first.
    pub(crate) fn pop(&self) -> Option<Call> {
        self.queue().0.pop_front()
    }

    /// Refuses every later call and hands back those queued (dropped by the caller, outside
    /// the lock: their answer slots then tell their callers that no answer will come).
    fn close(&self) -> VecDeque<Call> {
        let mut queue = self.queue();
        queue.1 = true;
        std::mem::take(&mut queue.0)
    }

    fn is_closed(&self) -> bool {
        self.queue().1
    }
}

/// A client's driver: its state behind the turn's mutex, its calls and its wake-ups.
pub(crate) struct Driven<R: Runtime, F: Future> {
    runtime: R,
    router: Arc<Router>,
    wakers: Wakers,
    calls: Calls,
    /// `None` once the driver ended.
    core: Mutex<Option<Core<R, F>>>,
    /// The last turn polled the sources with the owner's wakers ([`Wakers::by_owner`]): their
    /// wake-ups go where [`Target`] says, looking up the owner when they come (the owner while
    /// it is the only caller waiting and has a waker; else the driver's task). Written at the
    /// start of each turn, under the core's mutex; read by [`enter`](Turn::enter) without it,
    /// so possibly a turn late: a stale `true` read while the driver's task runs a turn costs
    /// at most a hop through that task (its sources then wake it), never a wake-up.
    owner_routes: AtomicBool,
}

impl<R: Runtime, F> Driven<R, F>
where
    F: Future<Output = Written> + Send + 'static,
{
    /// A driver on `runtime`, its core to come ([`install`](Driven::install)).
    pub(crate) fn new(runtime: R) -> Self {
        let router = Arc::new(Router {
            owner: Mutex::new(None),
            driver: AtomicWaker::new(),
            dirty: AtomicBool::new(true),
            waiting: AtomicUsize::new(0),
            backstop: Arc::default(),
        });
        Self {
            runtime,
            wakers: Wakers::new(&router),
            router,
            calls: Calls::default(),
            core: Mutex::new(None),
            owner_routes: AtomicBool::new(false),
        }
    }

    /// What the core tells the wake-ups (see [`Backstop`]).
    pub(crate) fn backstop(&self) -> Arc<Backstop> {
        self.router.backstop.clone()
    }

    /// Puts the driver's state in place (once, before its task starts).
    pub(crate) fn install(&self, core: Core<R, F>) {
        *self.lock_core() = Some(core);
    }

    fn lock_core(&self) -> MutexGuard<'_, Option<Core<R, F>>> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `call` and wakes the driver's task (a call no answer waits for: a dropped
    /// handle's release, an abandoned acquisition).
    pub(crate) fn post(&self, call: Call) {
        if self.calls.push(call) {
            self.router.wake_driver();
        }
    }

    /// Whether the driver ended (its runtime shut down, or the client and every lock are gone).
    pub(crate) fn is_closed(&self) -> bool {
        self.calls.is_closed()
    }

    /// Whether more than one caller waits for an answer: calls are coming in faster than one
    /// at a time, so a turn that waits for the callers ready to run carries more of them.
    pub(crate) fn is_crowded(&self) -> bool {
        self.router.waiting.load(Ordering::Relaxed) > 1
    }

    /// The driver's task: registers itself, runs turns while woken; ends with the driver.
    pub(crate) fn poll_task(&self, waker: &Waker) -> TaskPoll {
        self.router.driver.register(waker);
        // While an owner waits and no background work is about, the replies this turn polls
        // go to the owner once it polls (see `Target::Settle`); else to the driver's task.
        let owned = self.router.owner().is_some() && self.router.backstop.lets_wait();
        let gave_way = self.run(if owned {
            &self.wakers.by_driver_for_owner
        } else {
            &self.wakers.by_driver
        });
        match (self.is_closed(), gave_way) {
            (true, _) => TaskPoll::Ended,
            (false, true) => TaskPoll::GaveWay,
            (false, false) => TaskPoll::Waits,
        }
    }

    /// Runs turns while there is undone work and no one else runs one, at most [`ROUNDS`] in
    /// a row (a source that wakes at once while it returns `Pending`, as tokio's spent
    /// cooperative budget does, would keep the mark set within one poll); work still undone
    /// then goes to the driver's task. Whether it woke the driver's task for work left.
    fn run(&self, polls: &Polls) -> bool {
        for _ in 0..ROUNDS {
            let mut core = match self.core.try_lock() {
                Ok(core) => core,
                // The runner looks at the mark once it lets go.
                Err(TryLockError::WouldBlock) => return false,
                // A turn panicked halfway (on some caller's task): the state may be torn, so
                // the driver ends as a driver task that panicked did (every lock reports its
                // loss, `Error::Stopped`), and the next call starts a new one.
                Err(TryLockError::Poisoned(poisoned)) => {
                    let mut core = poisoned.into_inner();
                    let ended = core.take();
                    drop(core);
                    self.end(ended);
                    return false;
                }
            };
            let Some(turn) = core.as_mut() else {
                return false;
            };
            self.router.dirty.store(false, Ordering::SeqCst);
            let by_owner = std::ptr::eq(polls, &self.wakers.by_owner);
            self.owner_routes.store(by_owner, Ordering::Relaxed);
            match turn.turn(polls, &self.wakers.timer, &self.calls) {
                Flow::Idle => drop(core),
                Flow::Busy => {
                    drop(core);
                    // Others get their turn on the runtime; the driver's task goes on.
                    self.router.wake_driver();
                    return true;
                }
                Flow::Done => {
                    let ended = core.take();
                    drop(core);
                    self.end(ended);
                    return false;
                }
            }
            if !self.router.is_dirty() {
                return false;
            }
        }
        // Still undone (a call queued meanwhile wakes no one): the driver's task goes on.
        self.router.wake_driver();
        true
    }

    /// Ends the driver: later calls are refused, queued ones dropped (their callers learn that
    /// no answer will come), the state dropped (every lock it held reports its loss).
    fn end(&self, core: Option<Core<R, F>>) {
        let calls = self.calls.close();
        drop(calls);
        drop(core);
        self.router.driver.wake();
    }

    /// The driver's task is gone (its runtime shut down): ends the driver.
    pub(crate) fn shut_down(&self) {
        let core = self.lock_core().take();
        self.end(core);
    }
}

impl<R: Runtime, F> Turn for Driven<R, F>
where
    F: Future<Output = Written> + Send + 'static,
{
    fn queue(&self, ticket: usize, call: Call) -> bool {
        let alone = self.router.waiting.fetch_add(1, Ordering::SeqCst) == 0;
        if !self.calls.push(call) {
            return false;
        }
        let runs = alone && self.runtime.is_current();
        if runs {
            // The owner to come: it polls its answer next.
            let replaced = self.router.owner().replace((ticket, None));
            drop(replaced);
            // Sent now, as every operation promises ("sent when this is called"), by the
            // caller: a turn at once. Until the caller polls its answer (and runs the turns
            // then), its replies wake the driver's task (`Target::Settle`).
            self.router.mark();
            self.run(&self.wakers.by_owner);
        } else {
            self.router.wake_driver();
        }
        runs
    }

    fn enter(&self, ticket: usize, waker: &Waker) {
        if !self.runtime.is_current() {
            self.router.wake_driver();
            return;
        }
        let replaced = {
            let mut owner = self.router.owner();
            match &mut *owner {
                Some((owned, Some(registered)))
                    if *owned == ticket && registered.will_wake(waker) =>
                {
                    None
                }
                slot => slot.replace((ticket, Some(waker.clone()))),
            }
        };
        // Dropped outside the lock: a waker's drop may drop a task, and an answer in it.
        drop(replaced);
        // No wake-up since the last turn started (none marked the work undone), and that turn
        // polled the sources with the owner's wakers: a turn now would find nothing new, and
        // the sources' next wake-up goes where `Target` routes it, looking up the owner then
        // (this caller, its waker just registered, while it is the only one waiting; else the
        // driver's task). Else a turn: it takes the work, and routes the sources to the owner.
        // (The first poll after a call sent in its caller's own turn is such a poll: one turn
        // less per call. A turn still running on another runner loops while wake-ups come.)
        if self.router.is_dirty() || !self.owner_routes.load(Ordering::Relaxed) {
            self.run(&self.wakers.by_owner);
        }
    }

    fn leave(&self, ticket: usize, ran: bool, on_task: bool) {
        self.router.waiting.fetch_sub(1, Ordering::SeqCst);
        if !ran {
            return;
        }
        let left = {
            let mut owner = self.router.owner();
            if owner.as_ref().is_some_and(|(owned, _)| *owned == ticket) {
                owner.take()
            } else {
                None
            }
        };
        drop(left);
        if on_task && self.runtime.is_current() {
            if self.router.is_dirty() {
                self.run(&self.wakers.by_owner);
            }
        } else {
            // Dropped unanswered, or waited for by a blocking caller (who runs no turn): the
            // driver's task takes the sources over, so that nothing this caller's turns sent
            // waits for a turn no caller will run.
            self.router.wake_driver();
        }
    }
}
