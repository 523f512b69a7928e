//! What the conformance suite needs from an adapter, in blocking form so that one suite drives
//! the async adapters (through their runtime) and the blocking one alike.

use std::time::{Duration, Instant};

use redlock_core::ReleaseReport;
use redlock_core::{ConfigBuilder, LockRequest, RetryPolicy};
use redlock_redis::Error;

/// Client settings a scenario may change; everything else stays at the adapter's default.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Nodes that must grant a lock.
    pub quorum: Option<usize>,
    /// The retry policy of `lock`.
    pub retry: Option<RetryPolicy>,
    /// The engine's per-node timeout.
    pub node_timeout: Option<Duration>,
    /// The key prefix.
    pub key_prefix: Option<Vec<u8>>,
    /// The CA and client certificate for `rediss://` nodes.
    pub tls: Option<redlock_redis::Tls>,
    /// The bound on one request's I/O.
    pub io_timeout: Option<Duration>,
    /// Negative controls only: a safeguard of the connections' memory watches switched off.
    pub memory_watch_fault: Option<redlock_core::WatchFault>,
    /// The longest TTL in use (how long a node that lost its memory sits out).
    pub max_ttl: Option<Duration>,
    /// No client tracking: every acquisition checks the node's memory on its own.
    pub untracked: bool,
    /// Nodes (by position) declared never to run `SWAPDB`.
    pub swapdb_never_runs_on: Vec<usize>,
    /// Restart-aware voting off (`false`): every acquisition a plain `SET NX PX`.
    pub restart_aware: Option<bool>,
    /// More seed URLs of cluster nodes, by position.
    pub cluster_seeds: Vec<(usize, Vec<String>)>,
    /// Cluster nodes that lend each lock several votes: (position, votes).
    pub cluster_votes: Vec<(usize, usize)>,
    /// Dial every node a cluster announces at this host (same port), whatever it announces.
    pub cluster_host: Option<String>,
}

impl Options {
    /// Applies the settings to an engine configuration.
    pub fn configure(&self, mut config: ConfigBuilder) -> ConfigBuilder {
        if let Some(quorum) = self.quorum {
            config = config.quorum(quorum);
        }
        if let Some(retry) = self.retry {
            config = config.retry(retry);
        }
        if let Some(timeout) = self.node_timeout {
            config = config.node_timeout(timeout);
        }
        if let Some(prefix) = &self.key_prefix {
            config = config.key_prefix(prefix.clone());
        }
        if let Some(max_ttl) = self.max_ttl {
            config = config.max_ttl(max_ttl);
        }
        if let Some(on) = self.restart_aware {
            config = config.restart_aware(on);
        }
        config
    }
}

/// What the work inside a scoped lock saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Work {
    /// Whether the work was told that the lock was lost.
    pub observed_loss: bool,
    /// How long the work ran.
    pub ran_for: Duration,
}

