//! Tracked connections: each client's connection to each node, with the
//! [`MemoryWatch`](redlock_core::MemoryWatch) that lets a proven connection acquire with a plain
//! `SET NX PX` — the adapters' per-connection restart check, modelled here so that the
//! simulator's checker sees it under every fault.
//!
//! The model of a connection:
//! - A node's memory losses are counted (`losses`). A reply carries the count of the node that
//!   produced it; a reply with a higher count than the connection has seen is delivered after
//!   an invalidation push (the node pushes ahead of any reply to a command it ran after the
//!   loss). So a reply that the network delays, reorders or drops never hides a loss from a
//!   later one — as on a real connection, where a loss of data means the connection ends.
//! - A crash ends every connection to the node (the next request opens a new one); a reply of an
//!   earlier connection never counts as vouched and never proves.
//! - A memory loss without a crash (`FLUSHALL`, an evicted epoch) keeps the connections: only
//!   the pushes tell.
//!
//! What it never does: decide anything itself — the watch (in the core) decides.

use redlock_core::{Command, MemoryCheck, MemoryWatch, Reply};

/// The connection a request went out on, and how its restart check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Which connection to the node it went out on (counted from 0; a crash opens the next).
    connection: u64,
    /// The check of a restart-checked acquisition, with its longest TTL.
    check: Option<(MemoryCheck, u64)>,
}

impl Sent {
    /// Whether the node runs the acquisition without its check (the connection vouches).
    pub(crate) fn vouched(&self) -> bool {
        matches!(self.check, Some((MemoryCheck::Vouched { .. }, _)))
    }
}

/// One client's connection to one node.
#[derive(Debug, Clone)]
struct Session {
    /// Which connection this is (counted from 0; a crash opens the next).
    connection: u64,
    watch: MemoryWatch,
    /// The node's loss count the connection has heard of.
    losses_heard: u64,
}

/// Every client's connections to every node.
#[derive(Debug, Clone)]
pub(crate) struct Sessions {
    /// `[client][node]`.
    sessions: Vec<Vec<Session>>,
    deaf: bool,
}

impl Sessions {
    /// Connections for `clients` × `nodes`; `deaf` only for the negative control (invalidations
    /// unheard).
    pub(crate) fn new(clients: usize, nodes: usize, deaf: bool) -> Self {
        let session = Session {
            connection: 0,
            watch: Self::watch(deaf),
            losses_heard: 0,
        };
        Self {
            sessions: vec![vec![session; nodes]; clients],
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
    pub(crate) fn send(&self, client: usize, node: usize, command: &Command) -> Sent {
        let session = &self.sessions[client][node];
        Sent {
            connection: session.connection,
            check: command
                .restart_check_ms()
                .map(|max| (session.watch.check(max), max)),
        }
    }

    /// `node` crashed: every connection to it ends, and the next request opens a new one
    /// (which proves again).
    pub(crate) fn crash(&mut self, node: usize, losses: u64) {
        for row in &mut self.sessions {
            let session = &mut row[node];
            session.watch.handle_closed();
            *session = Session {
                connection: session.connection + 1,
                watch: Self::watch(self.deaf),
                losses_heard: losses,
            };
        }
    }

    /// A reply reaches `client` from `node`, produced when the node had lost its memory
    /// `losses` times: the engine's reply, as the connection's watch counts it.
    pub(crate) fn reply(
        &mut self,
        client: usize,
        node: usize,
        sent: Sent,
        losses: u64,
        reply: Reply,
    ) -> Reply {
        let session = &mut self.sessions[client][node];
        if sent.connection != session.connection {
            // A reply of a connection that ended: the vote of a node that since restarted.
            return match sent.check {
                Some((MemoryCheck::Vouched { seen }, max)) => {
                    let mut ended = MemoryWatch::new();
                    ended.handle_closed();
                    ended.vouched_reply(seen, reply, max)
                }
                _ => reply,
            };
        }
        if losses > session.losses_heard {
            session.losses_heard = losses;
            session.watch.handle_invalidation(true, []);
        }
        match sent.check {
            Some((MemoryCheck::Vouched { seen }, max)) => {
                session.watch.vouched_reply(seen, reply, max)
            }
            Some((MemoryCheck::Prove { seen }, max)) => {
                session.watch.handle_proof(seen, reply, max);
                reply
            }
            None => reply,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(max: u64) -> Command {
        use std::time::{Duration, Instant};
        let config = redlock_core::Config::builder(1)
            .max_ttl(Duration::from_millis(max))
            .build()
            .expect("valid");
        let now = Instant::now();
        let request = redlock_core::LockRequest::new("r", Duration::from_millis(100));
        let mut rng = crate::rng::TestRng::new(1);
        let mut acquire =
            redlock_core::Acquire::new(now, &config, &request, rng.core()).expect("valid");
        match acquire.poll_output(now) {
            redlock_core::Output::Send(transmit) => transmit.command,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_loss_reaches_the_connection_with_the_first_reply_after_it() {
        let command = checked(1_000);
        let mut sessions = Sessions::new(1, 1, false);
        let prove = sessions.send(0, 0, &command);
        assert!(!prove.vouched());
        assert_eq!(sessions.reply(0, 0, prove, 0, Reply::Int(1)), Reply::Int(1));
        let vouched = sessions.send(0, 0, &command);
        assert!(vouched.vouched());
        // The node lost its memory before running it: refused.
        assert_eq!(
            sessions.reply(0, 0, vouched, 1, Reply::Ok),
            Reply::Int(-1_000)
        );
        assert!(!sessions.send(0, 0, &command).vouched(), "proves again");
        // The deaf control counts it.
        let mut deaf = Sessions::new(1, 1, true);
        let prove = deaf.send(0, 0, &command);
        deaf.reply(0, 0, prove, 0, Reply::Int(1));
        let vouched = deaf.send(0, 0, &command);
        assert_eq!(deaf.reply(0, 0, vouched, 1, Reply::Ok), Reply::Ok);
    }

    #[test]
    fn a_crash_ends_the_connection_and_its_replies() {
        let command = checked(1_000);
        let mut sessions = Sessions::new(1, 1, false);
        let prove = sessions.send(0, 0, &command);
        sessions.reply(0, 0, prove, 0, Reply::Int(1));
        let vouched = sessions.send(0, 0, &command);
        sessions.crash(0, 1);
        assert_eq!(
            sessions.reply(0, 0, vouched, 0, Reply::Ok),
            Reply::Int(-1_000)
        );
        assert!(!sessions.send(0, 0, &command).vouched());
    }
}
