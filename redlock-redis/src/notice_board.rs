//! Who waits for which release channel: the bookkeeping behind release notices, shared by the
//! async and blocking adapters (each brings its own way to wake a waiter and its own subscriber
//! connections).
//!
//! A channel is subscribed while some lock waits on it, and for [`LINGER`] after the last one
//! left: a client that locks the same key again and again under contention is then already
//! listening when its next round loses, instead of missing the release that comes while its
//! `SUBSCRIBE` is on the way. The board never decides anything about a lock; it only says whom
//! to wake.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a channel stays subscribed after its last waiter left.
pub const LINGER: Duration = Duration::from_secs(2);

/// A waiting lock, as the board wakes it.
pub trait Waiter: Send + Sync {
    /// A release notice came for one of its channels. Must not block; must not be lost if the
    /// waiter is not waiting at this very moment (store it for its next wait).
    fn wake(&self);
}

/// What a subscriber connection must do after a change of the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `SUBSCRIBE` to this channel.
    Subscribe(Vec<u8>),
    /// `UNSUBSCRIBE` from this channel.
    Unsubscribe(Vec<u8>),
}

struct Channel<W> {
    waiters: Vec<Arc<W>>,
    /// When the last waiter left (the channel lingers), or `None` while someone waits.
    idle_since: Option<Instant>,
}

/// The channels and their waiters.
pub struct NoticeBoard<W> {
    channels: HashMap<Vec<u8>, Channel<W>>,
}

impl<W> Default for NoticeBoard<W> {
    fn default() -> Self {
        Self {
            channels: HashMap::new(),
        }
    }
}

impl<W: Waiter> NoticeBoard<W> {
    /// `waiter` waits on `channels`; returns the subscriptions to make (channels nobody was
    /// subscribed to), after dropping those that lingered long enough.
    pub fn add(&mut self, now: Instant, channels: &[Vec<u8>], waiter: &Arc<W>) -> Vec<Change> {
        crate::telemetry::waiting(true);
        let mut changes = self.sweep(now);
        for channel in channels {
            let entry = self.channels.entry(channel.clone()).or_insert_with(|| {
                changes.push(Change::Subscribe(channel.clone()));
                Channel {
                    waiters: Vec::new(),
                    idle_since: None,
                }
            });
            entry.waiters.push(waiter.clone());
            entry.idle_since = None;
        }
        changes
    }

    /// `waiter` stops waiting on `channels`; a channel left without waiters lingers.
    pub fn remove(&mut self, now: Instant, channels: &[Vec<u8>], waiter: &Arc<W>) {
        crate::telemetry::waiting(false);
        for channel in channels {
            if let Some(entry) = self.channels.get_mut(channel) {
                if let Some(at) = entry.waiters.iter().position(|w| Arc::ptr_eq(w, waiter)) {
                    entry.waiters.swap_remove(at);
                }
                if entry.waiters.is_empty() {
                    entry.idle_since = Some(now);
                }
            }
        }
    }

    /// Drops the channels that lingered for [`LINGER`]; returns the unsubscriptions to make.
    pub fn sweep(&mut self, now: Instant) -> Vec<Change> {
        let mut changes = Vec::new();
        self.channels.retain(|channel, entry| {
            let expired = entry
                .idle_since
                .is_some_and(|since| now.saturating_duration_since(since) >= LINGER);
            if expired {
                changes.push(Change::Unsubscribe(channel.clone()));
            }
            !expired
        });
        changes
    }

    /// Wakes everyone waiting on `channel`.
    pub fn deliver(&self, channel: &[u8]) {
        if let Some(entry) = self.channels.get(channel) {
            for waiter in &entry.waiters {
                waiter.wake();
            }
        }
    }

    /// Every channel to be subscribed to, for a connection that (re)starts.
    pub fn channels(&self) -> Vec<Vec<u8>> {
        self.channels.keys().cloned().collect()
    }

    /// Whether no channel is subscribed (lingering ones included).
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }
}

/// An adapter's handle on one node's subscriber (a task or a thread, with its connection).
pub trait Link {
    /// Whether it still runs (a link that ended is replaced by the next subscription).
    fn is_alive(&self) -> bool;
    /// Passes a change on (a link that ended drops it: its successor starts from the board).
    fn send(&self, change: Change);
}

/// A client's release notices: the board, and per node its subscriber link and when a failed
/// one may be replaced. The adapters bring the links (async tasks, threads); the bookkeeping is
/// the same for all of them.
pub struct Listeners<W, L> {
    board: NoticeBoard<W>,
    links: Vec<Option<L>>,
    quiet_until: Vec<Option<Instant>>,
}

/// How long a node whose subscriber connection failed is left alone: waiters then run out their
/// pauses instead of every one of them trying to connect to a dead node.
pub const RECONNECT_AFTER: Duration = Duration::from_secs(1);

impl<W: Waiter, L: Link> Listeners<W, L> {
    /// No link yet for any of `nodes` nodes.
    pub fn new(nodes: usize) -> Self {
        Self {
            board: NoticeBoard::default(),
            links: (0..nodes).map(|_| None).collect(),
            quiet_until: vec![None; nodes],
        }
    }

