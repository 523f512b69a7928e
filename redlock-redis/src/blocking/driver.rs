//! The client's driver: the state of every lock of the client (in [`DriverState`]) behind a
//! mutex, a queue of the inputs that reach it — calls, the node workers' replies, release
//! notices — and one thread that keeps the deadlines. Every decision is the engine's.
//!
//! Whoever brings an input steps the state itself, on its own thread, without a hop through
//! the driver thread (the threads floor's caller hands its command to the node threads
//! itself, and each node thread hands its reply straight back): it queues the input, and if
//! the state's mutex is free, takes it and steps the queued inputs in order, then writes the
//! batches they made. One that finds the mutex held leaves its input to the holder, which looks
//! at the queue again before letting go of the mutex, under the queue's lock. A caller's answer
//! comes from the thread that stepped the input that decided it (alone, the node worker whose
//! reply made the quorum). Inputs are stepped in the order they were queued: one caller's calls, and one
//! node's replies, in the order they came. Under concurrency a holder steps everyone's inputs
//! at once, with one batch per node for all of them. A pass steps at most the inputs queued
//! when it began, and a thread makes at most [`PASSES`] of them: then it hands the queue to
//! the driver thread (the only time an input waits for a wake-up), so that no caller or node
//! worker does the others' work for long.
//!
//! The driver thread sleeps until the next deadline, or until a step moved it earlier.
//!
//! # What it never does
//! It never waits on a socket: each node's worker does, so a slow or dead node never holds up a
//! decision the other nodes settled, nor delays anything past the engine's per-node deadline.
//! It holds no lock state outside [`DriverState`], and there is no async runtime in it. A
//! caller or a worker never waits for the state's mutex, no thread holds it while reading or
//! writing a socket or waiting for another thread, and a panic in the driver's code on a
//! caller's or a worker's thread never reaches that thread's code: it ends the driver, as a
//! panicking driver thread does.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

use crate::Answers;
use crate::{Call, Clock, DriverState, Error, NodeAddr, Output, Post};

use super::conn::Worker;
use super::notices::Notices;

/// What reaches the driver's state.
pub(crate) enum Input {
    /// From a handle or the client.
    Call(Call),
    /// A node worker's replies to a batch.
    Replies(Answers),
    /// A release-notice subscriber's notice or confirmation.
    Heard(crate::FromSubscriber),
}

/// How many times a thread that queued an input steps what is queued before it hands the rest
/// to the driver thread.
const PASSES: usize = 4;

/// The driver's state and what its outputs go to.
struct Core {
    state: DriverState,
    workers: Vec<Worker>,
    notices: Notices,
    /// When the driver thread wakes if the bell does not ring first (`Instant::now()`'s
    /// timeline; `None`: only on the bell).
    sleeps_until: Option<Instant>,
    /// The inputs of the pass under way, taken from the queue all at once (the queue keeps
    /// this one's emptied buffer in exchange). Left here by a panic, they go with the core,
    /// dropped after the mutexes are let go of.
    stepping: VecDeque<Input>,
}

impl Core {
    /// Takes every queued input in one hold of the queue's lock (`queue`, let go of before
    /// any is stepped) and steps them in order: what is queued meanwhile waits for the next
    /// pass.
    fn take_in(&mut self, mut queue: MutexGuard<'_, Queue>) {
        std::mem::swap(&mut queue.inputs, &mut self.stepping);
        drop(queue);
        while let Some(input) = self.stepping.pop_front() {
            self.handle(input);
        }
    }

    fn handle(&mut self, input: Input) {
        let state = &mut self.state;
        let now = state.clock().now();
        match input {
            Input::Call(call) => state.handle_call(now, call),
            Input::Replies(replies) => state.handle_replies(now, replies),
            Input::Heard(heard) => state.handle_heard(now, &heard),
        }
    }

    /// Sends every output of the state (a deadline that is due passes first); whether the
    /// driver may end (every lock over).
    fn emit(&mut self, mailbox: &Mailbox) -> bool {
        while let Some(output) = self.state.poll_output() {
            match output {
                Output::Transmit(batch) => self.workers[batch.node].send(batch, mailbox),
                Output::Subscription(change, through) => {
                    let state = &self.state;
                    self.notices.apply(&change, through, || state.channels());
                }
                Output::Done => return true,
            }
        }
        false
    }

