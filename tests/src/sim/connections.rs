//! Tracked connections: each client's connection to each node as the adapters keep it — a
//! [`MemoryWatch`] per connection, fed the node's pushes, and every request planned and counted
//! by the core's [`NodeBatch`] (the adapters' batch code, without the bytes), epoch creation on
//! nodes without scripts included.
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

use redlock_core::{Dialect, EpochCreation, MemoryWatch, NodeBatch, ProofRead, Reply, Transmit};

/// The connection a request went out on, and its plan there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Which connection to the node it went out on (counted from 0; a crash opens the next).
    connection: u64,
    /// The request as a batch of one on that connection.
    pub(crate) batch: NodeBatch,
}

/// What a node answered to a batch's proof reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReadBack {
    /// `GET` of the epoch key, when it was read.
    pub(crate) epoch: Option<Option<Vec<u8>>>,
    /// `TIME` as `[seconds, microseconds]`, when it was read.
    pub(crate) time: Option<(u64, u64)>,
}

impl ReadBack {
    /// What a node whose epoch reads `epoch` and whose clock reads `now` answers to `reads`.
    pub(crate) fn of(
        reads: &[ProofRead],
        epoch: Option<Vec<u8>>,
        now: std::time::Duration,
    ) -> Self {
        let mut back = Self::default();
        for read in reads {
            match read {
                ProofRead::Epoch => back.epoch = Some(epoch.clone()),
                ProofRead::Time => {
                    back.time = Some((now.as_secs(), u64::from(now.subsec_micros())));
                }
            }
        }
        back
    }
}

/// An epoch creation on its way: sent on `connection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Creation {
    connection: u64,
    pub(crate) epoch: EpochCreation,
}

/// One client's connection to one node.
#[derive(Debug, Clone)]
struct Connection {
    /// Which connection this is (counted from 0; a crash opens the next).
    number: u64,
    watch: MemoryWatch,
    /// The node's loss count the connection has heard of.
    losses_heard: u64,
}

/// Every client's connections to every node.
#[derive(Debug, Clone)]
pub(crate) struct Connections {
    /// `[client][node]`.
    connections: Vec<Vec<Connection>>,
    dialect: Dialect,
    deaf: bool,
}

impl Connections {
    /// Connections for `clients` × `nodes` of `dialect`; `deaf` only for the negative control
    /// (invalidations unheard).
    pub(crate) fn new(clients: usize, nodes: usize, dialect: Dialect, deaf: bool) -> Self {
        let connection = Connection {
            number: 0,
            watch: Self::watch(deaf),
            losses_heard: 0,
        };
        Self {
            connections: vec![vec![connection; nodes]; clients],
            dialect,
            deaf,
        }
    }

    fn watch(deaf: bool) -> MemoryWatch {
        if deaf {
            MemoryWatch::deaf()
        } else {
            MemoryWatch::new()
        }
    }

    /// A request of `client` goes out to `node`.
    pub(crate) fn send(&self, client: usize, node: usize, transmit: &Transmit) -> Sent {
        let connection = &self.connections[client][node];
        Sent {
            connection: connection.number,
            batch: NodeBatch::new(
                std::slice::from_ref(transmit),
                &self.dialect,
                Some(&connection.watch),
            ),
        }
    }

    /// `node` crashed: every connection to it ends, and the next request opens a new one
    /// (which proves again).
    pub(crate) fn crash(&mut self, node: usize, losses: u64) {
        for row in &mut self.connections {
            let connection = &mut row[node];
            connection.watch.handle_closed();
            *connection = Connection {
                number: connection.number + 1,
                watch: Self::watch(self.deaf),
                losses_heard: losses,
            };
        }
    }

    /// The watch a message that went out on connection `number` is counted by, once every push
    /// the node sent before it (it produced it after `losses` losses) was heard: the
    /// connection's own, or — for a connection that ended — one that saw it end.
    fn heard(
        &mut self,
        client: usize,
        node: usize,
        number: u64,
        losses: u64,
    ) -> Option<&mut MemoryWatch> {
        let connection = &mut self.connections[client][node];
        if number != connection.number {
            return None;
        }
        if losses > connection.losses_heard {
            connection.losses_heard = losses;
            connection.watch.handle_invalidation(true, []);
        }
        Some(&mut connection.watch)
    }

    /// A reply reaches `client` from `node`, produced when the node had lost its memory
    /// `losses` times: the engine's reply as the connection counts it, and the epoch to create
    /// on the node, if any.
    pub(crate) fn reply(
        &mut self,
        client: usize,
        node: usize,
        sent: Sent,
        losses: u64,
        read_back: &ReadBack,
        reply: Reply,
    ) -> (Reply, Option<Creation>) {
        let Sent {
            connection,
            mut batch,
        } = sent;
        if let Some(epoch) = &read_back.epoch {
            batch.handle_epoch(Ok(epoch.as_deref()));
        }
        if let Some(time) = read_back.time {
            batch.handle_time(Ok(Some(time)));
        }
        let mut ended = MemoryWatch::new();
        ended.handle_closed();
        let watch = self
            .heard(client, node, connection, losses)
            .unwrap_or(&mut ended);
        let mut answer = [reply];
        let creation = batch.finish(Some(watch), &mut answer);
        let creation = creation.map(|epoch| Creation { connection, epoch });
        (answer[0], creation)
    }

    /// The reply to `creation`'s `SET epoch NX` reaches `client` from `node` (produced after
    /// `losses` losses): whether the epoch must be deleted again.
    pub(crate) fn created(
        &mut self,
        client: usize,
        node: usize,
        creation: Creation,
        losses: u64,
    ) -> bool {
        let mut ended = MemoryWatch::new();
        ended.handle_closed();
        let watch = self
            .heard(client, node, creation.connection, losses)
            .unwrap_or(&mut ended);
        !creation.epoch.holds(Some(watch))
    }
}
