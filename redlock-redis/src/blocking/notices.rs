//! Release notices: one subscriber thread per node (one connection; one per master on a
//! cluster node: see [`super::shard_notices`]), started the first time a lock of the client
//! waits for a key another holder has, following the channels the driver's multiplexer says.
//! A notice goes into the driver's inbox. A notice only shortens a pause (the engine decides);
//! a dead subscriber connection only means waiting out the jittered pause. Nothing here
//! decides whether a lock is held.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread;
use std::time::Duration;

use super::shard_notices::follow_shards;
use crate::cluster::Clusters;
use crate::{FromSubscriber, NodeAddr, Subscribers};
use redis::RedisResult;
use redlock_core::Change;

use super::driver::{Input, Mailbox};

/// How often a subscriber thread with subscriptions looks up from its socket for new ones (a
/// blocking connection cannot be woken otherwise). Channels linger after their last waiter, so
/// a repeat contender rarely waits for this.
pub(super) const POLL: Duration = Duration::from_millis(2);

/// The subscriber threads of one driver.
pub(crate) struct Notices {
    nodes: Vec<NodeAddr>,
    io_timeout: Duration,
    /// The slot maps the nodes learnt: a cluster node's thread starts from its map.
    clusters: Clusters,
    /// Each node's thread, by the queue of changes it follows (closed once it ended).
    subscribers: Subscribers<Sender<(Change, u64)>>,
    driver: Arc<Mailbox>,
}

impl Notices {
    pub(crate) fn new(
        nodes: Vec<NodeAddr>,
        io_timeout: Duration,
        clusters: Clusters,
        driver: Arc<Mailbox>,
    ) -> Self {
        let subscribers = Subscribers::new(nodes.len());
        Self {
            nodes,
            io_timeout,
            clusters,
            subscribers,
            driver,
        }
    }

    /// Applies `change` on every node (see [`Subscribers::apply`]).
    pub(crate) fn apply(
        &mut self,
        change: &Change,
        through: u64,
        channels: impl Fn() -> Vec<Vec<u8>>,
    ) {
        let send = |tx: &Sender<(Change, u64)>, change| tx.send(change).is_ok();
        let (nodes, io_timeout, driver) = (&self.nodes, self.io_timeout, &self.driver);
        let clusters = &self.clusters;
        self.subscribers.apply(change, through, channels, send, |node, channels, through| {
            let (tx, rx) = mpsc::channel();
            let addr = nodes[node].clone();
            let map = clusters.map(addr.cluster_owner(node));
            let driver = driver.clone();
            thread::Builder::new()
                .name(format!("redlock-notices-{}", nodes[node].label()))
                .spawn(move || {
                    if let Some(map) = map {
                        follow_shards(&addr, io_timeout, map, channels, &rx, &driver);
                        return;
                    }
                    let subscribed = (channels, through);
                    if let Err(err) = follow(addr.client(), io_timeout, node, subscribed, &rx, &driver) {
                        tracing::debug!(node, %err, "release notices: subscriber connection lost; pauses run out");
                    }
                    // Whatever ended it: releases announce to every listener here again.
                    driver.push(Input::Heard(FromSubscriber::Ended { node }));
                })
                .ok()
                .map(|_| tx)
        });
    }
}

/// Connects, subscribes to `channels` (as of the change numbered `through`), then applies
/// changes and passes notices on, and the number of each change the node confirmed
/// ([`FromSubscriber::Subscribed`]). `Ok` when the driver is gone.
fn follow(
    client: &redis::Client,
    io_timeout: Duration,
    node: usize,
    (channels, mut through): (Vec<Vec<u8>>, u64),
    changes: &Receiver<(Change, u64)>,
    driver: &Mailbox,
) -> RedisResult<()> {
    let mut conn = client.get_connection_with_timeout(io_timeout)?;
    conn.set_write_timeout(Some(io_timeout))?;
    conn.set_read_timeout(Some(io_timeout))?;
    let mut pubsub = conn.as_pubsub();
    let mut subscribed = channels.len();
    if subscribed > 0 {
        pubsub.subscribe(channels)?;
    }
    // `subscribe` and `unsubscribe` return once the node confirmed.
    let confirmed =
        |through| driver.push(Input::Heard(FromSubscriber::Subscribed { node, through }));
    if !confirmed(through) {
        return Ok(());
    }
    let mut reading_with = io_timeout;
    loop {
        // Nothing subscribed: nothing to read, so sleep until there is.
        let first = if subscribed == 0 {
            match changes.recv() {
                Ok(change) => Some(change),
                Err(_) => return Ok(()),
            }
        } else {
            None
        };
        let mut pending = first.into_iter().collect::<Vec<_>>();
        loop {
            match changes.try_recv() {
                Ok(change) => pending.push(change),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Ok(()),
            }
        }
        if !pending.is_empty() {
            // Confirmations are read with the full I/O timeout.
            if reading_with != io_timeout {
                pubsub.set_read_timeout(Some(io_timeout))?;
                reading_with = io_timeout;
            }
            for (change, number) in pending {
                through = number;
                match change {
                    Change::Subscribe(channel) => {
                        pubsub.subscribe(channel)?;
                        subscribed += 1;
                    }
                    Change::Unsubscribe(channel) => {
                        pubsub.unsubscribe(channel)?;
                        subscribed = subscribed.saturating_sub(1);
                    }
                }
            }
            if !confirmed(through) {
                return Ok(());
            }
        }
        if subscribed == 0 {
            continue;
        }
        if reading_with != POLL {
            pubsub.set_read_timeout(Some(POLL))?;
            reading_with = POLL;
        }
        match pubsub.get_message() {
            Ok(message) => {
                if let Ok(channel) = message.get_channel::<Vec<u8>>()
                    && !driver.push(Input::Heard(FromSubscriber::Notice(channel)))
                {
                    return Ok(());
                }
            }
            Err(err) if err.is_timeout() => {}
            Err(err) => return Err(err),
        }
    }
}
