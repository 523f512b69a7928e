//! The client's driver: one task on the async runtime that owns every lock of the client (in
//! [`DriverState`]) and every connection. It carries calls in, batches out, replies and
//! notices in, and time; every decision is the engine's.
//!
//! # What it never does
//! It never blocks the runtime, never spawns a task per request or per lock (the batches in
//! flight are polled by the driver task itself; the only other tasks are one release-notice
//! subscriber per node, started on first contention), and holds no lock state outside
//! [`DriverState`].

use std::sync::Arc;
use std::time::Instant;

use crate::Answers;
use crate::{Call, Clock, DriverState, Output, Post};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redlock_core::Batch;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::conn::Node;
use super::notices::Notices;
use super::runtime::Runtime;

/// How calls reach the driver task.
pub(crate) struct Mailbox(UnboundedSender<Call>);

impl Mailbox {
    /// Whether the driver task is gone (its runtime shut down).
    pub(crate) fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

impl Post for Mailbox {
    fn post(&self, call: Call) {
        // If the driver is gone, the call (and its answer slot) is dropped: the caller learns
        // that no answer will come.
        let _ = self.0.send(call);
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
    let (tx, rx) = unbounded_channel();
    let mailbox = Arc::new(Mailbox(tx));
    let state = DriverState::new(config, labels, mailbox.clone(), clock)?;
    let (heard_tx, heard_rx) = unbounded_channel();
    let notices = Notices::new(runtime.clone(), nodes.clone(), heard_tx);
    runtime.spawn(run::<R>(state, rx, nodes, notices, heard_rx));
    Ok(mailbox)
}

async fn run<R: Runtime>(
    mut state: DriverState,
    mut calls: UnboundedReceiver<Call>,
    nodes: Arc<[Node]>,
    mut notices: Notices<R>,
    mut heard: UnboundedReceiver<Vec<u8>>,
) {
    let mut in_flight = FuturesUnordered::new();
    let clock = state.clock().clone();
    loop {
        while let Some(output) = state.poll_output() {
            match output {
                Output::Transmit(batch) => in_flight.push(write(nodes.clone(), batch)),
                Output::Subscription(change) => notices.apply(&change, || state.channels()),
                Output::Done => return,
            }
        }
        let timeout = state.poll_timeout();
        // Not biased: under a steady stream of replies, calls (a dropped lock's release, a new
        // acquisition) and notices still get their turn.
        tokio::select! {
            Some(replies) = in_flight.next(), if !in_flight.is_empty() => {
                state.handle_replies(clock.now(), replies);
            }
            call = calls.recv() => {
                // The driver's state holds a sender itself: the channel never closes under it.
                let Some(call) = call else { return };
                state.handle_call(clock.now(), call);
                while let Ok(call) = calls.try_recv() {
                    state.handle_call(clock.now(), call);
                }
            }
            Some(channel) = heard.recv() => {
                tracing::trace!("release notice");
                state.handle_notice(clock.now(), &channel);
            }
            () = sleep_until::<R>(state.wake_at()) => {
                tracing::trace!(reason = ?timeout.map(|t| t.reason), "wake-up");
                state.handle_timeout(clock.now());
            }
        }
    }
}

/// Writes `batch` to its node; the replies, one per request.
async fn write(nodes: Arc<[Node]>, batch: Batch) -> Answers {
    nodes[batch.node].run(batch).await
}

/// Resolves at `at`, or never.
async fn sleep_until<R: Runtime>(at: Option<Instant>) {
    match at {
        Some(at) => R::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
