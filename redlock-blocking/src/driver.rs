//! The loop that runs an engine machine over the node workers: it executes the machine's
//! outputs and nothing else (every decision is the machine's).

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

use redlock_core::{Machine, Output, Reply, RequestId};

use crate::conn::{Completion, Job, Node};

/// A lock's channel for answers. Each node's worker runs requests in submission order, so a
/// lock's release reaches a node after that node's earlier request of the same lock; answers are
/// tagged with their machine so a straggler never reaches a later machine.
pub(crate) struct Dispatch {
    nodes: Arc<[Node]>,
    generation: u64,
    tx: Sender<Completion>,
    rx: Receiver<Completion>,
}

impl Dispatch {
    pub(crate) fn new(nodes: Arc<[Node]>) -> Self {
        let (tx, rx) = mpsc::channel();
        Self {
            nodes,
            generation: 0,
            tx,
            rx,
        }
    }

    fn submit(&self, id: RequestId, command: redlock_core::Command) {
        self.nodes[id.node()].submit(Job {
            generation: self.generation,
            id,
            command,
            reply_to: self.tx.clone(),
        });
    }

    /// Waits for the next answer for the running machine until `until`; `None` on timeout.
    fn recv_until(&self, until: Instant) -> Option<(RequestId, Reply)> {
        loop {
            let wait = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok((generation, id, reply)) if generation == self.generation => {
                    return Some((id, reply));
                }
                Ok(_) => {}
                // `self.tx` keeps the channel open, so only a timeout ends the wait.
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}

/// Runs `machine` to its outcome, blocking the calling thread. A slow or dead node holds
/// nothing up beyond the machine's own deadlines.
pub(crate) fn drive<M: Machine>(dispatch: &mut Dispatch, machine: &mut M) -> M::Outcome {
    dispatch.generation += 1;
    loop {
        match machine.poll_output(Instant::now()) {
            Output::Send(transmit) => dispatch.submit(transmit.id, transmit.command),
            Output::Wait(until) => match dispatch.recv_until(until) {
                Some((id, reply)) => machine.handle_reply(Instant::now(), id, reply),
                None => machine.handle_timeout(Instant::now()),
            },
            Output::Done(outcome) => return outcome,
            // A machine is idle only after handing out its outcome, and this loop returns then.
            _ => unreachable!("engine machine went idle before its outcome"),
        }
    }
}

/// Submits every request `machine` wants sent before its first wait, without waiting for any
/// answer (a release from `Drop`). The node workers still run them, in order.
pub(crate) fn fire_and_forget<M: Machine>(dispatch: &mut Dispatch, machine: &mut M) {
    dispatch.generation += 1;
    while let Output::Send(transmit) = machine.poll_output(Instant::now()) {
        dispatch.submit(transmit.id, transmit.command);
    }
}
