//! The client's driver: one thread that hands batches to the node workers and waits for what
//! comes back — calls, replies, release notices — or for the next deadline, around the state
//! of every lock of the client (in [`DriverState`]). Every decision is the engine's.
//!
//! A call is handed in by its caller, on the caller's thread, under the state's mutex, when
//! the mutex is free and no call (anyone's) waits in the driver thread's inbox: its batches go
//! to the node workers at once, without a hop through the driver thread (the threads floor's
//! caller hands its command to the node threads itself). The replies still come back through
//! the driver thread, which keeps the deadlines. Otherwise — the driver thread or another
//! caller holds the mutex, or a call waits in the inbox — the call goes through the inbox,
//! behind the others: one caller's calls are handed in in the order it made them. Under
//! concurrency the shortcut is often not taken; that costs a hop, never an order. While a
//! caller holds the mutex it does the driver's work for its call (the engine's step, a due
//! deadline, starting a notice subscriber), and replies wait for it.
//!
//! # What it never does
//! It never waits on a socket: each node's worker does, so a slow or dead node never holds up a
//! decision the other nodes settled, nor delays anything past the engine's per-node deadline.
//! It holds no lock state outside [`DriverState`], and there is no async runtime in it. A
//! caller never waits for the state's mutex, and a panic in the driver's code on a caller's
//! thread never reaches the caller: it ends the driver, as a panicking driver thread does.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

use crate::Answers;
use crate::{Call, Clock, DriverState, Error, NodeAddr, Output, Post};

use super::conn::Worker;
use super::notices::Notices;

/// What reaches the driver thread.
pub(crate) enum Input {
    /// From a handle or the client.
    Call(Call),
    /// A node worker's replies to a batch.
    Replies(Answers),
    /// A release notice on a channel.
    Notice(Vec<u8>),
    /// A caller handed a call in itself, and the driver thread must look again: the next
    /// deadline is earlier than the one it sleeps until, or every lock is over.
    Look,
}

/// The driver's state and what its outputs go to; the driver thread's, and a caller's while
/// it hands its call in.
struct Core {
    state: DriverState,
    workers: Vec<Worker>,
    notices: Notices,
    /// When the driver thread wakes if no input comes first (`Instant::now()`'s timeline;
    /// `None`: only on an input).
    sleeps_until: Option<Instant>,
}

