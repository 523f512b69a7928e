//! A simulated Redis master: the project's one fake node (`redlock_core::fake::FakeNode`, which
//! runs `SET NX PX` and the engine's Lua scripts as Redis does) on the node's own clock,
//! plus crashes.
//!
//! Keys expire by the node's own clock. A crash loses every key (no persistence: the worst case
//! the Redis page describes); a down node runs nothing.

use std::time::Duration;

use redlock_core::fake::FakeNode;
pub use redlock_core::fake::{ExtendSemantics, FenceFault};
use redlock_core::{Dialect, NodeBatch, ProofRead, Reply, SealRead, Transmit};

use super::clock::{Clock, Nanos};
use super::connections::{ReadBack, SealedBack};

/// One simulated Redis master.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    clock: Clock,
    /// The master's memory.
    store: FakeNode,
    /// The other server behind the node's address, after a failover: the demoted master (or
    /// the dead interim one), which answers writes with `READONLY`.
    standby: Option<FakeNode>,
    /// Which server is the master (0 or 1): a connection stays with the one it was opened to.
    active: usize,
    /// Identities handed out so far (a server starts with 1; each promotion takes a new one).
    identities: u64,
    up: bool,
    /// How many times it lost its memory (crashes and flushes).
    losses: u64,
    /// How many times a proof's claim set its missing epoch.
    claims: u64,
    /// Whether the next acquisition that reaches the node makes it evict every key first.
    evicts_next: bool,
    /// Per client, how many of the losses its own commands set off.
    own_losses: Vec<u64>,
}

impl Node {
    /// An empty, running node with this clock, whose fence counters break as `fault` says
    /// (`None`: they work), of `dialect`.
    pub(crate) fn speaking(
        clock: Clock,
        extend: ExtendSemantics,
        fault: Option<FenceFault>,
        dialect: Dialect,
    ) -> Self {
        Self {
            clock,
            store: FakeNode::with_extend(extend)
                .with_fence_fault(fault)
                .with_dialect(dialect),
            standby: None,
            active: 0,
            identities: 1,
            up: true,
            losses: 0,
            claims: 0,
            evicts_next: false,
            own_losses: Vec::new(),
        }
    }

    /// The node trusted as this release trusts one (`true`: its epoch stamped with its
    /// identity), or as a previous release left it (`false`: an epoch without an identity,
    /// which adopts whatever identity the node has when it is first proved — a failover
    /// before that included; README, *restart-aware voting*).
    pub(crate) fn stamped(mut self, stamped: bool) -> Self {
        if stamped {
            self.store.trust();
        }
        self
    }

    /// The node with its scripts comparing its identity with its epoch's (`false`: as before
    /// the identity, a negative control).
    pub(crate) fn with_identity_check(mut self, check: bool) -> Self {
        self.store = self.store.with_identity_check(check);
        self
    }

    /// The node with a `maxmemory-policy` that evicts keys (`true`), which its `INFO` shows.
    pub(crate) fn evicting(mut self, evicts: bool) -> Self {
        self.store.set_evicting(evicts);
        self
    }

    /// `SWAPDB`: another database of the same server comes in (its own old epoch, stamped
    /// there, no lock key). Nothing is pushed: no loss a connection hears of.
    pub(crate) fn swap_database(&mut self) {
        self.store.swap_database();
    }

    /// Evicts every lock key on its own, the epoch kept. Nothing is pushed.
    pub(crate) fn evict_lock_keys(&mut self) {
        self.store.evict_lock_keys();
    }

    /// Whether the node is running.
    pub(crate) fn is_up(&self) -> bool {
        self.up
    }

    /// The node's clock.
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// Stops the node; every key is lost.
    pub(crate) fn crash(&mut self) {
        self.up = false;
        self.flush();
    }

    /// Stops the node; it comes back from a snapshot taken before any of its lock keys was
    /// set: those are lost, the epoch comes back, and the node has a new identity.
    pub(crate) fn crash_to_snapshot(&mut self) {
        self.up = false;
        self.losses += 1;
        self.store.restart_from_snapshot();
    }

    /// Loses every key and stays up (`FLUSHALL`, or the epoch evicted with the keys): its
    /// connections stay open.
    pub(crate) fn flush(&mut self) {
        self.losses += 1;
        self.store.forget_all();
    }