/// An adapter under test.
pub trait Adapter: Sized + Send + Sync + 'static {
    /// Its held lock.
    type Lock: HeldLock;
    /// Its name, for messages.
    const NAME: &'static str;
    /// Whether an acquisition can be abandoned half-way (async adapters: drop the future).
    const CANCELLABLE: bool;

    /// Builds a client for `urls`.
    fn build(urls: &[String], options: &Options) -> Result<Self, Error>;
    /// `lock(resource, ttl)`.
    fn lock(&self, resource: &str, ttl: Duration) -> Result<Self::Lock, Error>;
    /// `try_lock(resource, ttl)`.
    fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Self::Lock, Error>;
    /// The request form.
    fn acquire(&self, request: LockRequest) -> Result<Self::Lock, Error>;
    /// `trust_nodes()`: every node trusted (its epoch set to `0`), over the client's own
    /// connections; how many nodes answered that they are.
    fn trust_nodes(&self) -> Result<usize, Error>;
    /// `trust_nodes()`, which must answer and trust `count` nodes (votes, on a cluster node
    /// with several): `what` names the step in the panic message.
    fn trust_every_node(&self, count: usize, what: &str) {
        match self.trust_nodes() {
            Ok(trusted) => assert_eq!(trusted, count, "{}: {what}: nodes trusted", Self::NAME),
            Err(err) => panic!("{}: {what}: {err}", Self::NAME),
        }
    }
    /// The client's `flush(timeout)`: whether every request sent so far was answered in time.
    fn flush(&self, timeout: Duration) -> bool;
    /// `resume(resource, token, ttl)`: take over a lock another client acquired.
    fn resume(&self, resource: &str, token: &[u8], ttl: Duration) -> Result<Self::Lock, Error>;
    /// `release_by_token(resource, token)`: release a lock another client acquired.
    fn release_by_token(&self, resource: &str, token: &[u8]) -> Result<ReleaseReport, Error>;
    /// Starts `lock(resource, ttl)` and abandons it after `after` unless it finished; returns
    /// whether it finished (a finished lock is dropped unreleased).
    fn lock_abandoned_after(&self, resource: &str, ttl: Duration, after: Duration) -> bool;
    /// `with_lock(resource, ttl, work)` where the work runs for `hold` unless told the lock is
    /// lost, and runs `midway` (on a thread that may block) once `midway_at` has passed. Returns
    /// what `with_lock` returned and what the work saw (default if it never ran).
    fn with_lock_work(
        &self,
        resource: &str,
        ttl: Duration,
        hold: Duration,
        midway_at: Duration,
        midway: Box<dyn FnOnce() + Send>,
    ) -> (Result<(), Error>, Work);
}

/// A held lock of an adapter under test.
pub trait HeldLock: Send + std::fmt::Debug {
    /// The token stored under the keys.
    fn token(&self) -> Vec<u8>;
    /// The end of validity.
    fn valid_until(&self) -> Instant;
    /// The fencing token (locks acquired with `LockRequest::fenced()`).
    fn fence(&self) -> Option<u64>;
    /// `extend(ttl)`.
    fn extend(&mut self, ttl: Duration) -> Result<(), Error>;
    /// `extend(ttl)` through a shared reference (the lock shared between threads).
    fn extend_shared(&self, ttl: Duration) -> Result<(), Error>;
    /// `release()`.
    fn release(self) -> ReleaseReport;
    /// Starts the release and waits for nothing (async: the release future is dropped at
    /// once; blocking: the lock is dropped).
    fn release_unawaited(self);
    /// Starts an extension and waits for nothing where the adapter can (async: its future is
    /// dropped at once); a blocking adapter extends as usual.
    fn extend_unawaited(&self, ttl: Duration);
    /// `is_valid()`: not lost, and inside the validity.
    fn is_valid(&self) -> bool;
    /// Blocks until the lock is reported lost or `timeout` passes; whether it was.
    fn wait_lost(&self, timeout: Duration) -> bool;
}

/// Applies the transport settings of `options` to a client builder.
pub fn transport<C: redlock_redis::FromSettings>(
    mut builder: redlock_redis::Builder<C>,
    options: &Options,
) -> redlock_redis::Builder<C> {
    if let Some(tls) = &options.tls {
        builder = builder.tls(tls.clone());
    }
    if let Some(timeout) = options.io_timeout {
        builder = builder.io_timeout(timeout);
    }
    if options.untracked {
        builder = builder.client_tracking(false);
    }
    if let Some(fault) = options.memory_watch_fault {
        builder = builder.memory_watch_fault_for_tests(fault);
    }
    for (node, seeds) in &options.cluster_seeds {
        builder = builder.cluster_seeds(*node, seeds);
    }
    for &(node, votes) in &options.cluster_votes {
        builder = builder.cluster_votes(node, votes);
    }
    if let Some(host) = options.cluster_host.clone() {
        builder = builder.cluster_addresses(move |_, port| (host.clone(), port));
    }
    builder.swapdb_never_runs_on(options.swapdb_never_runs_on.iter().copied())
}

/// How many of a trust's answers say the node is trusted.
pub(super) fn granted(votes: &[redlock_redis::NodeReport<redlock_core::Vote>]) -> usize {
    votes
        .iter()
        .filter(|vote| vote.result == redlock_core::Vote::Granted)
        .count()
}