    /// Whether the state's next wake-up is earlier than the one the driver thread sleeps until.
    fn wakes_earlier(&self) -> bool {
        match (self.state.wake_at(), self.sleeps_until) {
            (Some(wake), Some(until)) => wake < until,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// The inputs not stepped yet, and the driver thread's bell.
#[derive(Default)]
struct Queue {
    inputs: VecDeque<Input>,
    /// The driver thread must look: a step moved the next deadline earlier, the driver may
    /// end, or inputs were left to it.
    rung: bool,
    /// The driver ended: inputs are refused.
    ended: bool,
    /// Tests only: the driver thread sleeps (until the bell or its deadline).
    #[cfg(test)]
    asleep: bool,
}

/// Where inputs reach the driver's state, and the state itself.
pub(crate) struct Mailbox {
    queue: Mutex<Queue>,
    /// Wakes the driver thread (with [`Queue::rung`]).
    bell: Condvar,
    /// `None` before the driver starts and once it ended.
    core: Mutex<Option<Core>>,
    /// Tests only: run once by the next step, after it took the queued inputs, before it lets
    /// go of the state.
    #[cfg(test)]
    pub(super) during_step: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Mailbox {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding it: a poisoned queue is still whole.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The core, for the driver thread (which may wait for it), ending the driver if a panic
    /// left it half-changed (every holder then learns it lost its lock).
    fn lock(&self) -> MutexGuard<'_, Option<Core>> {
        match self.core.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                self.end(poisoned.into_inner());
                self.core.lock().unwrap_or_else(PoisonError::into_inner)
            }
        }
    }

    /// Ends the driver: takes the core out of `guard` and the queued inputs out of the queue,
    /// and drops them after letting go of both mutexes (dropping the state tells every holder,
    /// and a dropped lock queues its release: neither may meet a mutex held); tells the driver
    /// thread, which then ends. Inputs queued later are refused.
    fn end(&self, mut guard: MutexGuard<'_, Option<Core>>) {
        let ended = guard.take();
        self.core.clear_poison();
        drop(guard);
        let left = {
            let mut queue = self.queue();
            queue.ended = true;
            queue.rung = true;
            std::mem::take(&mut queue.inputs)
        };
        self.bell.notify_one();
        drop(left);
        drop(ended);
    }

    /// Tests only: whether the driver thread sleeps, nothing is queued and no thread steps the
    /// state. Tries the state's mutex under the queue's, so that no input is queued meanwhile
    /// (one queued after finds the state's mutex free).
    #[cfg(test)]
    pub(super) fn is_idle(&self) -> bool {
        let queue = self.queue();
        queue.asleep && queue.inputs.is_empty() && self.core.try_lock().is_ok()
    }

    /// Queues `input` and steps the state if no other thread does; `false` (and the input
    /// dropped) if the driver ended.
    pub(super) fn push(&self, input: Input) -> bool {
        let mut queue = self.queue();
        if queue.ended {
            drop(queue);
            // Dropped with no mutex held: a lock in it may queue its release.
            drop(input);
            return false;
        }
        queue.inputs.push_back(input);
        self.combine(queue);
        true
    }

    /// Steps the queued inputs if the state's mutex is free, at most [`PASSES`] passes, each
    /// of the inputs queued when it began; inputs still queued after the last pass go to the
    /// driver thread. `queue` is the queue's lock, held since the caller's input was queued.
    ///
    /// The state's mutex is tried, and let go of, only under the queue's lock: a thread that
    /// finds it held has queued its input before, and the holder sees that input before it
    /// lets go. So no input is ever left with no thread to step it, at two holds of the
    /// queue's lock per pass (taking the inputs, looking for more).
    fn combine<'a>(&'a self, mut queue: MutexGuard<'a, Queue>) {
        let mut guard = match self.core.try_lock() {
            Ok(guard) => guard,
            // Held (by another thread, or by this very thread: an input queued from
            // inside a step — a lock dropped there): the holder steps it.
            Err(TryLockError::WouldBlock) => return,
            Err(TryLockError::Poisoned(poisoned)) => {
                drop(queue);
                return self.end(poisoned.into_inner());
            }
        };
        let mut look = false;
        for _ in 0..PASSES {
            let Some((stepped, rung)) = self.step(guard, queue) else {
                return;
            };
            (guard, look) = (stepped, look || rung);
            queue = self.queue();
            if queue.inputs.is_empty() {
                break;
            }
        }
        // Inputs left after the last pass are the driver thread's.
        look |= !queue.inputs.is_empty();
        drop(guard);
        if look {
            queue.rung = true;
            drop(queue);
            self.bell.notify_one();
        }
    }