    /// How many times it lost its memory so far.
    pub(crate) fn losses(&self) -> u64 {
        self.losses
    }

    /// How many of those `client`'s own commands set off.
    pub(crate) fn own_losses(&self, client: usize) -> u64 {
        self.own_losses.get(client).copied().unwrap_or(0)
    }

    /// The node reaches its memory limit: the next acquisition to reach it evicts every key
    /// first.
    pub(crate) fn arm_eviction(&mut self) {
        self.evicts_next = true;
    }

    /// Starts the node again, empty.
    pub(crate) fn restart(&mut self) {
        self.up = true;
    }

    /// Which server is the master now (0 or 1): new connections go to it.
    pub(crate) fn active(&self) -> usize {
        self.active
    }

    /// Whether the node's address leads to the interim master of a failover.
    pub(crate) fn failed_over(&self) -> bool {
        self.standby.is_some()
    }

    /// A graceful `FAILOVER`: the replica, which has every key, is promoted (a new identity)
    /// and the master becomes its replica, keeping what it had. Never during one.
    pub(crate) fn fail_over(&mut self) {
        if self.failed_over() {
            return;
        }
        let mut promoted = self.store.clone();
        self.identities += 1;
        promoted.promote(self.identities);
        self.standby = Some(std::mem::replace(&mut self.store, promoted));
        self.active = 1 - self.active;
    }

    /// The interim master dies and the demoted one is promoted again (a new identity) with
    /// what it had at the failover: the interim master's writes never reached it. The dead
    /// server comes back later as a fresh replica (its connections all ended).
    pub(crate) fn fail_back(&mut self) {
        let Some(mut old) = self.standby.take() else {
            return;
        };
        self.identities += 1;
        old.promote(self.identities);
        self.store = old;
        self.active = 1 - self.active;
    }

    /// The node's clock at true time `t`.
    fn local(&self, t: Nanos) -> Duration {
        Duration::from_nanos(self.clock.local(t))
    }

    /// The token under `key` at true time `t`, if the key is alive.
    pub(crate) fn holder(&self, t: Nanos, key: &[u8]) -> Option<&[u8]> {
        self.store.holder(self.local(t), key)
    }

