//! Restart-aware voting for the price of a plain `SET`: a connection's
//! [`MemoryWatch`](redlock_core::MemoryWatch), fed by its node's pushes (see the core's
//! `MemoryWatch` docs for the protocol).
//!
//! A connection tracks its node's memory only when it speaks RESP3 and the node accepts
//! `CLIENT TRACKING ON`; otherwise ([`Tracking`] absent) every restart-checked acquisition
//! keeps its script, as before. Every push the connection reads reaches the watch before the
//! reply that followed it is counted: the async connection hands each push to
//! [`Tracking::handle_push`] inside its read loop, ahead of the replies after it; the blocking
//! connection queues them, and [`Tracking::drain`] runs before a batch's replies are counted.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redis::{PushInfo, PushKind, Value};
use redlock_core::{MemoryWatch, WatchFault};

/// How a client's connections watch their nodes' memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryWatchSettings {
    /// No client tracking: every restart-checked acquisition is checked on its own
    /// ([`Builder::client_tracking`](crate::Builder::client_tracking)).
    pub untracked: bool,
    /// Negative controls only: a safeguard of the watches switched off.
    #[doc(hidden)]
    pub fault: Option<WatchFault>,
    /// Whether the client's acquisitions check the node's memory at all (restart-aware
    /// voting): a client that never proves a cluster master's slots needs no tracking on its
    /// master connections (set by the builder from the engine's settings).
    pub(crate) restart_unaware: bool,
}

/// One connection's watch over its node's memory: one `Arc`, so that a batch's clone of its
/// connection's watch costs one count up and one down.
#[derive(Debug, Clone)]
pub(crate) struct Tracking(Arc<Watched>);

/// What a connection's [`Tracking`] clones share.
#[derive(Debug)]
struct Watched {
    watch: Mutex<MemoryWatch>,
    /// The pushes a blocking connection read, not yet handed to the watch.
    queued: Option<Mutex<Receiver<PushInfo>>>,
    /// The channel of the node's eviction events in the connection's database
    /// ([`redlock_core::eviction_channel`]).
    evictions: Box<[u8]>,
}

impl Tracking {
    /// A watch for a new connection to `database`; `fault` only for negative controls.
    #[cfg(any(feature = "tokio", feature = "smol", test))]
    pub(crate) fn new(fault: Option<WatchFault>, database: u32) -> Self {
        Self::with_queue(fault, database, None)
    }

    /// A watch for a blocking connection to `database` whose pushes arrive on `pushes`.
    #[cfg(feature = "blocking")]
    pub(crate) fn queued(
        fault: Option<WatchFault>,
        database: u32,
        pushes: Receiver<PushInfo>,
    ) -> Self {
        Self::with_queue(fault, database, Some(Mutex::new(pushes)))
    }

    fn with_queue(
        fault: Option<WatchFault>,
        database: u32,
        queued: Option<Mutex<Receiver<PushInfo>>>,
    ) -> Self {
        Self(Arc::new(Watched {
            watch: Mutex::new(MemoryWatch::with_fault(fault)),
            queued,
            evictions: redlock_core::eviction_channel(database).into(),
        }))
    }

    /// The channel to subscribe the connection to, right after tracking is on: the node's
    /// eviction events in its database. Once subscribed ([`subscribed`](Self::subscribed)),
    /// each proof asks the node whether it publishes them.
    pub(crate) fn eviction_channel(&self) -> &[u8] {
        &self.0.evictions
    }

    /// The connection subscribed to [`eviction_channel`](Self::eviction_channel).
    pub(crate) fn subscribed(&self) {
        self.lock().handle_subscribed();
    }

    /// The command that turns client tracking on for this watch's connection
    /// ([`MemoryWatch::tracking_on`]).
    pub(crate) fn tracking_on(&self) -> redis::Cmd {
        let mut cmd = redis::Cmd::new();
        for arg in self.lock().tracking_on() {
            cmd.arg(*arg);
        }
        cmd
    }

    /// Hands a push the node sent (or the connection's end, which the `redis` crate reports as
    /// a push) to the watch.
    pub(crate) fn handle_push(&self, push: &PushInfo) {
        let mut watch = self.lock();
        match &push.kind {
            PushKind::Invalidate => match push.data.first() {
                Some(Value::Array(keys)) | Some(Value::Set(keys)) => {
                    watch.handle_invalidation(false, keys.iter().filter_map(key_bytes));
                }
                // A null key list: every key (FLUSHALL, FLUSHDB); anything else is not trusted.
                _ => watch.handle_invalidation(true, []),
            },
            PushKind::Disconnection => watch.handle_closed(),
            // An eviction the node published: `[channel, key]`.
            PushKind::Message
                if push.data.first().and_then(key_bytes) == Some(&self.0.evictions[..]) =>
            {
                watch.handle_eviction();
            }
            _ => {}
        }
    }

    /// The connection ended or is given up.
    pub(crate) fn handle_closed(&self) {
        self.lock().handle_closed();
    }

