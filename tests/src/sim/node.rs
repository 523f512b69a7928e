//! A simulated Redis master: keys with a TTL measured on the node's own clock, `SET NX PX`, and
//! the engine's three Lua scripts, run atomically as Redis runs them.
//!
//! The node reads each command the way the server would receive it — through
//! [`Command::redis_form`] — so the simulator checks the adapters' view of a command, not the
//! engine's intent. A key is alive while the node's clock reads less than its expiry (real Redis
//! keeps it up to a millisecond longer, which can only help safety). A crash loses every key (no
//! persistence: the worst case the Redis page describes); a down node runs nothing.

use std::collections::BTreeMap;

use redlock_core::{Command, EXTEND_NEVER_SHORTENS, NodeErrorKind, RedisForm, Reply, Script};

use super::clock::{Clock, Nanos};

/// How the node runs the extend script's `PEXPIRE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendSemantics {
    /// A plain `PEXPIRE key ttl`: sets the TTL, shorter or longer.
    Pexpire,
    /// `PEXPIRE` only where `PTTL` is below the new TTL: a TTL is only ever lengthened.
    NeverShorten,
}

impl ExtendSemantics {
    /// What the engine's extend script does, as the engine declares it
    /// ([`EXTEND_NEVER_SHORTENS`]).
    pub fn of_engine() -> Self {
        if EXTEND_NEVER_SHORTENS {
            Self::NeverShorten
        } else {
            Self::Pexpire
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    token: Vec<u8>,
    /// Node-local time at which the key is gone.
    expires: Nanos,
}

/// One simulated Redis master.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    clock: Clock,
    keys: BTreeMap<Vec<u8>, Entry>,
    up: bool,
    extend: ExtendSemantics,
}

impl Node {
    /// An empty, running node with this clock.
    pub(crate) fn new(clock: Clock, extend: ExtendSemantics) -> Self {
        Self {
            clock,
            keys: BTreeMap::new(),
            up: true,
            extend,
        }
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
        self.keys.clear();
    }

    /// Starts the node again, empty.
    pub(crate) fn restart(&mut self) {
        self.up = true;
    }

    /// The token under `key` at true time `t`, if the key is alive.
    pub(crate) fn holder(&self, t: Nanos, key: &[u8]) -> Option<&[u8]> {
        self.alive(key, self.clock.local(t)).map(|e| &e.token[..])
    }

    fn alive(&self, key: &[u8], now: Nanos) -> Option<&Entry> {
        self.keys.get(key).filter(|e| now < e.expires)
    }

    fn set(&mut self, key: &[u8], token: &[u8], now: Nanos, ttl_ms: u64) {
        let expires = now.saturating_add(ttl_ms.saturating_mul(1_000_000));
        self.keys.insert(
            key.to_vec(),
            Entry {
                token: token.to_vec(),
                expires,
            },
        );
    }

