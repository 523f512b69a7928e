//! Release notices: a waiting lock hears at once that its keys were released, instead of
//! sleeping out its retry pause — the blocking twin of the async adapters' notices.
//!
//! A client starts one subscriber thread (one connection) per node, the first time one of its
//! locks waits for a key another holder has, and shares it between all its waiting locks; who
//! waits where is a [`NoticeBoard`]. A notice arrives in the waiting lock's answer channel, so
//! the caller's single blocking wait covers replies, notices and the engine's deadline. An
//! uncontended lock never subscribes and costs nothing.
//!
//! A notice only shortens a pause (the engine decides,
//! [`Lifecycle::handle_wake`](redlock_core::Lifecycle::handle_wake)); a lost notice or a dead
//! subscriber connection only means waiting out the jittered pause. Nothing here decides
//! whether a lock is held.

use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use redis::RedisResult;
use redlock_redis::NodeAddr;
use redlock_redis::notice_board::{self, Change, LINGER, Link, Listeners, SharedListeners, Waiter};

use crate::conn::Arrival;

/// How often a subscriber thread with subscriptions looks up from its socket for new ones (a
/// blocking connection cannot be woken otherwise). Channels linger after their last waiter, so
/// a repeat contender rarely waits for this.
const POLL: Duration = Duration::from_millis(2);

/// The release notices of one client's nodes. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Notices {
    shared: Arc<Shared>,
}

struct Shared {
    nodes: Vec<NodeAddr>,
    io_timeout: Duration,
    listeners: SharedListeners<Wake, Thread>,
}

/// A waiting lock: a notice goes into its answer channel, where it waits anyway.
pub(crate) struct Wake(Sender<Arrival>);

impl Waiter for Wake {
    fn wake(&self) {
        // The lock may have stopped listening meanwhile; then nobody needs it.
        let _ = self.0.send(Arrival::Notice);
    }
}

/// A node's subscriber thread: its number (so that an ending thread never removes a newer one)
/// and the queue of changes it follows. It is alive until it says it ended.
pub(crate) struct Thread {
    number: u64,
    changes: Sender<Change>,
}

impl Link for Thread {
    fn is_alive(&self) -> bool {
        true
    }

    fn send(&self, change: Change) {
        let _ = self.changes.send(change);
    }
}

/// Numbers the subscriber threads.
static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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

    /// Sends a notice into `answers` for each release on `channels` until the returned
    /// subscription is dropped; starts subscriber threads where none runs.
    pub(crate) fn subscribe(
        &self,
        channels: Vec<Vec<u8>>,
        answers: Sender<Arrival>,
    ) -> Subscription {
        notice_board::Subscription::new(&self.shared.listeners, channels, Wake(answers), |node| {
            let number = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (tx, rx) = mpsc::channel();
            let shared = Arc::downgrade(&self.shared);
            thread::Builder::new()
                .name(format!(
                    "redlock-notices-{}",
                    self.shared.nodes[node].label()
                ))
                .spawn(move || link(&shared, node, number, &rx))
                .ok()
                .map(|_| Thread {
                    number,
                    changes: tx,
                })
        })
    }
}

/// A lock listening for the release of its keys; stops when dropped.
pub(crate) type Subscription = notice_board::Subscription<Wake, Thread>;

/// A node's subscriber thread: runs [`follow`] until its connection fails or the client is
/// gone, then makes way for a later one.
fn link(shared: &Weak<Shared>, node: usize, number: u64, changes: &Receiver<Change>) {
    let failed = match follow(shared, node, changes) {
        Ok(()) => false,
        Err(err) => {
            tracing::debug!(node, %err, "release notices: subscriber connection lost; pauses run out");
            true
        }
    };
    if let Some(shared) = shared.upgrade() {
        notice_board::lock(&shared.listeners).ended(Instant::now(), node, failed, |thread| {
            thread.number == number
        });
    }
}

/// Connects, subscribes to every channel on the board, then applies changes, delivers notices
/// and drops channels that lingered. `Ok` when the client is gone.
fn follow(shared: &Weak<Shared>, node: usize, changes: &Receiver<Change>) -> RedisResult<()> {
    let Some((client, io_timeout, channels)) = shared.upgrade().map(|s| {
        let channels = notice_board::lock(&s.listeners).channels();
        (s.nodes[node].client().clone(), s.io_timeout, channels)
    }) else {
        return Ok(());
    };
    let mut conn = client.get_connection_with_timeout(io_timeout)?;
    conn.set_write_timeout(Some(io_timeout))?;
    conn.set_read_timeout(Some(io_timeout))?;
    let mut pubsub = conn.as_pubsub();
    let mut subscribed = channels.len();
    if subscribed > 0 {
        pubsub.subscribe(channels)?;
    }
    let mut next_sweep = Instant::now() + LINGER;
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
            for change in pending {
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
                let Some(shared) = shared.upgrade() else {
                    return Ok(());
                };
                if let Ok(channel) = message.get_channel::<Vec<u8>>() {
                    notice_board::lock(&shared.listeners).deliver(&channel);
                }
            }
            Err(err) if err.is_timeout() => {}
            Err(err) => return Err(err),
        }
        if Instant::now() >= next_sweep {
            next_sweep = Instant::now() + LINGER;
            let Some(shared) = shared.upgrade() else {
                return Ok(());
            };
            notice_board::lock(&shared.listeners).sweep(Instant::now());
        }
    }
}