    /// Steps the inputs queued when it began (taken under `queue`, let go of before any is
    /// stepped) on the core `guard` holds, in order, then writes the batches they made.
    /// Returns the guard, and whether the driver thread must look again; `None` once the
    /// driver ended. A panic in it (this crate's bug) ends the driver, as one on the driver
    /// thread does, and never reaches this thread's code: it may be a lock's `drop`, in a
    /// thread already unwinding.
    fn step<'a>(
        &'a self,
        mut guard: MutexGuard<'a, Option<Core>>,
        queue: MutexGuard<'_, Queue>,
    ) -> Option<(MutexGuard<'a, Option<Core>>, bool)> {
        // Ended: the ending took the queue.
        let core = guard.as_mut()?;
        let stepped = catch_unwind(AssertUnwindSafe(|| {
            core.take_in(queue);
            #[cfg(test)]
            if let Some(during) = self.during_step.lock().ok().and_then(|mut d| d.take()) {
                during();
            }
            core.emit(self) || core.wakes_earlier()
        }));
        match stepped {
            Ok(look) => Some((guard, look)),
            Err(_) => {
                self.end(guard);
                tracing::error!("the driver panicked outside its thread: it ended");
                None
            }
        }
    }

    /// The driver thread's sleep: until the bell rings, or `wake` (`None`: only the bell).
    /// Whether the bell rang.
    fn sleep(&self, wake: Option<Instant>) -> bool {
        let mut queue = self.queue();
        while !queue.rung {
            #[cfg(test)]
            {
                queue.asleep = true;
            }
            queue = match wake {
                Some(wake) => {
                    let left = wake.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let slept = self.bell.wait_timeout(queue, left);
                    slept.unwrap_or_else(PoisonError::into_inner).0
                }
                None => self
                    .bell
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
        #[cfg(test)]
        {
            queue.asleep = false;
        }
        std::mem::take(&mut queue.rung)
    }
}

impl Post for Mailbox {
    fn post(&self, call: Call) {
        // If the driver is gone, the call (and its answer slot) is dropped: the caller learns
        // that no answer will come.
        self.push(Input::Call(call));
    }
}

/// Starts the driver thread and one worker thread per node.
pub(crate) fn start(
    config: redlock_core::Config,
    labels: Arc<[Arc<str>]>,
    nodes: Vec<NodeAddr>,
    io_timeout: Duration,
    memory_watch: crate::MemoryWatchSettings,
) -> Result<Arc<Mailbox>, Error> {
    let mailbox = Arc::new(Mailbox {
        queue: Mutex::default(),
        bell: Condvar::new(),
        core: Mutex::new(None),
        #[cfg(test)]
        during_step: Mutex::new(None),
    });
    // Counts machine suspends (Linux), for every `now` of the driver and its locks.
    let state = DriverState::new(config, labels, mailbox.clone(), Clock::new())?;
    let clusters = crate::cluster::Clusters::default();
    // The workers' last packed command: a round's is packed once for its nodes.
    let last = crate::encoded::LastPacked::default();
    let workers = nodes
        .iter()
        .enumerate()
        .map(|(index, addr)| {
            let place = (index, clusters.clone(), last.clone());
            Worker::spawn(
                addr.clone(),
                io_timeout,
                memory_watch,
                place,
                mailbox.clone(),
            )
        })
        .collect();
    let notices = Notices::new(nodes, io_timeout, clusters, mailbox.clone());
    *mailbox.lock() = Some(Core {
        state,
        workers,
        notices,
        sleeps_until: None,
        stepping: VecDeque::new(),
    });
    let ending = Ending(mailbox.clone());
    let spawned = thread::Builder::new()
        .name("redlock-driver".into())
        .spawn(move || run(&ending));
    if let Err(err) = spawned {
        // The closure, and with it `Ending`, is dropped: the driver ended.
        tracing::error!(%err, "could not start the driver thread");
        return Err(Error::Stopped);
    }
    Ok(mailbox)
}

/// Ends the driver when dropped: with the driver thread, however it ends (a panic too). The
/// state holds the mailbox that holds it, so the state is taken out, not left to the count.
struct Ending(Arc<Mailbox>);

impl Drop for Ending {
    fn drop(&mut self) {
        let guard = self.0.lock();
        self.0.end(guard);
    }
}

/// The driver thread: steps what was left to it and lets deadlines pass, then sleeps until the
/// next deadline or the bell. Deadlines are the suspend-aware clock's; the sleep is
/// `Instant`'s, at most SUSPEND_CHECK while a lock runs (see `DriverState::wake_at`).
fn run(ending: &Ending) {
    let mailbox = &ending.0;
    let mut timed_out = false;
    loop {
        let wake = {
            let mut guard = mailbox.lock();
            let Some(core) = guard.as_mut() else { return };
            loop {
                let queue = mailbox.queue();
                if queue.inputs.is_empty() {
                    break;
                }
                core.take_in(queue);
            }
            if timed_out {
                let now = core.state.clock().now();
                core.state.handle_timeout(now);
            }
            if core.emit(mailbox) {
                return;
            }
            core.sleeps_until = core.state.wake_at();
            core.sleeps_until
        };
        // Inputs queued while this thread held the state are its own to step.
        timed_out = mailbox.queue().inputs.is_empty() && !mailbox.sleep(wake);
    }
}