    /// `waiter` waits on `channels`: starts a link with `start(node)` for each node that has
    /// none running (and is not resting after a failure), then subscribes where needed.
    pub fn subscribe(
        &mut self,
        now: Instant,
        channels: &[Vec<u8>],
        waiter: &Arc<W>,
        mut start: impl FnMut(usize) -> Option<L>,
    ) {
        for node in 0..self.links.len() {
            let running = self.links[node].as_ref().is_some_and(L::is_alive);
            let resting = self.quiet_until[node].is_some_and(|until| now < until);
            if !running && !resting {
                self.links[node] = start(node);
            }
        }
        let changes = self.board.add(now, channels, waiter);
        self.send(changes);
    }

    /// `waiter` stops waiting on `channels` (they linger).
    pub fn unsubscribe(&mut self, now: Instant, channels: &[Vec<u8>], waiter: &Arc<W>) {
        self.board.remove(now, channels, waiter);
    }

    /// Drops channels that lingered long enough, on every link.
    pub fn sweep(&mut self, now: Instant) {
        let changes = self.board.sweep(now);
        self.send(changes);
    }

    /// Wakes everyone waiting on `channel`.
    pub fn deliver(&self, channel: &[u8]) {
        self.board.deliver(channel);
    }

    /// Every channel a (re)starting link must subscribe to.
    pub fn channels(&self) -> Vec<Vec<u8>> {
        self.board.channels()
    }

    /// Node `node`'s link ended; `failed`: its connection failed, so leave the node alone for
    /// [`RECONNECT_AFTER`]. `is_it` tells the ended link from a newer one already in place.
    pub fn ended(&mut self, now: Instant, node: usize, failed: bool, is_it: impl Fn(&L) -> bool) {
        if self
            .links
            .get(node)
            .and_then(Option::as_ref)
            .is_some_and(is_it)
        {
            self.links[node] = None;
        }
        if failed && let Some(until) = self.quiet_until.get_mut(node) {
            *until = now.checked_add(RECONNECT_AFTER);
        }
    }

    fn send(&self, changes: Vec<Change>) {
        for change in changes {
            for link in self.links.iter().flatten() {
                link.send(change.clone());
            }
        }
    }
}

/// A client's listeners, shared between its waiting locks and its links.
pub type SharedListeners<W, L> = Arc<Mutex<Listeners<W, L>>>;

/// Locks the listeners (a panic elsewhere never makes them unusable: the state stays valid).
pub fn lock<W, L>(listeners: &Mutex<Listeners<W, L>>) -> MutexGuard<'_, Listeners<W, L>> {
    listeners.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A lock listening for the release of its keys, until dropped.
pub struct Subscription<W: Waiter, L: Link> {
    listeners: SharedListeners<W, L>,
    channels: Vec<Vec<u8>>,
    waiter: Arc<W>,
}

impl<W: Waiter, L: Link> Subscription<W, L> {
    /// Subscribes `waiter` to `channels` ([`Listeners::subscribe`], starting links with
    /// `start`).
    pub fn new(
        listeners: &SharedListeners<W, L>,
        channels: Vec<Vec<u8>>,
        waiter: W,
        start: impl FnMut(usize) -> Option<L>,
    ) -> Self {
        let waiter = Arc::new(waiter);
        lock(listeners).subscribe(Instant::now(), &channels, &waiter, start);
        Self {
            listeners: listeners.clone(),
            channels,
            waiter,
        }
    }

    /// The waiter, as the links wake it.
    pub fn waiter(&self) -> &Arc<W> {
        &self.waiter
    }
}

impl<W: Waiter, L: Link> Drop for Subscription<W, L> {
    fn drop(&mut self) {
        lock(&self.listeners).unsubscribe(Instant::now(), &self.channels, &self.waiter);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Waiter for Count {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn subscribes_once_wakes_waiters_and_unsubscribes_after_lingering() {
        let t0 = Instant::now();
        let mut board = NoticeBoard::default();
        let (a, b) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let x = vec![b"x".to_vec()];
        assert_eq!(
            board.add(t0, &x, &a),
            vec![Change::Subscribe(b"x".to_vec())]
        );
        assert_eq!(board.add(t0, &x, &b), vec![], "already subscribed");
        board.deliver(b"x");
        board.deliver(b"y");
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 1);

        board.remove(t0, &x, &a);
        board.remove(t0, &x, &b);
        board.deliver(b"x");
        assert_eq!(a.0.load(Ordering::SeqCst), 1, "a left");
        assert_eq!(board.sweep(t0 + LINGER / 2), vec![], "still lingering");
        // Back before the linger ended: no new SUBSCRIBE needed.
        assert_eq!(board.add(t0 + LINGER / 2, &x, &a), vec![]);
        board.remove(t0 + LINGER / 2, &x, &a);
        assert_eq!(board.sweep(t0 + LINGER), vec![], "the linger restarted");
        assert_eq!(
            board.sweep(t0 + LINGER / 2 + LINGER),
            vec![Change::Unsubscribe(b"x".to_vec())]
        );
        assert!(board.is_empty());
    }
}