impl Core {
    /// Sends every output of the state; whether the driver may end (every lock over).
    fn emit(&mut self, outbox: &Sender<Input>) -> bool {
        while let Some(output) = self.state.poll_output() {
            match output {
                Output::Transmit(batch) => self.workers[batch.node].send(batch, outbox),
                Output::Subscription(change) => {
                    let state = &self.state;
                    self.notices.apply(&change, || state.channels());
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

/// How calls reach the driver: handed in by the caller, or through the driver thread's inbox.
pub(crate) struct Mailbox {
    inbox: Sender<Input>,
    /// `None` before the driver starts and once it ended.
    core: Mutex<Option<Core>>,
    /// Calls sent to the inbox and not yet handed in by the driver thread: while there are any,
    /// a call goes the same way, behind them.
    in_inbox: AtomicUsize,
}

impl Mailbox {
    /// The core, ending the driver if a panic left it half-changed (as a panicking driver
    /// thread did: every holder then learns it lost its lock).
    fn lock(&self) -> MutexGuard<'_, Option<Core>> {
        match self.core.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                self.end(poisoned.into_inner());
                self.core.lock().unwrap_or_else(PoisonError::into_inner)
            }
        }
    }

    /// Ends the driver: takes the core out of `guard` and drops it after letting go of the
    /// mutex (dropping the state tells every holder, and must not meet the mutex held); tells
    /// the driver thread, which then ends.
    fn end(&self, mut guard: MutexGuard<'_, Option<Core>>) {
        let ended = guard.take();
        self.core.clear_poison();
        drop(guard);
        drop(ended);
        let _ = self.inbox.send(Input::Look);
    }

    /// Tests only: whether the state's mutex is free (no one hands a call in, and the driver
    /// thread is not in a turn).
    #[cfg(test)]
    pub(super) fn is_free(&self) -> bool {
        self.core.try_lock().is_ok()
    }

    /// Sends `call` to the driver thread's inbox.
    fn send(&self, call: Call) {
        self.in_inbox.fetch_add(1, Ordering::SeqCst);
        if self.inbox.send(Input::Call(call)).is_err() {
            self.in_inbox.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Post for Mailbox {
    fn post(&self, call: Call) {
        // If the driver is gone, the call (and its answer slot) is dropped: the caller learns
        // that no answer will come.
        let mut guard = match self.core.try_lock() {
            Ok(guard) => guard,
            // Held (by the driver thread, or by this very thread handing a call in): the inbox.
            Err(TryLockError::WouldBlock) => return self.send(call),
            Err(TryLockError::Poisoned(poisoned)) => {
                self.end(poisoned.into_inner());
                return self.send(call);
            }
        };
        let Some(core) = guard
            .as_mut()
            .filter(|_| self.in_inbox.load(Ordering::SeqCst) == 0)
        else {
            drop(guard);
            return self.send(call);
        };
        // A panic here (this crate's bug) ends the driver, as one on the driver thread did, and
        // never reaches the caller: it may be a lock's `drop`, in a thread already unwinding.
        let handed = catch_unwind(AssertUnwindSafe(|| {
            let now = core.state.clock().now();
            core.state.handle_call(now, call);
            core.emit(&self.inbox) || core.wakes_earlier()
        }));
        match handed {
            Ok(look) => {
                drop(guard);
                if look {
                    let _ = self.inbox.send(Input::Look);
                }
            }
            Err(_) => {
                tracing::error!("the driver panicked handing a call in: it ends");
                self.end(guard);
            }
        }
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
    let (tx, rx) = mpsc::channel();
    let mailbox = Arc::new(Mailbox {
        inbox: tx.clone(),
        core: Mutex::new(None),
        in_inbox: AtomicUsize::new(0),
    });
    // Counts machine suspends (Linux), for every `now` of the driver and its locks.
    let state = DriverState::new(config, labels, mailbox.clone(), Clock::new())?;
    let clusters = crate::cluster::Clusters::default();
    let workers = nodes
        .iter()
        .enumerate()
        .map(|(index, addr)| {
            let place = (index, clusters.clone());
            Worker::spawn(addr.clone(), io_timeout, memory_watch, place, tx.clone())
        })
        .collect();
    let notices = Notices::new(nodes, io_timeout, clusters, tx.clone());
    let clock = state.clock().clone();
    *mailbox.lock() = Some(Core {
        state,
        workers,
        notices,
        sleeps_until: None,
    });
    let ending = Ending(mailbox.clone());
    let spawned = thread::Builder::new()
        .name("redlock-driver".into())
        .spawn(move || run(&ending, &rx, &tx, &clock));
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

fn run(ending: &Ending, inbox: &Receiver<Input>, outbox: &Sender<Input>, clock: &Clock) {
    let mailbox = &ending.0;
    loop {
        let wake = {
            let mut guard = mailbox.lock();
            let Some(core) = guard.as_mut() else { return };
            if core.emit(outbox) {
                return;
            }
            // Deadlines are the suspend-aware clock's; the wait is `Instant`'s, at most
            // SUSPEND_CHECK while a lock runs (see `DriverState::wake_at`). A caller that
            // hands in a call needing an earlier wake-up sends `Input::Look`.
            core.sleeps_until = core.state.wake_at();
            core.sleeps_until
        };
        let input = match wake {
            Some(wake) => inbox.recv_timeout(wake.saturating_duration_since(Instant::now())),
            None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let mut guard = mailbox.lock();
        let Some(core) = guard.as_mut() else { return };
        match input {
            Ok(input) => {
                handle(core, mailbox, input);
                // Take in everything that is already there before writing: one batch per
                // node for all of it.
                while let Ok(input) = inbox.try_recv() {
                    handle(core, mailbox, input);
                }
            }
            Err(RecvTimeoutError::Timeout) => core.state.handle_timeout(clock.now()),
            // The mailbox holds a sender itself: this does not happen while it lives.
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn handle(core: &mut Core, mailbox: &Mailbox, input: Input) {
    let state = &mut core.state;
    let now = state.clock().now();
    match input {
        Input::Call(call) => {
            mailbox.in_inbox.fetch_sub(1, Ordering::SeqCst);
            state.handle_call(now, call);
        }
        Input::Replies(replies) => state.handle_replies(now, replies),
        Input::Notice(channel) => state.handle_notice(now, &channel),
        Input::Look => {}
    }
}
