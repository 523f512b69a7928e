//! The loop that runs a lock's lifecycle over the node workers: it executes the lifecycle's
//! outputs and nothing else (every decision, stale replies included, is the engine's).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use redlock_core::Transmit;
use redlock_core::{Lifecycle, LockEvent, LockOutput, WakeReason};
use redlock_redis::LeaseKeeper;

use crate::conn::{Arrival, Job, Node};
use crate::notices::{Notices, Subscription};

/// A lock's channel for answers (and release notices while it waits). Each node's worker runs
/// requests in submission order, so a lock's release reaches a node after that node's earlier
/// request of the same lock. A late answer of an earlier operation is handed to the lifecycle
/// like any other, which ignores it.
pub(crate) struct Dispatch {
    nodes: Arc<[Node]>,
    tx: Sender<Arrival>,
    rx: Receiver<Arrival>,
    notices: Notices,
    /// The release notices of the lock's keys, while it waits between rounds.
    listening: Mutex<Option<Subscription>>,
}

impl Dispatch {
    pub(crate) fn new(nodes: Arc<[Node]>, notices: Notices) -> Self {
        let (tx, rx) = mpsc::channel();
        Self {
            nodes,
            tx,
            rx,
            notices,
            listening: Mutex::new(None),
        }
    }

    /// Starts listening for the release of the lock's keys (once per acquisition).
    fn listen(&self, lifecycle: &Lifecycle) {
        let mut listening = self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if listening.is_none()
            && let Some(spec) = lifecycle.spec()
        {
            let channels = spec.released_channels().collect();
            *listening = Some(self.notices.subscribe(channels, self.tx.clone()));
        }
    }

    fn stop_listening(&self) {
        *self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn submit(&self, transmit: Transmit) {
        self.nodes[transmit.id.node()].submit(Job {
            id: transmit.id,
            command: transmit.command,
            reply_to: self.tx.clone(),
        });
    }

    /// Waits for the next answer or notice until `until`; `None` on timeout.
    fn recv_until(&self, until: Instant) -> Option<Arrival> {
        let wait = until.saturating_duration_since(Instant::now());
        // `self.tx` keeps the channel open, so only a timeout ends the wait.
        self.rx.recv_timeout(wait).ok()
    }
}

/// Runs `lifecycle` until its next event, blocking the calling thread; `None` once it is idle.
/// A slow or dead node holds nothing up beyond the lifecycle's own deadlines. With a `keeper`
/// (`with_lock`), a wait for the next auto-extension also ends — with `None` — when the work is
/// done.
pub(crate) fn next_event(
    dispatch: &Dispatch,
    lifecycle: &mut Lifecycle,
    keeper: Option<&LeaseKeeper>,
) -> Option<LockEvent> {
    loop {
        match lifecycle.poll_output(Instant::now()) {
            LockOutput::Send(transmit) => dispatch.submit(transmit),
            LockOutput::Wait {
                at,
                reason: WakeReason::AutoExtend,
            } if keeper.is_some() => {
                if keeper.is_some_and(|keeper| keeper.wait_work_done(at)) {
                    return None;
                }
                lifecycle.handle_timeout(Instant::now());
            }
            LockOutput::Wait { at, reason } => {
                let pausing = reason == WakeReason::RetryPause;
                if pausing {
                    // Contended: hear the holder's release instead of sleeping the pause out.
                    dispatch.listen(lifecycle);
                }
                match dispatch.recv_until(at) {
                    Some(Arrival::Reply(id, reply)) => {
                        lifecycle.handle_reply(Instant::now(), id, reply);
                    }
                    // A notice during a round is harmless: the engine only ends pauses.
                    Some(Arrival::Notice) => lifecycle.handle_wake(Instant::now()),
                    None => lifecycle.handle_timeout(Instant::now()),
                }
            }
            LockOutput::Event(event) => {
                dispatch.stop_listening();
                return Some(event);
            }
            LockOutput::Idle => return None,
        }
    }
}

/// Submits every request `lifecycle` wants sent before its first wait, without waiting for any
/// answer (a release from `Drop`). The node workers still run them, in order.
pub(crate) fn fire_and_forget(dispatch: &Dispatch, lifecycle: &mut Lifecycle) {
    while let LockOutput::Send(transmit) = lifecycle.poll_output(Instant::now()) {
        dispatch.submit(transmit);
    }
}
