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

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redlock_redis::NodeAddr;
use redlock_redis::notice_board::{Change, LINGER, NoticeBoard, Waiter};
use tokio::sync::Notify;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::runtime::Runtime;

/// How long a node whose subscriber connection failed is left alone: waiters then run out their
/// pauses instead of every one of them trying to connect to a dead node.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// The release notices of one client's nodes. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Notices {
    shared: Arc<Shared>,
}

struct Shared {
    nodes: Vec<NodeAddr>,
    io_timeout: Duration,
    state: Mutex<State>,
}

struct State {
    board: NoticeBoard<Wake>,
    /// Per node, the control queue of its subscriber task while one runs.
    links: Vec<Option<UnboundedSender<Change>>>,
    /// Per node, no new subscriber connection before this instant (its last one failed).
    quiet_until: Vec<Option<Instant>>,
}

/// A waiter's wake-up: a permit is stored when it is not waiting, so no notice is lost.
struct Wake(Notify);

impl Waiter for Wake {
    fn wake(&self) {
        self.0.notify_one();
    }
}

impl Notices {
    pub(crate) fn new(nodes: Vec<NodeAddr>, io_timeout: Duration) -> Self {
        let state = State {
            board: NoticeBoard::default(),
            links: vec![None; nodes.len()],
            quiet_until: vec![None; nodes.len()],
        };
        Self {
            shared: Arc::new(Shared {
                nodes,
                io_timeout,
                state: Mutex::new(state),
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
        let wake = Arc::new(Wake(Notify::new()));
        let now = Instant::now();
        let mut state = self.shared.lock();
        for node in 0..state.links.len() {
            let running = state.links[node].as_ref().is_some_and(|tx| !tx.is_closed());
            let resting = state.quiet_until[node].is_some_and(|until| now < until);
            if !running && !resting {
                let (tx, rx) = mpsc::unbounded_channel();
                state.links[node] = Some(tx);
                runtime.spawn(link::<R>(Arc::downgrade(&self.shared), node, rx));
            }
        }
        let changes = state.board.add(now, &channels, &wake);
        state.send(changes);
        drop(state);
        Subscription {
            shared: self.shared.clone(),
            channels,
            wake,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Passes changes to every running subscriber task (one that ended restarts from the board).
    fn send(&self, changes: Vec<Change>) {
        for change in changes {
            for tx in self.links.iter().flatten() {
                let _ = tx.send(change.clone());
            }
        }
    }
}

/// A lock listening for the release of its keys.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channels: Vec<Vec<u8>>,
    wake: Arc<Wake>,
}

impl Subscription {
    /// Resolves at the next release notice on any of its channels (at once if one came since
    /// the last wait).
    pub(crate) fn notified(&self) -> impl Future<Output = ()> + Send + 'static {
        let wake = self.wake.clone();
        async move { wake.0.notified().await }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.shared
            .lock()
            .board
            .remove(Instant::now(), &self.channels, &self.wake);
    }
}

/// A node's subscriber task: connects, subscribes to every channel on the board, then follows
/// the changes, delivers notices and drops channels that lingered. It ends when the connection
/// fails (a subscription after [`RECONNECT_AFTER`] starts another) or when the client is gone.
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
            Some(shared) => shared.lock().board.channels(),
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
                        shared.lock().board.deliver(&channel);
                    }
                }
                () = R::sleep_until(next_sweep) => {
                    next_sweep = Instant::now() + LINGER;
                    let Some(shared) = shared.upgrade() else { return };
                    let mut state = shared.lock();
                    let expired = state.board.sweep(Instant::now());
                    state.send(expired);
                }
            }
        }
    }
    tracing::debug!(
        node,
        "release notices: no subscriber connection; pauses run out"
    );
    if let Some(shared) = shared.upgrade()
        && let Some(until) = shared.lock().quiet_until.get_mut(node)
    {
        *until = Instant::now().checked_add(RECONNECT_AFTER);
    }
}
