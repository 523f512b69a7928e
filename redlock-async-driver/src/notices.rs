//! Release notices: a waiting lock hears at once that its keys were released, instead of
//! sleeping out its retry pause.
//!
//! A client opens one subscriber connection per node, the first time one of its locks waits for
//! a key another holder has, and shares it between all its waiting locks; who waits where is a
//! [`NoticeBoard`]. An uncontended lock never subscribes, never opens that connection and costs
//! nothing.
//!
//! A notice only shortens a pause (the engine decides what to do with it,
//! [`Lifecycle::handle_wake`](redlock_core::Lifecycle::handle_wake)); a lost notice, a dead
//! subscriber connection or a node that cannot be reached only means waiting out the jittered
//! pause, as without notices. Nothing here decides whether a lock is held.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redlock_redis::NodeAddr;
use redlock_redis::notice_board::{self, Change, LINGER, Link, Listeners, SharedListeners, Waiter};
use tokio::sync::Notify;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::runtime::Runtime;

/// The release notices of one client's nodes. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Notices {
    shared: Arc<Shared>,
}

struct Shared {
    nodes: Vec<NodeAddr>,
    io_timeout: Duration,
    listeners: SharedListeners<Wake, Task>,
}

/// A waiter's wake-up: a permit is stored when it is not waiting, so no notice is lost.
struct Wake(Notify);

impl Waiter for Wake {
    fn wake(&self) {
        self.0.notify_one();
    }
}

/// A node's subscriber task, by the queue of changes it follows.
struct Task(UnboundedSender<Change>);

impl Link for Task {
    fn is_alive(&self) -> bool {
        !self.0.is_closed()
    }

    fn send(&self, change: Change) {
        let _ = self.0.send(change);
    }
}

impl Notices {
    pub(crate) fn new(nodes: Vec<NodeAddr>, io_timeout: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                listeners: Arc::new(Mutex::new(Listeners::new(nodes.len()))),
                nodes,
                io_timeout,
            }),
        }
    }

    /// Listens on `channels` until the returned subscription is dropped; starts the nodes'
    /// subscriber tasks on `runtime` where none runs.
    pub(crate) fn subscribe<R: Runtime>(
        &self,
        runtime: &R,
        channels: Vec<Vec<u8>>,
    ) -> Subscription {
        Subscription(notice_board::Subscription::new(
            &self.shared.listeners,
            channels,
            Wake(Notify::new()),
            |node| {
                let (tx, rx) = mpsc::unbounded_channel();
                runtime.spawn(link::<R>(Arc::downgrade(&self.shared), node, rx));
                Some(Task(tx))
            },
        ))
    }
}

/// A lock listening for the release of its keys, until dropped.
pub(crate) struct Subscription(notice_board::Subscription<Wake, Task>);

impl Subscription {
    /// Resolves at the next release notice on any of its channels (at once if one came since
    /// the last wait).
    pub(crate) fn notified(&self) -> impl Future<Output = ()> + Send + 'static {
        let wake = self.0.waiter().clone();
        async move { wake.0.notified().await }
    }
}

/// A node's subscriber task: connects, subscribes to every channel on the board, then follows
/// the changes, delivers notices and drops channels that lingered. It ends when the connection
/// fails (a later subscription starts another) or when the client is gone.
async fn link<R: Runtime>(
    shared: Weak<Shared>,
    node: usize,
    mut changes: UnboundedReceiver<Change>,
) {
    let Some((client, io_timeout)) = shared
        .upgrade()
        .map(|s| (s.nodes[node].client().clone(), s.io_timeout))
    else {
        return;
    };
    let connected = tokio::select! {
        connected = client.get_async_pubsub() => connected.ok(),
        () = R::sleep_until(Instant::now() + io_timeout) => None,
    };
    if let Some(pubsub) = connected {
        let (mut sink, mut stream) = pubsub.split();
        let channels = match shared.upgrade() {
            Some(shared) => notice_board::lock(&shared.listeners).channels(),
            None => return,
        };
        let mut healthy = channels.is_empty() || sink.subscribe(channels).await.is_ok();
        let mut next_sweep = Instant::now() + LINGER;
        while healthy {
            tokio::select! {
                change = changes.recv() => {
                    healthy = match change {
                        Some(Change::Subscribe(channel)) => sink.subscribe(channel).await.is_ok(),
                        Some(Change::Unsubscribe(channel)) => sink.unsubscribe(channel).await.is_ok(),
                        // The client is gone.
                        None => return,
                    };
                }
                message = stream.next() => {
                    let (Some(message), Some(shared)) = (message, shared.upgrade()) else {
                        break;
                    };
                    if let Ok(channel) = message.get_channel::<Vec<u8>>() {
                        notice_board::lock(&shared.listeners).deliver(&channel);
                    }
                }
                () = R::sleep_until(next_sweep) => {
                    next_sweep = Instant::now() + LINGER;
                    let Some(shared) = shared.upgrade() else { return };
                    notice_board::lock(&shared.listeners).sweep(Instant::now());
                }
            }
        }
    }
    tracing::debug!(
        node,
        "release notices: no subscriber connection; pauses run out"
    );
    changes.close();
    if let Some(shared) = shared.upgrade() {
        // Our queue is closed: the slot holds us (or another ended task), never a newer one.
        notice_board::lock(&shared.listeners)
            .ended(Instant::now(), node, true, |task| !task.is_alive());
    }
}
