//! Tracked connections: each client's connection to each node as the adapters keep it — a
//! [`MemoryWatch`] per connection, fed the node's pushes, and every request planned and counted
//! by the core's [`NodeBatch`] (the adapters' batch code, without the bytes), the epoch claims
//! of nodes without scripts included.
//!
//! The model of a connection:
//! - A node's memory losses are counted (`losses`). A reply carries the count of the node that
//!   produced it; a reply with a higher count than the connection has seen is delivered after
//!   an invalidation push (the node pushes ahead of any reply to a command it ran after the
//!   loss). So a reply that the network delays, reorders or drops never hides a loss from a
//!   later one — as on a real connection, where a loss of data means the connection ends.
//! - A crash ends every connection to the node (the next request opens a new one): a reply of
//!   an earlier connection is counted by a watch that saw its connection end.
//! - A memory loss without a crash (`FLUSHALL`, an evicted epoch) keeps the connections: only
//!   the pushes tell.
//!
//! What it never does: decide anything itself — the core's `NodeBatch` and `MemoryWatch` do.

use std::time::Instant;

use redlock_core::{Dialect, MemoryWatch, NodeBatch, Reply, SealReplies, Transmit, WatchFault};

/// The connection a request went out on, and its plan there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Which connection to the node it went out on (counted from 0; a crash opens the next).
    connection: u64,
    /// Which of the node's servers the connection was opened to.
    pub(crate) server: usize,
    /// The request as a batch of one on that connection.
    pub(crate) batch: NodeBatch,
}

/// What a node answered to a batch's proof reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReadBack {
    /// Whether `CLIENT CACHING YES` was answered (always `OK` on a simulated node).
    pub(crate) cached: bool,
    /// `GET` of the epoch key, when it was read.
    pub(crate) epoch: Option<Option<Vec<u8>>>,
    /// `PTTL` of the epoch key, when it was read.
    pub(crate) pttl: Option<i64>,
    /// `TIME` as `[seconds, microseconds]`, when it was read.
    pub(crate) time: Option<(u64, u64)>,
    /// `GET` of the epoch's identity, when it was read.
    pub(crate) stamped: Option<Option<Vec<u8>>>,
    /// `INFO server replication stats memory`, when it was read.
    pub(crate) info: Option<Vec<u8>>,
    /// Per sealed request: what its seal reads answered inside its `EXEC`.
    pub(crate) seals: Vec<SealedBack>,
    /// Whether the proof's claim wrote the epoch.
    pub(crate) claimed: bool,
    /// Whether the node answered the marker probe (`EXISTS`).
    pub(crate) markable: bool,
    /// Whether a native proof's transaction wrote its marker.
    pub(crate) marker_written: bool,
}

/// What a sealed request's reads answered inside its `EXEC` (each `None` where not read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SealedBack {
    /// Which request of the batch.
    pub(crate) index: usize,
    /// The epoch's value.
    pub(crate) epoch: Option<Vec<u8>>,
    /// The identity it was stamped with.
    pub(crate) stamped: Option<Vec<u8>>,
    /// The epoch's `PTTL`.
    pub(crate) claim_ttl: Option<i64>,
    /// `INFO stats`.
    pub(crate) evictions: Option<Vec<u8>>,
    /// Whether the proof's marker exists (`EXISTS`).
    pub(crate) marker: Option<bool>,
}

impl ReadBack {
    /// Hands every read to `batch`, as an adapter hands it the replies.
    pub(crate) fn feed(&self, batch: &mut NodeBatch) {
        if self.cached {
            batch.handle_caching(Ok(()));
        }
        if let Some(epoch) = &self.epoch {
            batch.handle_epoch(Ok(epoch.as_deref()));
        }
        if let Some(pttl) = self.pttl {
            batch.handle_pttl(Ok(Some(pttl)));
        }
        if let Some(time) = self.time {
            batch.handle_time(Ok(Some(time)));
        }
        if let Some(stamped) = &self.stamped {
            batch.handle_stamped(Ok(stamped.as_deref()));
        }
        batch.handle_info(self.info.as_deref());
        batch.handle_claim(self.claimed);
        if self.markable {
            batch.handle_markable(Ok(()));
        }
        if self.marker_written {
            batch.handle_marker(Ok(()));
        }
        for sealed in &self.seals {
            let replies = SealReplies {
                marker: sealed.marker,
                epoch: sealed.epoch.as_deref(),
                stamped: sealed.stamped.as_deref(),
                claim_ttl: sealed.claim_ttl,
                evictions: sealed.evictions.as_deref(),
            };
            batch.handle_seal(sealed.index, replies);
        }
    }
}

