//! The client builder every adapter shares: the same settings, checked the same way.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use redlock_core::{
    Config, ConfigBuilder, ConfigError, MAX_CLUSTER_VOTES, RetryPolicy, vote_slots,
};

use crate::error::Error;
use crate::node::{ClusterVote, NodeAddr};

/// The default bound on one request's I/O (connect, send, reply) to one node. The engine's own
/// per-node deadlines are usually much shorter and decide the vote; this only bounds how long a
/// request may occupy a dead or stopped node's connection.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Checked settings an adapter builds its client from.
#[derive(Debug)]
#[non_exhaustive]
pub struct Settings {
    /// The engine's configuration.
    pub config: Config,
    /// The nodes, in the order given.
    pub nodes: Vec<NodeAddr>,
    /// The bound on one request's I/O.
    pub io_timeout: Duration,
    /// How the connections watch their nodes' memory ([`Builder::client_tracking`]).
    pub memory_watch: crate::MemoryWatchSettings,
}

/// A client an adapter can build from [`Settings`].
pub trait FromSettings: Sized {
    /// Makes the client; connects to nothing yet.
    fn from_settings(settings: Settings) -> Result<Self, Error>;
}

/// Configures a client of type `C`. Every setting is checked by [`build`](Builder::build).
#[must_use]
pub struct Builder<C> {
    urls: Vec<String>,
    config: ConfigBuilder,
    io_timeout: Duration,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::Tls>,
    memory_watch: crate::MemoryWatchSettings,
    /// Nodes (by position) on which the operator says nothing ever runs `SWAPDB`.
    never_swapped: Vec<usize>,
    /// More seed URLs of cluster nodes, by position.
    seeds: Vec<(usize, Vec<String>)>,
    /// Cluster nodes that lend each lock several votes, by position.
    votes: Vec<(usize, usize)>,
    /// Where the client reaches the nodes a cluster announces.
    addresses: Option<crate::node::AddressMap>,
    client: PhantomData<fn() -> C>,
}

impl<C> fmt::Debug for Builder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may hold passwords: show only how many there are.
        f.debug_struct("Builder")
            .field("nodes", &self.urls.len())
            .finish_non_exhaustive()
    }
}