    /// Runs a batch at true time `t` (the node must be up) on `server` (the one its connection
    /// was opened to; `None`: the master) and returns Redis's answers, one per request: in the forms `plan` (a tracked connection's) says, after its proof reads, or
    /// each in its usual form on this node.
    pub(crate) fn run(
        &mut self,
        t: Nanos,
        client: usize,
        server: Option<usize>,
        transmits: &[Transmit],
        plan: Option<&NodeBatch>,
    ) -> (Vec<Reply>, ReadBack) {
        debug_assert!(self.up);
        if server.is_some_and(|server| server != self.active) {
            // A replica: every request writes, and none runs (no proof read counts either).
            let read_only = Reply::Error(redlock_core::NodeErrorKind::ReadOnly);
            return (vec![read_only; transmits.len()], ReadBack::default());
        }
        let now = self.local(t);
        let acquires = transmits
            .iter()
            .any(|t| t.command.op() == redlock_core::Op::SetIfAbsent);
        if self.evicts_next && acquires {
            // The batch needs memory the node does not have: it evicts before running it.
            self.evicts_next = false;
            self.flush();
            if self.own_losses.len() <= client {
                self.own_losses.resize(client + 1, 0);
            }
            self.own_losses[client] += 1;
        }
        let mut read_back = ReadBack::default();
        for read in plan.map_or(&[][..], NodeBatch::reads) {
            match read {
                ProofRead::Caching => read_back.cached = true,
                ProofRead::Epoch => read_back.epoch = Some(self.store.epoch_value()),
                ProofRead::Pttl => read_back.pttl = Some(self.store.epoch_pttl(now)),
                ProofRead::Time => {
                    read_back.time = Some((now.as_secs(), u64::from(now.subsec_micros())));
                }
                ProofRead::Stamped => read_back.stamped = Some(self.store.stamped_value()),
                ProofRead::Info => read_back.info = Some(self.store.info_value()),
                ProofRead::Claim => {
                    read_back.claimed = self.store.claim_epoch(now);
                    self.claims += u64::from(read_back.claimed);
                }
                // The simulator's connections subscribe to no eviction events, so they never
                // ask; unanswered, the read leaves the eviction count in the seal.
                ProofRead::Notifications => {}
                // The simulated nodes deny no key to anyone.
                ProofRead::Markable => read_back.markable = true,
                // A transaction runs in one step: no other client's command comes between.
                ProofRead::Multi | ProofRead::Exec => {}
                ProofRead::Marker => {
                    let write = plan.map(|plan| plan.read_args(ProofRead::Marker));
                    read_back.marker_written =
                        write.is_some_and(|args| self.store.run_marker_write(now, &args));
                }
            }
        }
        let replies = transmits
            .iter()
            .enumerate()
            .map(|(index, transmit)| {
                let command = &transmit.command;
                let Some(plan) = plan else {
                    return self.store.run(now, command);
                };
                let reply = self.store.run_form(now, command, plan.form(index, command));
                // A sealed request's reads run in its `MULTI`, right after it.
                let seal = plan.seal_reads(index);
                if !seal.is_empty() {
                    let read = |which| seal.contains(&which);
                    read_back.seals.push(SealedBack {
                        index,
                        epoch: self.store.epoch_value(),
                        stamped: self.store.stamped_value(),
                        claim_ttl: read(SealRead::ClaimTtl).then(|| self.store.epoch_pttl(now)),
                        evictions: read(SealRead::Evictions).then(|| self.store.stats_value()),
                        marker: read(SealRead::Marker).then(|| {
                            let args = plan.seal_args(index, SealRead::Marker);
                            args.get(1).is_some_and(|key| self.store.exists(now, key))
                        }),
                    });
                }
                reply
            })
            .collect();
        // The stamps the client sends right after these replies, run as if nothing came in
        // between (the client decides them from the same reads, through its own plan).
        if let Some(plan) = plan {
            let mut fed = plan.clone();
            read_back.feed(&mut fed);
            for stamp in fed.stamps() {
                self.store.run_stamp(now, &stamp);
            }
        }
        (replies, read_back)
    }