/// One client's connection to one node.
#[derive(Debug, Clone)]
struct Connection {
    /// Which connection this is (counted from 0; a crash opens the next).
    number: u64,
    watch: MemoryWatch,
    /// The node's loss count the connection has heard of.
    losses_heard: u64,
    /// Which of the node's servers it was opened to (a failover does not move it).
    server: usize,
}

/// One client's connections to every node.
#[derive(Debug, Clone)]
pub(crate) struct Connections {
    /// By node.
    connections: Vec<Connection>,
    dialect: Dialect,
    fault: Option<WatchFault>,
}

impl Connections {
    /// Connections to `nodes` nodes of `dialect`; `fault` only for negative controls.
    pub(crate) fn new(nodes: usize, dialect: Dialect, fault: Option<WatchFault>) -> Self {
        let connection = Connection {
            number: 0,
            watch: MemoryWatch::with_fault(fault),
            losses_heard: 0,
            server: 0,
        };
        Self {
            connections: vec![connection; nodes],
            dialect,
            fault,
        }
    }

    /// A batch goes out to `node` at `now` on the client's clock.
    pub(crate) fn send(&self, node: usize, transmits: &[Transmit], now: Instant) -> Sent {
        let connection = &self.connections[node];
        Sent {
            connection: connection.number,
            server: connection.server,
            batch: NodeBatch::new(transmits, &self.dialect, Some(&connection.watch), now),
        }
    }

    /// The server of `node` the connection to it was opened to.
    pub(crate) fn server(&self, node: usize) -> usize {
        self.connections[node].server
    }

    /// The connection to `node` ended (it crashed after `losses` losses, or the client
    /// reconnects after a failover), and the next batch opens a new one to its server `server`
    /// (which proves again).
    pub(crate) fn crash(&mut self, node: usize, losses: u64, server: usize) {
        let connection = &mut self.connections[node];
        connection.watch.handle_closed();
        *connection = Connection {
            number: connection.number + 1,
            watch: MemoryWatch::with_fault(self.fault),
            losses_heard: losses,
            server,
        };
    }

    /// The watch a message that went out on connection `number` to `node` is counted by, once
    /// every push the node sent before it (it produced it after `losses` losses) was heard;
    /// `None` for a connection that ended.
    fn heard(&mut self, node: usize, number: u64, losses: u64) -> Option<&mut MemoryWatch> {
        let connection = &mut self.connections[node];
        if number != connection.number {
            return None;
        }
        if losses > connection.losses_heard {
            connection.losses_heard = losses;
            connection.watch.handle_invalidation(true, []);
        }
        Some(&mut connection.watch)
    }

    /// The replies to a batch `sent` to `node` arrive, produced when the node had lost its
    /// memory `losses` times: the engine's replies as the connection counts them.
    pub(crate) fn reply(
        &mut self,
        node: usize,
        sent: Sent,
        losses: u64,
        read_back: &ReadBack,
        replies: &[Reply],
    ) -> Vec<Reply> {
        let Sent {
            connection,
            mut batch,
            ..
        } = sent;
        read_back.feed(&mut batch);
        let mut ended = ended();
        let watch = self.heard(node, connection, losses).unwrap_or(&mut ended);
        let mut counted = replies.to_vec();
        batch.finish(Some(watch), &mut counted);
        counted
    }
}

/// The watch of a connection that ended: it vouches for nothing.
fn ended() -> MemoryWatch {
    let mut watch = MemoryWatch::new();
    watch.handle_closed();
    watch
}
