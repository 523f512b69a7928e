//! The loop that runs a lock's lifecycle over the nodes: it executes the lifecycle's outputs and
//! nothing else (every decision, stale replies included, is the engine's).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use redlock_core::{Lifecycle, LockEvent, LockOutput, Reply, RequestId, Transmit, WakeReason};
use tokio::sync::mpsc;

use crate::client::Inner;
use crate::conn::Node;
use crate::notices::{Notices, Subscription};
use crate::runtime::Runtime;

/// A request's answer.
type Completion = (RequestId, Reply);
type InFlight = Pin<Box<dyn Future<Output = Completion> + Send>>;

/// Sends a lock's requests and collects the replies.
///
/// One dispatch serves one lock from acquisition to release. While the lifecycle is being
/// driven, its requests are polled right here (no task per request); when the driver returns
/// to its caller, whatever is still in flight — the stragglers of a round decided on a quorum —
/// moves to one background task, so those requests still reach their nodes while the lock is
/// held.
///
/// # Implementation note
/// Per node, a lock has at most one request in flight; later ones queue behind it. So a release
/// (or a failed round's clean-up) runs on each node *after* the `SET` that node may still be
/// answering — when `lock()` returned on a quorum, say — and cannot be overtaken by it, which
/// would leave the key for a full TTL. A straggler's reply frees its node and is handed to the
/// lifecycle like any other, which ignores it (its id names an earlier operation).
pub(crate) struct Dispatch<R: Runtime> {
    nodes: Arc<[Node]>,
    runtime: R,
    /// Requests polled by the driver.
    local: FuturesUnordered<InFlight>,
    /// Answers of requests handed to background tasks, and how many are still out there.
    detached_tx: mpsc::UnboundedSender<Completion>,
    detached_rx: mpsc::UnboundedReceiver<Completion>,
    detached: usize,
    sent_at: Vec<Option<Instant>>,
    queued: Vec<VecDeque<Transmit>>,
    notices: Notices,
    /// Release notices for the lock's keys, while it waits between rounds.
    listening: Option<Subscription>,
}

impl<R: Runtime> Dispatch<R> {
    /// Captures the runtime the calling task runs on.
    pub(crate) fn new(client: &Inner) -> Self {
        let nodes = client.nodes.clone();
        let n = nodes.len();
        let (detached_tx, detached_rx) = mpsc::unbounded_channel();
        Self {
            nodes,
            runtime: R::current(),
            local: FuturesUnordered::new(),
            detached_tx,
            detached_rx,
            detached: 0,
            sent_at: vec![None; n],
            queued: vec![VecDeque::new(); n],
            notices: client.notices.clone(),
            listening: None,
        }
    }

    /// Starts listening for the release of the lock's keys (once: the subscription stays until
    /// the lock is settled).
    fn listen(&mut self, lifecycle: &Lifecycle) {
        if self.listening.is_some() {
            return;
        }
        if let Some(spec) = lifecycle.spec() {
            let channels = spec.released_channels().collect();
            self.listening = Some(self.notices.subscribe(&self.runtime, channels));
        }
    }

