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
use std::sync::Arc;
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
