//! Release notices: one subscriber connection per node (per master on a cluster node: see
//! [`super::shard_notices`]), opened the first time a lock of the client waits for a key
//! another holder has, following the channels the driver's multiplexer says. A notice only
//! shortens a pause (the engine decides what to do with it); a dead subscriber connection only
//! means waiting out the jittered pause. Nothing here decides whether a lock is held.

use std::sync::Arc;
use std::time::Instant;

use crate::{FromSubscriber, Subscribers};
use futures_util::StreamExt;
use redlock_core::Change;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::conn::Node;
use super::runtime::Runtime;

/// The subscriber tasks of one driver.
pub(crate) struct Notices<R> {
    runtime: R,
    nodes: Arc<[Node]>,
    /// Each node's task, by the queue of changes it follows (closed once it ended).
    subscribers: Subscribers<UnboundedSender<(Change, u64)>>,
    /// Where the tasks deliver notices and confirmations (the driver's inbox).
    heard: UnboundedSender<FromSubscriber>,
    /// A subscriber task was ever started: until then no notice can come.
    started: bool,
}

impl<R: Runtime> Notices<R> {
    pub(crate) fn new(
        runtime: R,
        nodes: Arc<[Node]>,
        heard: UnboundedSender<FromSubscriber>,
    ) -> Self {
        let subscribers = Subscribers::new(nodes.len());
        Self {
            runtime,
            nodes,
            subscribers,
            heard,
            started: false,
        }
    }

    /// Whether a notice may come: a subscriber task was started (it may have ended since, and
    /// its notices still be queued). Until then the driver's turn polls no notices.
    pub(crate) fn may_come(&self) -> bool {
        self.started
    }

    /// Applies `change` on every node (see [`Subscribers::apply`]); whether it started the
    /// driver's first subscriber task (the channel of notices was then never polled).
    pub(crate) fn apply(
        &mut self,
        change: &Change,
        through: u64,
        channels: impl Fn() -> Vec<Vec<u8>>,
    ) -> bool {
        let before = self.started;
        let Self {
            runtime,
            nodes,
            subscribers,
            heard,
            started,
        } = self;
        let send = |tx: &UnboundedSender<(Change, u64)>, change| tx.send(change).is_ok();
        subscribers.apply(
            change,
            through,
            channels,
            send,
            |node, channels, through| {
                let (tx, rx) = unbounded_channel();
                *started = true;
                runtime.spawn(follow::<R>(
                    nodes.clone(),
                    node,
                    (channels, through),
                    rx,
                    heard.clone(),
                ));
                Some(tx)
            },
        );
        !before && self.started
    }
}

/// A node's subscriber task: connects, subscribes to `channels` (as of the change numbered
/// `through`), follows the changes and passes notices on, and each confirmed change's number
/// ([`FromSubscriber::Subscribed`]). It ends when its connection fails (the next subscription
/// starts another; it says [`FromSubscriber::Ended`] first) or when the driver is gone.
async fn follow<R: Runtime>(
    nodes: Arc<[Node]>,
    node: usize,
    (channels, through): (Vec<Vec<u8>>, u64),
    changes: UnboundedReceiver<(Change, u64)>,
    heard: UnboundedSender<FromSubscriber>,
) {
    let io_timeout = nodes[node].io_timeout();
    if let Some(map) = nodes[node].learnt_map() {
        let addr = nodes[node].addr().clone();
        drop(nodes);
        super::shard_notices::follow_shards::<R>(addr, io_timeout, map, channels, changes, heard)
            .await;
        return;
    }
    let client = nodes[node].addr().client().clone();
    drop(nodes);
    let mut changes = changes;
    let subscribed = (channels, through);
    subscribe_and_follow::<R>(&client, io_timeout, node, subscribed, &mut changes, &heard).await;
    // Whatever ended it: releases announce to every listener on this node again. Said while
    // the queue of changes is still open, so before the driver can start the next
    // subscriber, whose confirmations then come after it.
    let _ = heard.send(FromSubscriber::Ended { node });
    drop(changes);
}

/// [`follow`] on a standalone node, until its connection fails or the driver is gone.
async fn subscribe_and_follow<R: Runtime>(
    client: &redis::Client,
    io_timeout: std::time::Duration,
    node: usize,
    (channels, mut through): (Vec<Vec<u8>>, u64),
    changes: &mut UnboundedReceiver<(Change, u64)>,
    heard: &UnboundedSender<FromSubscriber>,
) {
    let connected = tokio::select! {
        connected = client.get_async_pubsub() => connected.ok(),
        () = R::sleep_until(Instant::now() + io_timeout) => None,
    };
    let Some(pubsub) = connected else {
        tracing::debug!(
            node,
            "release notices: no subscriber connection; pauses run out"
        );
        return;
    };
    let (mut sink, mut stream) = pubsub.split();
    let mut healthy = channels.is_empty() || sink.subscribe(channels).await.is_ok();
    while healthy {
        // Every change so far is confirmed (the node answered each `SUBSCRIBE`).
        if heard
            .send(FromSubscriber::Subscribed { node, through })
            .is_err()
        {
            return;
        }
        healthy = loop {
            tokio::select! {
                change = changes.recv() => {
                    let Some((change, number)) = change else { return };
                    through = number;
                    break match change {
                        Change::Subscribe(channel) => sink.subscribe(channel).await.is_ok(),
                        Change::Unsubscribe(channel) => sink.unsubscribe(channel).await.is_ok(),
                    };
                }
                message = stream.next() => {
                    let Some(message) = message else { break false };
                    if let Ok(channel) = message.get_channel::<Vec<u8>>()
                        && heard.send(FromSubscriber::Notice(channel)).is_err()
                    {
                        return;
                    }
                }
            }
        };
    }
    tracing::debug!(
        node,
        "release notices: subscriber connection lost; pauses run out"
    );
}