    /// Hands every push a blocking connection has read so far to the watch.
    pub(crate) fn drain(&self) {
        let Some(queued) = &self.0.queued else {
            return;
        };
        let pushes = queued.lock().unwrap_or_else(PoisonError::into_inner);
        while let Ok(push) = pushes.try_recv() {
            self.handle_push(&push);
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, MemoryWatch> {
        self.0.watch.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn key_bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// The `redis` client of `client`'s node that speaks RESP3 (needed for pushes on the same
/// connection); the TLS settings and credentials are kept.
pub(crate) fn resp3_client(client: &redis::Client) -> redis::RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(settings))
}

/// Whether a RESP3 connection failed only because the node does not speak RESP3 (no `HELLO`,
/// or `NOPROTO`): connect again with RESP2, untracked. Any other failure is the connection's.
pub(crate) fn speaks_no_resp3(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::RESP3NotSupported || err.code() == Some("NOPROTO")
}

/// A connection to a node (`C`: the async or the blocking kind), what its node can run, and its
/// watch over the node's memory — none when the node does not speak RESP3 or refuses client
/// tracking: restart checks then keep their script.
#[derive(Debug, Clone)]
pub(crate) struct Connected<C> {
    /// The connection.
    pub conn: C,
    /// What its node can run.
    pub dialect: redlock_core::Dialect,
    /// Its watch over the node's memory.
    pub tracking: Option<Tracking>,
}

impl<C> Connected<C> {
    /// A connection made with `tracking` (if any), given how `CLIENT TRACKING ON` went: a node
    /// that will not track for it (an ACL without it, a server without it) leaves it untracked;
    /// any other failure (the node busy, loading, gone) is the connection's. Traced as
    /// `node`'s.
    pub(crate) fn new(
        conn: C,
        dialect: redlock_core::Dialect,
        tracking: Option<(Tracking, redis::RedisResult<()>)>,
        node: &str,
    ) -> redis::RedisResult<Self> {
        let tracking = match tracking {
            Some((tracking, Ok(()))) => Some(tracking),
            Some((_, Err(err))) if matches!(err.code(), Some("NOPERM" | "ERR")) => {
                tracing::debug!(node, %err, "no client tracking: restart checks by script");
                None
            }
            Some((_, Err(err))) => return Err(err),
            None => None,
        };
        tracing::debug!(node, ?dialect, tracking = tracking.is_some(), "connected");
        Ok(Self {
            conn,
            dialect,
            tracking,
        })
    }

    /// Gives the connection up: its watch vouches for nothing any more.
    pub(crate) fn close(self) {
        if let Some(tracking) = self.tracking {
            tracking.handle_closed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock_core::EPOCH_KEY;

    /// One instant for the whole test: a proof made at it is looked at at it, whatever the
    /// machine's load (a proof counts for half its TTL).
    fn at() -> std::time::Instant {
        static AT: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        *AT.get_or_init(std::time::Instant::now)
    }

    fn proven(tracking: &Tracking) {
        *tracking.lock() = MemoryWatch::proven_for_tests(1_000, at());
        assert!(tracking.lock().vouches_for(1_000, at()));
    }

    fn invalidate(data: Vec<Value>) -> PushInfo {
        PushInfo {
            kind: PushKind::Invalidate,
            data,
        }
    }

    #[test]
    fn pushes_about_the_epoch_or_every_key_void_the_proof() {
        let epoch = Value::BulkString(EPOCH_KEY.to_vec());
        for push in [
            invalidate(vec![Value::Array(vec![epoch.clone()])]),
            invalidate(vec![Value::Nil]),
            invalidate(vec![]),
            PushInfo {
                kind: PushKind::Disconnection,
                data: vec![],
            },
        ] {
            let tracking = Tracking::new(None, 0);
            proven(&tracking);
            tracking.handle_push(&push);
            assert!(!tracking.lock().vouches_for(1_000, at()), "{push:?}");
        }
    }

    #[test]
    fn pushes_about_other_keys_change_nothing() {
        let tracking = Tracking::new(None, 0);
        proven(&tracking);
        let other = Value::BulkString(b"redlock:res".to_vec());
        tracking.handle_push(&invalidate(vec![Value::Array(vec![other])]));
        assert!(tracking.lock().vouches_for(1_000, at()));
    }

    #[test]
    fn an_eviction_published_in_its_database_voids_the_proof() {
        let message = |channel: &[u8]| PushInfo {
            kind: PushKind::Message,
            data: vec![
                Value::BulkString(channel.to_vec()),
                Value::BulkString(b"any-key".to_vec()),
            ],
        };
        let tracking = Tracking::new(None, 2);
        proven(&tracking);
        // Another database's evictions, or another channel: nothing.
        tracking.handle_push(&message(b"__keyevent@0__:evicted"));
        tracking.handle_push(&message(b"redlock:released:x"));
        assert!(tracking.lock().vouches_for(1_000, at()));
        tracking.handle_push(&message(tracking.eviction_channel()));
        assert!(!tracking.lock().vouches_for(1_000, at()));
    }

    #[test]
    #[cfg(feature = "blocking")]
    fn a_blocking_connections_pushes_count_once_drained() {
        let (tx, rx) = std::sync::mpsc::channel();
        let tracking = Tracking::queued(None, 0, rx);
        proven(&tracking);
        tx.send(invalidate(vec![Value::Nil])).expect("open");
        assert!(tracking.lock().vouches_for(1_000, at()), "not drained yet");
        tracking.drain();
        assert!(!tracking.lock().vouches_for(1_000, at()));
    }
}
