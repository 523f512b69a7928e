//! The loop that runs an engine machine over the nodes: it executes the machine's outputs and
//! nothing else (every decision is the machine's).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use redlock_core::{Machine, Output, Reply, RequestId, Transmit};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::conn::Node;

/// Sends one operation's requests, each on its own task, and collects the replies.
///
/// One dispatch serves one lock from acquisition to release, running one machine at a time.
///
/// # Implementation note
/// Per node, a lock has at most one request in flight; later ones queue behind it. So a release
/// (or a failed round's clean-up) runs on each node *after* the `SET` that node may still be
/// answering — when `lock()` returned on a quorum, say — and cannot be overtaken by it, which
/// would leave the key for a full TTL. Replies are tagged with the machine they belong to: a
/// straggler of the acquisition frees its node but never reaches the release machine.
pub(crate) struct Dispatch {
    nodes: Arc<[Node]>,
    handle: Handle,
    generation: u64,
    tx: mpsc::UnboundedSender<(u64, RequestId, Reply)>,
    rx: mpsc::UnboundedReceiver<(u64, RequestId, Reply)>,
    in_flight: Vec<Option<Instant>>,
    queued: Vec<VecDeque<Transmit>>,
}

impl Dispatch {
    /// Must be called inside a tokio runtime.
    pub(crate) fn new(nodes: Arc<[Node]>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let n = nodes.len();
        Self {
            nodes,
            handle: Handle::current(),
            generation: 0,
            tx,
            rx,
            in_flight: vec![None; n],
            queued: vec![VecDeque::new(); n],
        }
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    fn send(&mut self, transmit: Transmit) {
        let node = transmit.id.node();
        if self.in_flight[node].is_some() {
            self.queued[node].push_back(transmit);
            return;
        }
        self.in_flight[node] = Some(Instant::now());
        let nodes = self.nodes.clone();
        let tx = self.tx.clone();
        let generation = self.generation;
        self.handle.spawn(async move {
            let reply = nodes[node].run(&transmit.command).await;
            // The lock may be gone; then nobody needs the reply.
            let _ = tx.send((generation, transmit.id, reply));
        });
    }

    /// The next reply of any machine; marks its node free and sends what queued behind it.
    async fn recv_any(&mut self) -> (u64, RequestId, Reply) {
        // `self.tx` keeps the channel open, so `recv` never yields `None`.
        let Some((generation, id, reply)) = self.rx.recv().await else {
            return std::future::pending().await;
        };
        let node = id.node();
        if let Some(sent) = self.in_flight[node].take() {
            tracing::debug!(node = %self.nodes[node].label(), ?reply, latency = ?sent.elapsed(), "reply");
        }
        if let Some(next) = self.queued[node].pop_front() {
            self.send(next);
        }
        (generation, id, reply)
    }

    /// The next reply for the machine being driven.
    async fn recv(&mut self) -> (RequestId, Reply) {
        loop {
            let (generation, id, reply) = self.recv_any().await;
            if generation == self.generation {
                return (id, reply);
            }
        }
    }

    /// Lets requests still queued behind slow nodes go out in the background; call when the
    /// operation is over (a clean-up release must reach every node).
    pub(crate) fn finish(mut self) {
        if self.queued.iter().all(VecDeque::is_empty) {
            return;
        }
        let handle = self.handle.clone();
        handle.spawn(async move {
            while self.queued.iter().any(|q| !q.is_empty()) {
                self.recv_any().await;
            }
        });
    }
}

/// Runs `machine` to its outcome.
pub(crate) async fn drive<M: Machine>(dispatch: &mut Dispatch, machine: &mut M) -> M::Outcome {
    dispatch.generation += 1;
    loop {
        match machine.poll_output(Instant::now()) {
            Output::Send(transmit) => dispatch.send(transmit),
            Output::Wait(until) => {
                tokio::select! {
                    (id, reply) = dispatch.recv() => machine.handle_reply(Instant::now(), id, reply),
                    () = tokio::time::sleep_until(until.into()) => machine.handle_timeout(Instant::now()),
                }
            }
            Output::Done(outcome) => return outcome,
            // A machine is idle only after handing out its outcome, and this loop returns then.
            _ => unreachable!("engine machine went idle before its outcome"),
        }
    }
}