    /// Runs `command` at true time `t` (the node must be up) and returns Redis's answer.
    pub(crate) fn run(&mut self, t: Nanos, command: &Command) -> Reply {
        debug_assert!(self.up);
        let now = self.clock.local(t);
        match command.redis_form() {
            // SET key token NX PX ttl: OK, or nil when the key exists.
            RedisForm::Set { key, token, ttl_ms } => {
                if self.alive(key, now).is_some() {
                    Reply::Nil
                } else {
                    self.set(key, token, now, ttl_ms);
                    Reply::Ok
                }
            }
            RedisForm::Script {
                script,
                spec,
                token,
                ttl_ms,
            } => {
                let keys: Vec<&[u8]> = spec.keys().collect();
                match script {
                    Script::Acquire => {
                        let Some(ttl_ms) = ttl_ms else {
                            return Reply::Error(NodeErrorKind::Other);
                        };
                        if keys.iter().any(|k| self.alive(k, now).is_some()) {
                            return Reply::Int(0);
                        }
                        for key in keys {
                            self.set(key, token, now, ttl_ms);
                        }
                        Reply::Int(1)
                    }
                    Script::Release => {
                        let (mut released, mut foreign) = (0, 0);
                        for key in keys {
                            match self.alive(key, now) {
                                Some(e) if e.token == token => {
                                    self.keys.remove(key);
                                    released += 1;
                                }
                                Some(_) => foreign += 1,
                                None => {}
                            }
                        }
                        Reply::Int(if foreign > 0 {
                            -1
                        } else if released > 0 {
                            1
                        } else {
                            0
                        })
                    }
                    Script::Extend => {
                        let Some(ttl_ms) = ttl_ms else {
                            return Reply::Error(NodeErrorKind::Other);
                        };
                        let all_ours = keys
                            .iter()
                            .all(|k| self.alive(k, now).is_some_and(|e| e.token == token));
                        if !all_ours {
                            return Reply::Int(0);
                        }
                        let expires = now.saturating_add(ttl_ms.saturating_mul(1_000_000));
                        for key in keys {
                            if let Some(entry) = self.keys.get_mut(key) {
                                entry.expires = match self.extend {
                                    ExtendSemantics::Pexpire => expires,
                                    ExtendSemantics::NeverShorten => entry.expires.max(expires),
                                };
                            }
                        }
                        Reply::Int(1)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use redlock_core::{
        Acquire, AcquireOutcome, Config, Extend, Lease, LockRequest, Output, Release, RetryPolicy,
    };

    use super::*;

    const MS: Nanos = 1_000_000;

    fn first_send<T: std::fmt::Debug>(output: Output<T>) -> Command {
        match output {
            Output::Send(transmit) => transmit.command,
            other => panic!("{other:?}"),
        }
    }

    /// The engine's own commands for a lock on `resources` with `token`: acquire, release, and
    /// (from a lease the acquire wins) extend to `extend_ttl`.
    fn commands(resources: &[&str], token: &str, extend_ttl: u64) -> (Command, Command, Command) {
        let config = Config::builder(1)
            .retry(RetryPolicy::once())
            .build()
            .expect("valid");
        let now = Instant::now();
        let mut request = LockRequest::new(resources[0], Duration::from_millis(100)).token(token);
        for r in &resources[1..] {
            request = request.resource(*r);
        }
        let mut rng = super::super::rng::SimRng::new(1);
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
        let mut node = Node::new(Clock::new(5 * MS, 100_000), ExtendSemantics::Pexpire);
        let (set, release, _) = commands(&["r"], "a", 100);
        let (other, _, _) = commands(&["r"], "b", 100);
        assert_eq!(node.run(0, &set), Reply::Ok);
        assert_eq!(node.run(MS, &other), Reply::Nil);
        assert_eq!(node.holder(90 * MS, b"r"), Some(&b"a"[..]));
        assert_eq!(node.holder(91 * MS, b"r"), None);
        assert_eq!(node.run(91 * MS, &other), Reply::Ok);
        assert_eq!(node.run(92 * MS, &release), Reply::Int(-1), "held by b");
        node.crash();
        assert!(!node.is_up());
        node.restart();
        assert_eq!(node.holder(92 * MS, b"r"), None, "a crash loses every key");
        assert_eq!(node.run(92 * MS, &release), Reply::Int(0));
    }

    #[test]
    fn scripts_are_all_or_nothing_and_compare_tokens() {
        let mut node = Node::new(Clock::new(0, 0), ExtendSemantics::Pexpire);
        let (set_ab, release_ab, extend_ab) = commands(&["a", "b"], "t1", 100);
        let (set_b, release_b, _) = commands(&["b"], "t2", 100);
        assert_eq!(node.run(0, &set_b), Reply::Ok);
        assert_eq!(
            node.run(0, &set_ab),
            Reply::Int(0),
            "b is taken: nothing set"
        );
        assert_eq!(node.holder(0, b"a"), None);
        assert_eq!(node.run(0, &extend_ab), Reply::Int(0), "not all ours");
        assert_eq!(node.run(0, &release_b), Reply::Int(1));
        assert_eq!(node.run(0, &release_b), Reply::Int(0));
        assert_eq!(node.run(0, &set_ab), Reply::Int(1));
        assert_eq!(node.run(50 * MS, &extend_ab), Reply::Int(1));
        assert_eq!(node.holder(149 * MS, b"b"), Some(&b"t1"[..]));
        assert_eq!(node.holder(150 * MS, b"a"), None);
        let (set_a, _, _) = commands(&["a"], "t1", 100);
        let later = 300 * MS;
        assert_eq!(node.run(later, &set_a), Reply::Ok);
        assert_eq!(node.run(later, &set_b), Reply::Ok);
        assert_eq!(
            node.run(later, &release_ab),
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
            let mut node = Node::new(Clock::new(0, 0), semantics);
            assert_eq!(node.run(0, &set), Reply::Ok);
            assert_eq!(node.run(MS, &extend_short), Reply::Int(1));
            assert_eq!(
                node.holder(50 * MS, b"r").is_some(),
                alive_at_50ms,
                "{semantics:?}"
            );
        }
    }
}