impl<C: FromSettings> Builder<C> {
    /// Starts configuring a client for the masters at `urls`.
    pub fn new<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        Self {
            // The driver's clock counts suspend time from two clocks' readings: its error bound
            // is taken from every validity (see `crate::clock`).
            config: Config::builder(urls.len()).clock_bound(crate::clock::READING_BOUND),
            urls,
            io_timeout: DEFAULT_IO_TIMEOUT,
            memory_watch: crate::MemoryWatchSettings::default(),
            never_swapped: Vec::new(),
            seeds: Vec::new(),
            votes: Vec::new(),
            addresses: None,
            #[cfg(feature = "tls")]
            tls: None,
            client: PhantomData,
        }
    }

    /// Adjusts any engine setting (quorum, drift, node timeout, minimum validity, key prefix,
    /// retry policy): see [`ConfigBuilder`].
    pub fn config(mut self, f: impl FnOnce(ConfigBuilder) -> ConfigBuilder) -> Self {
        self.config = f(self.config);
        self
    }

    /// How many nodes must grant a lock (default: a majority).
    pub fn quorum(self, quorum: usize) -> Self {
        self.config(|c| c.quorum(quorum))
    }

    /// The retry policy of `lock`.
    pub fn retry(self, retry: RetryPolicy) -> Self {
        self.config(|c| c.retry(retry))
    }

    /// Bytes put in front of every resource name to form the key.
    pub fn key_prefix(self, prefix: impl Into<Vec<u8>>) -> Self {
        self.config(|c| c.key_prefix(prefix))
    }

    /// The per-node timeout of the engine (default: derived from each lock's TTL).
    pub fn node_timeout(self, timeout: Duration) -> Self {
        self.config(|c| c.node_timeout(timeout))
    }

    /// Bounds one request's I/O on one node (default [`DEFAULT_IO_TIMEOUT`]); 1 ms to 1 hour.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// The CA to trust and the client certificate to show on `rediss://` nodes (feature
    /// `tls`); without it, `rediss://` uses the system's roots and no client certificate.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// **Unsafe on purpose, for negative controls only**: the client's connections ignore
    /// the pushes that tell them a node lost its memory, so restart-aware voting stops
    /// working for a node a connection has already proven. Tests use it to show that the
    /// pushes are what keeps a second holder out.
    #[doc(hidden)]
    pub fn deaf_memory_watch_for_tests(self) -> Self {
        self.memory_watch_fault_for_tests(redlock_core::WatchFault::Deaf)
    }

    /// **Unsafe on purpose, for negative controls only**: the client's connections' memory
    /// watches run with `fault` (see [`WatchFault`](redlock_core::WatchFault)), to show what
    /// the safeguard it switches off keeps out.
    #[doc(hidden)]
    pub fn memory_watch_fault_for_tests(mut self, fault: redlock_core::WatchFault) -> Self {
        self.memory_watch.fault = Some(fault);
        self
    }

    /// Whether connections prove a node's memory once and then acquire with a plain `SET NX PX`
    /// (client tracking, the default), or check it with every acquisition (`false`: the
    /// checked script each time, which costs the node a script per acquisition; a node that
    /// runs no script then refuses restart-checked acquisitions with `NoSafeForm`).
    ///
    /// Client tracking assumes each connection reaches its node directly. Turn it off for nodes
    /// behind a proxy that keeps the client's connection open while it dials its backend
    /// again: a restart or failover behind it would then never end the connection, and a
    /// proof would outlive the memory it proved.
    pub fn client_tracking(mut self, on: bool) -> Self {
        self.memory_watch.untracked = !on;
        self
    }

    /// Declares, knowingly, that nothing ever runs `SWAPDB` on the nodes at these positions of
    /// the URL list (counted from 0). On a node that can swap, a proven connection seals each
    /// acquisition (`MULTI`, the `SET`, `MGET` of the epoch and its stamp, `EXEC`: about twice
    /// the server CPU of a plain `SET`), because a database swapped in under the connection
    /// pushes nothing; on these nodes it sends a plain `SET NX PX` instead, unless the node
    /// evicts keys. If anything does swap such a node's databases, a second client can get a
    /// lock that is held. Safer: rename `SWAPDB` away on the server (`rename-command SWAPDB
    /// ""`), which the client sees by itself. A position past the list is an error at
    /// [`build`](Self::build).
    pub fn swapdb_never_runs_on(mut self, nodes: impl IntoIterator<Item = usize>) -> Self {
        self.never_swapped.extend(nodes);
        self
    }

    /// More URLs of the Redis or Valkey Cluster that node `node` (its position in the URL list,
    /// counted from 0) leads to: when the node's own URL does not answer, the client connects
    /// to these in turn to learn the cluster's slot map, so that one seed down at start does not
    /// take the node down. Once it has a map, it asks any master or replica of it again. The
    /// cluster stays one node, one vote; the masters are reached with the node URL's user,
    /// password and TLS settings, each seed with its own URL's. A seed must lead to the same
    /// cluster as the node's URL (two clusters behind one node would each lend it their vote).
    /// A position past the list, or a seed URL that is invalid or names another node's address,
    /// is an error at [`build`](Self::build).
    pub fn cluster_seeds<I, S>(mut self, node: usize, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        self.seeds.push((node, urls));
        self
    }

    /// Lets the Redis or Valkey Cluster that node `node` (its position in the URL list, from
    /// 0) leads to lend each lock `votes` votes instead of one: each vote keeps its keys in a
    /// slot of its own ([`vote_slots`](redlock_core::vote_slots): the middle slot of each of
    /// `votes` even shares of the slot range, fixed by `votes` alone), so that under the even
    /// slot layout of a cluster of at least `votes` masters each vote lands on another master,
    /// and one master's failover costs a lock one vote instead of the cluster's only one.
    ///
    /// The votes count among the others: a cluster with 3 votes and 2 standalone nodes is 5
    /// votes, a quorum of 3 (set [`quorum`](Self::quorum) over all votes). The votes are only
    /// as independent as the masters that serve them: after a resharding two of them may share
    /// a master, and masters on one machine fail together (`redlock nodes check` says where
    /// each vote's slot is served). Every lock's i-th vote lives in slot i, so a lock of
    /// several resources is one transaction per vote, whatever their hash tags. Each vote is a
    /// node of the client of its own (its own connections, labelled `host:port (vote 2 of
    /// 3)`), listed in place of the node. A vote whose slot the cluster serves from the master
    /// of an earlier vote's slot refuses every request (`shared master`): one master never
    /// casts two votes.
    ///
    /// **Every client of a lock must lend it the same votes**: the votes' keys carry their
    /// slots' tags, so a client with another vote count (or none) uses other keys, and both
    /// could hold the lock at once — as with two key prefixes. A server that does not run in cluster mode refuses
    /// every request of such a node (`not a cluster`); `votes` outside 1 to
    /// [`MAX_CLUSTER_VOTES`](redlock_core::MAX_CLUSTER_VOTES), a position past the list, or a
    /// node named twice are errors at [`build`](Self::build).
    pub fn cluster_votes(mut self, node: usize, votes: usize) -> Self {
        self.votes.push((node, votes));
        self
    }

    /// Where this client reaches the masters and replicas a cluster node's cluster announces
    /// (`CLUSTER SHARDS`): `map(host, port)` gives the address to dial instead, for NAT and
    /// container setups whose nodes announce addresses this client cannot reach (a cluster in
    /// Docker announcing its internal IPs, say). Without it, the announced address is dialled.
    /// The node URLs and seeds themselves are dialled as given; the masters keep the URL's
    /// user, password and TLS settings (a certificate must name the host dialled). Where a
    /// node announces no endpoint (`?`), the map sees the host its map was read from.
    pub fn cluster_addresses(
        mut self,
        map: impl Fn(&str, u16) -> (String, u16) + Send + Sync + 'static,
    ) -> Self {
        self.addresses = Some(crate::node::AddressMap(std::sync::Arc::new(map)));
        self
    }

    /// Checks the settings and the URLs and makes the client; connects to nothing yet.
    pub fn build(self) -> Result<C, Error> {
        // The engine's settings are checked first, with a node per vote (bad votes are named
        // below); again once the votes are spread.
        let votes: usize = self
            .votes
            .iter()
            .filter(|(_, votes)| (1..=MAX_CLUSTER_VOTES).contains(votes))
            .map(|(_, votes)| votes - 1)
            .sum();
        self.config.clone().nodes(self.urls.len() + votes).build()?;
        let (min, max) = (Duration::from_millis(1), Duration::from_secs(3600));
        if !(min..=max).contains(&self.io_timeout) {
            return Err(ConfigError::Duration {
                field: "io_timeout",
                got: self.io_timeout,
                min,
                max,
            }
            .into());
        }
        #[cfg(feature = "tls")]
        let mut nodes = NodeAddr::parse_all_with(&self.urls, self.tls.as_ref())?;
        #[cfg(not(feature = "tls"))]
        let mut nodes = NodeAddr::parse_all(&self.urls)?;
        if let Some(map) = &self.addresses {
            nodes = nodes
                .into_iter()
                .map(|node| node.with_addresses(map.clone()))
                .collect();
        }
        for &index in &self.never_swapped {
            let count = nodes.len();
            let Some(node) = nodes.get_mut(index) else {
                return Err(Error::InvalidNode {
                    index,
                    reason: format!(
                        "swapdb_never_runs_on names node #{index}, but there are {count} node URLs (positions 0 to {})",
                        count.saturating_sub(1)
                    ),
                });
            };
            *node = node.clone().declared_never_swapped();
        }
        for (index, urls) in &self.seeds {
            let count = nodes.len();
            #[cfg(feature = "tls")]
            let seeds = NodeAddr::parse_all_with(urls, self.tls.as_ref());
            #[cfg(not(feature = "tls"))]
            let seeds = NodeAddr::parse_all(urls);
            let reason = |reason: String| Error::InvalidNode {
                index: *index,
                reason,
            };
            let seeds = seeds.map_err(|err| match err {
                Error::InvalidNode {
                    index: seed,
                    reason,
                } => Error::InvalidNode {
                    index: *index,
                    reason: format!("cluster seed #{seed}: {reason}"),
                },
                other => other,
            })?;
            if let Some(taken) = seeds
                .iter()
                .find_map(|seed| nodes.iter().position(|n| n.label() == seed.label()))
            {
                return Err(reason(format!(
                    "a cluster seed is node #{taken}'s address; each cluster is one node"
                )));
            }
            let Some(node) = nodes.get_mut(*index) else {
                return Err(reason(format!(
                    "cluster_seeds names node #{index}, but there are {count} node URLs (positions 0 to {})",
                    count.saturating_sub(1)
                )));
            };
            *node = node.clone().with_seeds(seeds);
        }
        let (nodes, config) = spread_votes(nodes, &self.votes, self.config)?;
        let config = config.build()?;
        let memory_watch = crate::MemoryWatchSettings {
            restart_unaware: !config.restart_aware(),
            ..self.memory_watch
        };
        C::from_settings(Settings {
            config,
            nodes,
            io_timeout: self.io_timeout,
            memory_watch,
        })
    }
}

