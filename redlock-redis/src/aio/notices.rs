//! Release notices: one subscriber connection per node (per master on a cluster node: see
//! [`super::shard_notices`]), opened the first time a lock of the client waits for a key
//! another holder has, following the channels the driver's multiplexer says. A notice only
//! shortens a pause (the engine decides what to do with it); a dead subscriber connection only
//! means waiting out the jittered pause. Nothing here decides whether a lock is held.

use std::sync::Arc;
use std::time::Instant;

use crate::Subscribers;
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
    subscribers: Subscribers<UnboundedSender<Change>>,
    /// Where the tasks deliver notices (the driver's inbox).
    heard: UnboundedSender<Vec<u8>>,
    /// A subscriber task was ever started: until then no notice can come.
    started: bool,
}

impl<R: Runtime> Notices<R> {
    pub(crate) fn new(runtime: R, nodes: Arc<[Node]>, heard: UnboundedSender<Vec<u8>>) -> Self {
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
    pub(crate) fn apply(&mut self, change: &Change, channels: impl Fn() -> Vec<Vec<u8>>) -> bool {
        let before = self.started;
        let Self {
            runtime,
            nodes,
            subscribers,
            heard,
            started,
        } = self;
        let send = |tx: &UnboundedSender<Change>, change| tx.send(change).is_ok();
        subscribers.apply(change, channels, send, |node, channels| {
            let (tx, rx) = unbounded_channel();
            *started = true;
            runtime.spawn(follow::<R>(
                nodes.clone(),
                node,
                channels,
                rx,
                heard.clone(),
            ));
            Some(tx)
        });
        !before && self.started
    }
}

/// A node's subscriber task: connects, subscribes, follows the changes and passes notices on.
/// It ends when its connection fails (the next subscription starts another) or when the driver
/// is gone.
async fn follow<R: Runtime>(
    nodes: Arc<[Node]>,
    node: usize,
    channels: Vec<Vec<u8>>,
    mut changes: UnboundedReceiver<Change>,
    heard: UnboundedSender<Vec<u8>>,
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
        tokio::select! {
            change = changes.recv() => {
                healthy = match change {
                    Some(Change::Subscribe(channel)) => sink.subscribe(channel).await.is_ok(),
                    Some(Change::Unsubscribe(channel)) => sink.unsubscribe(channel).await.is_ok(),
                    None => return,
                };
            }
            message = stream.next() => {
                let Some(message) = message else { break };
                if let Ok(channel) = message.get_channel::<Vec<u8>>()
                    && heard.send(channel).is_err()
                {
                    return;
                }
            }
        }
    }
    tracing::debug!(
        node,
        "release notices: subscriber connection lost; pauses run out"
    );
}