    /// The next release notice; never resolves while not listening.
    fn notice(&self) -> impl Future<Output = ()> + Send + 'static {
        let notified = self.listening.as_ref().map(Subscription::notified);
        async move {
            match notified {
                Some(notified) => notified.await,
                None => std::future::pending().await,
            }
        }
    }

    pub(crate) fn runtime(&self) -> &R {
        &self.runtime
    }

    fn send(&mut self, transmit: Transmit) {
        let node = transmit.id.node();
        if self.sent_at[node].is_some() {
            self.queued[node].push_back(transmit);
            return;
        }
        self.sent_at[node] = Some(Instant::now());
        let nodes = self.nodes.clone();
        self.local.push(Box::pin(async move {
            let reply = nodes[node].run(&transmit.command).await;
            (transmit.id, reply)
        }));
    }

    fn is_idle(&self) -> bool {
        self.local.is_empty() && self.detached == 0
    }

    /// The next answer; frees its node and sends what queued behind it. Never resolves while
    /// nothing is in flight.
    async fn recv(&mut self) -> Completion {
        let completion = tokio::select! {
            Some(done) = self.local.next(), if !self.local.is_empty() => done,
            Some(done) = self.detached_rx.recv(), if self.detached > 0 => {
                self.detached -= 1;
                done
            }
            else => return std::future::pending().await,
        };
        self.complete(&completion);
        completion
    }

    /// A request finished: its node is free, and the next request queued for it goes out.
    fn complete(&mut self, (id, reply): &Completion) {
        let node = id.node();
        if let Some(sent) = self.sent_at[node].take() {
            let label = self.nodes[node].label();
            tracing::debug!(node = %label, ?reply, latency = ?sent.elapsed(), "reply");
            redlock_redis::telemetry::node_reply(label, sent.elapsed(), reply);
        }
        if let Some(next) = self.queued[node].pop_front() {
            self.send(next);
        }
    }

    /// Takes in every answer that is already there, without waiting, so that a request queued
    /// behind a finished one goes out now. Called before the driver returns to its caller: a
    /// request left queued behind an answer nobody reads would not go out until the lock's next
    /// operation (an extension that reached only a quorum's nodes, say).
    fn settle_ready(&mut self) {
        loop {
            if let (true, Ok(done)) = (self.detached > 0, self.detached_rx.try_recv()) {
                self.detached -= 1;
                self.complete(&done);
                continue;
            }
            match self.local.next().now_or_never() {
                Some(Some(done)) => self.complete(&done),
                _ => return,
            }
        }
    }

    /// Moves the requests still in flight to a background task (their answers come back
    /// through the channel), so they progress while no machine runs.
    fn detach(&mut self) {
        self.settle_ready();
        if self.local.is_empty() {
            return;
        }
        let mut local = std::mem::take(&mut self.local);
        self.detached += local.len();
        let tx = self.detached_tx.clone();
        self.runtime.spawn(async move {
            while let Some(done) = local.next().await {
                // The lock may be gone; then nobody needs the answer.
                let _ = tx.send(done);
            }
        });
    }

    /// Lets everything still in flight or queued (a clean-up release must reach every node) run
    /// to its end in the background; call when the lock is over.
    pub(crate) fn finish(mut self) {
        if self.is_idle() {
            return;
        }
        let runtime = self.runtime.clone();
        runtime.spawn(async move {
            while !self.is_idle() {
                self.recv().await;
            }
        });
    }
}

/// Runs `lifecycle` until its next event; `None` once it is idle (held without auto-extension,
/// or ended). Whatever is still in flight then keeps going in the background.
pub(crate) async fn next_event<R: Runtime>(
    dispatch: &mut Dispatch<R>,
    lifecycle: &mut Lifecycle,
) -> Option<LockEvent> {
    let event = loop {
        match lifecycle.poll_output(Instant::now()) {
            LockOutput::Send(transmit) => dispatch.send(transmit),
            LockOutput::Wait { at, reason } => {
                let pausing = reason == WakeReason::RetryPause;
                if pausing {
                    // Contended: hear the holder's release instead of sleeping the pause out.
                    dispatch.listen(lifecycle);
                }
                let notice = dispatch.notice();
                tokio::select! {
                    (id, reply) = dispatch.recv() => lifecycle.handle_reply(Instant::now(), id, reply),
                    () = notice, if pausing => {
                        tracing::trace!("release notice");
                        lifecycle.handle_wake(Instant::now());
                    }
                    () = R::sleep_until(at) => {
                        tracing::trace!(?reason, "wake-up");
                        lifecycle.handle_timeout(Instant::now());
                    }
                }
            }
            LockOutput::Event(event) => {
                // Settled (or held): no more waiting for a release.
                dispatch.listening = None;
                break Some(event);
            }
            LockOutput::Idle => break None,
        }
    };
    dispatch.detach();
    event
}