    /// How many times a proof's claim set its missing epoch.
    pub(crate) fn claims(&self) -> u64 {
        self.claims
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use redlock_core::{
        Acquire, AcquireOutcome, Command, Config, Extend, Lease, LockRequest, Output, Release,
        RetryPolicy,
    };

    use super::*;

    const MS: Nanos = 1_000_000;

    /// Runs one command in its usual form on `node` at true time `t`.
    fn run(node: &mut Node, t: Nanos, command: &Command) -> Reply {
        debug_assert!(node.up);
        let now = node.local(t);
        node.store.run(now, command)
    }

    fn first_send<T: std::fmt::Debug>(output: Output<T>) -> Command {
        match output {
            Output::Send(transmit) => transmit.command,
            other => panic!("{other:?}"),
        }
    }

    /// The engine's own commands for a lock on `resources` with `token`: acquire, release, and
    /// (from a lease the acquire wins) extend to `extend_ttl`.
    fn commands(resources: &[&str], token: &str, extend_ttl: u64) -> (Command, Command, Command) {
        // The plain forms (SET NX PX and the three scripts); restart-aware acquires are the
        // core's fake-node tests' business.
        let config = Config::builder(1)
            .retry(RetryPolicy::once())
            .restart_aware(false)
            .build()
            .expect("valid");
        let now = Instant::now();
        let mut request = LockRequest::new(resources[0], Duration::from_millis(100)).token(token);
        for r in &resources[1..] {
            request = request.resource(*r);
        }
        let mut rng = crate::rng::TestRng::new(1);
        let mut acquire = Acquire::new(now, &config, &request, rng.core()).expect("valid");
        let Output::Send(transmit) = acquire.poll_output(now) else {
            panic!("no send")
        };
        let set = transmit.command.clone();
        let reply = if resources.len() == 1 {
            Reply::Ok
        } else {
            Reply::Int(1)
        };
        acquire.handle_reply(now, transmit.id, reply);
        let lease: Lease = match acquire.poll_output(now) {
            Output::Done(AcquireOutcome::Acquired(lease)) => lease,
            other => panic!("{other:?}"),
        };
        let release = first_send(Release::new(now, &config, &lease).poll_output(now));
        let mut extend =
            Extend::new(now, &config, &lease, Duration::from_millis(extend_ttl)).expect("valid");
        (set, release, first_send(extend.poll_output(now)))
    }

    #[test]
    fn set_nx_px_expires_on_the_node_clock() {
        // 10 % fast: a 100 ms key is gone after 90.9 ms of true time.
        let mut node = Node::speaking(
            Clock::new(5 * MS, 100_000),
            ExtendSemantics::Pexpire,
            None,
            Dialect::SCRIPTS,
        );
        let (set, release, _) = commands(&["r"], "a", 100);
        let (other, _, _) = commands(&["r"], "b", 100);
        assert_eq!(run(&mut node, 0, &set), Reply::Ok);
        assert_eq!(run(&mut node, MS, &other), Reply::Nil);
        assert_eq!(node.holder(90 * MS, b"r"), Some(&b"a"[..]));
        assert_eq!(node.holder(91 * MS, b"r"), None);
        assert_eq!(run(&mut node, 91 * MS, &other), Reply::Ok);
        assert_eq!(
            run(&mut node, 92 * MS, &release),
            Reply::Int(-1),
            "held by b"
        );
        node.crash();
        assert!(!node.is_up());
        node.restart();
        assert_eq!(node.holder(92 * MS, b"r"), None, "a crash loses every key");
        assert_eq!(run(&mut node, 92 * MS, &release), Reply::Int(0));
    }

    #[test]
    fn scripts_are_all_or_nothing_and_compare_tokens() {
        let mut node = Node::speaking(
            Clock::new(0, 0),
            ExtendSemantics::Pexpire,
            None,
            Dialect::SCRIPTS,
        );
        let (set_ab, release_ab, extend_ab) = commands(&["a", "b"], "t1", 100);
        let (set_b, release_b, _) = commands(&["b"], "t2", 100);
        assert_eq!(run(&mut node, 0, &set_b), Reply::Ok);
        assert_eq!(
            run(&mut node, 0, &set_ab),
            Reply::Int(0),
            "b is taken: nothing set"
        );
        assert_eq!(node.holder(0, b"a"), None);
        assert_eq!(run(&mut node, 0, &extend_ab), Reply::Int(0), "not all ours");
        assert_eq!(run(&mut node, 0, &release_b), Reply::Int(1));
        assert_eq!(run(&mut node, 0, &release_b), Reply::Int(0));
        assert_eq!(run(&mut node, 0, &set_ab), Reply::Int(1));
        assert_eq!(run(&mut node, 50 * MS, &extend_ab), Reply::Int(1));
        assert_eq!(node.holder(149 * MS, b"b"), Some(&b"t1"[..]));
        assert_eq!(node.holder(150 * MS, b"a"), None);
        let (set_a, _, _) = commands(&["a"], "t1", 100);
        let later = 300 * MS;
        assert_eq!(run(&mut node, later, &set_a), Reply::Ok);
        assert_eq!(run(&mut node, later, &set_b), Reply::Ok);
        assert_eq!(
            run(&mut node, later, &release_ab),
            Reply::Int(-1),
            "b is someone else's"
        );
        assert_eq!(node.holder(later, b"a"), None, "ours went all the same");
        assert_eq!(node.holder(later, b"b"), Some(&b"t2"[..]));
    }

    #[test]
    fn pexpire_may_shorten_never_shorten_does_not() {
        let (set, _, extend_short) = commands(&["r"], "t", 10);
        for (semantics, alive_at_50ms) in [
            (ExtendSemantics::Pexpire, false),
            (ExtendSemantics::NeverShorten, true),
        ] {
            let mut node = Node::speaking(Clock::new(0, 0), semantics, None, Dialect::SCRIPTS);
            assert_eq!(run(&mut node, 0, &set), Reply::Ok);
            assert_eq!(run(&mut node, MS, &extend_short), Reply::Int(1));
            assert_eq!(
                node.holder(50 * MS, b"r").is_some(),
                alive_at_50ms,
                "{semantics:?}"
            );
        }
    }
}
