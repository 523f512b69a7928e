//! The client's driver: one thread that owns every lock of the client (in [`DriverState`]),
//! hands batches to the node workers and waits for what comes back — calls, replies, release
//! notices — or for the next deadline. Every decision is the engine's.
//!
//! # What it never does
//! It never waits on a socket: each node's worker does, so a slow or dead node never holds up a
//! decision the other nodes settled, nor delays anything past the engine's per-node deadline.
//! It holds no lock state outside [`DriverState`], and there is no async runtime in it.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

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
}

/// How calls reach the driver thread.
pub(crate) struct Mailbox(Sender<Input>);

impl Post for Mailbox {
    fn post(&self, call: Call) {
        // If the driver is gone, the call (and its answer slot) is dropped: the caller learns
        // that no answer will come.
        let _ = self.0.send(Input::Call(call));
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
    let mailbox = Arc::new(Mailbox(tx.clone()));
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
    thread::Builder::new()
        .name("redlock-driver".into())
        .spawn(move || run(state, &rx, &tx, workers, notices))
        .map_err(|err| {
            tracing::error!(%err, "could not start the driver thread");
            Error::Stopped
        })?;
    Ok(mailbox)
}

fn run(
    mut state: DriverState,
    inbox: &Receiver<Input>,
    outbox: &Sender<Input>,
    workers: Vec<Worker>,
    mut notices: Notices,
) {
    let clock = state.clock().clone();
    loop {
        while let Some(output) = state.poll_output() {
            match output {
                Output::Transmit(batch) => workers[batch.node].send(batch, outbox),
                Output::Subscription(change) => notices.apply(&change, || state.channels()),
                Output::Done => return,
            }
        }
        // Deadlines are the suspend-aware clock's; the wait is `Instant`'s, at most
        // SUSPEND_CHECK while a lock runs (see `DriverState::wake_at`).
        let input = match state.wake_at() {
            Some(wake) => {
                inbox.recv_timeout(wake.saturating_duration_since(std::time::Instant::now()))
            }
            None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match input {
            Ok(input) => {
                handle(&mut state, input);
                // Take in everything that is already there before writing: one batch per
                // node for all of it.
                while let Ok(input) = inbox.try_recv() {
                    handle(&mut state, input);
                }
            }
            Err(RecvTimeoutError::Timeout) => state.handle_timeout(clock.now()),
            // The state holds a sender itself: this does not happen while it lives.
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn handle(state: &mut DriverState, input: Input) {
    let now = state.clock().now();
    match input {
        Input::Call(call) => state.handle_call(now, call),
        Input::Replies(replies) => state.handle_replies(now, replies),
        Input::Notice(channel) => state.handle_notice(now, &channel),
    }
}