/// The nodes with each cluster node that lends several votes listed once per vote, and the
/// engine's settings with a node per vote, each vote's keys in its slot.
fn spread_votes(
    nodes: Vec<NodeAddr>,
    votes: &[(usize, usize)],
    mut config: ConfigBuilder,
) -> Result<(Vec<NodeAddr>, ConfigBuilder), Error> {
    if votes.is_empty() {
        // The engine counts exactly the nodes listed, whatever `config` was told.
        let count = nodes.len();
        return Ok((nodes, config.nodes(count)));
    }
    let count = nodes.len();
    let mut per_node: Vec<Option<usize>> = vec![None; count];
    for (given, &(index, wanted)) in votes.iter().enumerate() {
        let reason = |reason: String| Error::InvalidNode { index, reason };
        if index >= count {
            return Err(reason(format!(
                "cluster_votes names node #{index}, but there are {count} node URLs (positions 0 to {})",
                count.saturating_sub(1)
            )));
        }
        if !(1..=MAX_CLUSTER_VOTES).contains(&wanted) {
            return Err(reason(format!(
                "cluster_votes: {wanted} votes is not allowed; use 1 to {MAX_CLUSTER_VOTES}"
            )));
        }
        if votes[..given].iter().any(|&(other, _)| other == index) {
            return Err(reason(
                "cluster_votes names this node twice; give it once".to_owned(),
            ));
        }
        per_node[index] = Some(wanted);
    }
    let mut spread = Vec::with_capacity(per_node.iter().map(|v| v.unwrap_or(1)).sum());
    for (node, wanted) in nodes.into_iter().zip(per_node) {
        let Some(votes) = wanted else {
            spread.push(node);
            continue;
        };
        let first = spread.len();
        for (vote, slot) in vote_slots(votes).enumerate() {
            config = config.key_slot(spread.len(), slot);
            spread.push(node.clone().voting_as(ClusterVote { first, vote, votes }));
        }
    }
    let total = spread.len();
    Ok((spread, config.nodes(total)))
}
