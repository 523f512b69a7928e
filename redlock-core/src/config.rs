//! Settings shared by every lock a client takes, checked once into a [`Config`].

use std::sync::Arc;
use std::time::Duration;

use crate::error::ConfigError;
use crate::retry::{RetryPolicy, check_duration};
use crate::slot::Slot;
use crate::validity::Drift;

/// The most Redis masters one client may use. Redlock deployments use 3, 5 or 7; 64 leaves
/// room while keeping per-round bookkeeping small.
pub const MAX_NODES: usize = 64;
/// The longest key prefix.
pub const MAX_KEY_PREFIX: usize = 1024;
/// The longest drift floor (a floor above this is almost certainly a unit mistake).
pub const MAX_DRIFT_FLOOR: Duration = Duration::from_secs(3600);
/// The longest per-node timeout.
pub const MAX_NODE_TIMEOUT: Duration = Duration::from_secs(3600);
/// The default longest TTL ([`ConfigBuilder::max_ttl`]): a node that lost its memory waits this
/// long before it votes again. A minute covers the usual lock TTLs (seconds to tens of seconds).
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(60);

/// Checked client settings. Build one with [`Config::builder`]; a `Config` that exists is valid.
///
/// | setting | default | where it comes from |
/// |---|---|---|
/// | quorum | `nodes / 2 + 1` | the Redis distributed-locks page, step 3 |
/// | drift factor | 0.01 | the Redis page ("1% of the TTL"), node-redlock, redsync |
/// | drift floor | 2 ms | the Redis page ("plus 2 milliseconds"), node-redlock |
/// | node timeout | TTL / 10, clamped to 10 ms ..= 1 s, never past the validity | the Redis page asks for a timeout "much smaller than the TTL" |
/// | minimum validity | 0 (any validity left counts) | — |
/// | key prefix | none | — |
/// | retry | see [`RetryPolicy`] | node-redlock |
/// | restart-aware voting | on | the Redis page's "delayed restart", enforced by the client |
/// | max TTL | [`DEFAULT_MAX_TTL`] (60 s) | — |
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    nodes: usize,
    quorum: usize,
    drift: Drift,
    node_timeout: Option<Duration>,
    min_validity: Duration,
    /// Shared, so that a clone (one per lock lifecycle) allocates nothing.
    key_prefix: Arc<[u8]>,
    retry: RetryPolicy,
    restart_aware: bool,
    max_ttl: Duration,
    /// Per node, the slot whose tag goes before every key sent there (`None` everywhere when
    /// no node has one: then nothing is stored).
    key_slots: Option<Arc<[Option<Slot>]>>,
}

/// The longest clock bound ([`ConfigBuilder::clock_bound`]): a second.
pub const MAX_CLOCK_BOUND: Duration = Duration::from_secs(1);

impl Config {
    /// Starts building settings for `nodes` independent Redis masters.
    pub fn builder(nodes: usize) -> ConfigBuilder {
        ConfigBuilder {
            nodes,
            quorum: None,
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
            node_timeout: None,
            min_validity: Duration::ZERO,
            key_prefix: Vec::new(),
            retry: RetryPolicy::default(),
            restart_aware: true,
            max_ttl: DEFAULT_MAX_TTL,
            clock_bound: Duration::ZERO,
            key_slots: Vec::new(),
        }
    }

    /// Settings with every default for `nodes` masters.
    pub fn new(nodes: usize) -> Result<Self, ConfigError> {
        Self::builder(nodes).build()
    }

    /// The number of Redis masters.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// How many nodes must grant a lock.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The clock-drift allowance.
    pub fn drift(&self) -> Drift {
        self.drift
    }

    /// The per-node timeout for a request of a lock with this `ttl`: the configured value, or
    /// TTL / 10 clamped to 10 ms ..= 1 s. (Request deadlines are further capped at the validity.)
    pub fn node_timeout(&self, ttl: Duration) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1)))
    }

    /// The least validity a fresh lock must have left for the acquisition to count.
    pub fn min_validity(&self) -> Duration {
        self.min_validity
    }

    /// The bytes put in front of every resource name to form the Redis key.
    pub fn key_prefix(&self) -> &[u8] {
        &self.key_prefix
    }

    /// The default retry policy of `lock`.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Whether nodes that lost their memory are refused a vote (restart-aware voting).
    pub fn restart_aware(&self) -> bool {
        self.restart_aware
    }

    /// The longest TTL any lock may use: with restart-aware voting, how long a node that lost
    /// its memory waits before it votes again.
    pub fn max_ttl(&self) -> Duration {
        self.max_ttl
    }

    /// The slot whose tag goes before every key sent to node `node`
    /// ([`ConfigBuilder::key_slot`]), if it has one.
    pub fn key_slot(&self, node: usize) -> Option<Slot> {
        self.key_slots.as_ref()?.get(node).copied().flatten()
    }

    /// Every node's key slot, when any node has one.
    pub(crate) fn key_slots(&self) -> Option<&Arc<[Option<Slot>]>> {
        self.key_slots.as_ref()
    }

    /// The longest TTL in use, in ms, sent with every restart-aware acquire.
    pub(crate) fn max_ttl_ms(&self) -> Option<u64> {
        self.restart_aware
            .then(|| u64::try_from(self.max_ttl.as_millis()).unwrap_or(u64::MAX))
    }

    /// Checks a lock TTL against the longest TTL in use (only with restart-aware voting: without
    /// it, only the engine's own range applies).
    pub(crate) fn check_max_ttl(&self, ttl: Duration) -> Result<(), ConfigError> {
        if self.restart_aware && ttl > self.max_ttl {
            return Err(ConfigError::TtlAboveMax {
                got: ttl,
                max_ttl: self.max_ttl,
            });
        }
        Ok(())
    }
}

/// Builds a [`Config`]; nothing is checked until [`build`](ConfigBuilder::build).
#[derive(Debug, Clone)]
#[must_use]
pub struct ConfigBuilder {
    nodes: usize,
    quorum: Option<usize>,
    drift_factor: f64,
    drift_floor: Duration,
    node_timeout: Option<Duration>,
    min_validity: Duration,
    key_prefix: Vec<u8>,
    retry: RetryPolicy,
    restart_aware: bool,
    max_ttl: Duration,
    clock_bound: Duration,
    key_slots: Vec<(usize, Slot)>,
}

impl ConfigBuilder {
    /// How many nodes (votes) there are, replacing the count the builder started with.
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// Puts `{tag}` of `slot` ([`Slot::tag`]) before every key sent to node `node` (its
    /// position, from 0): how one Redis or Valkey Cluster lends a lock several votes, each a
    /// node of its own whose keys live in a slot of its own ([`vote_slots`](crate::vote_slots)),
    /// so that each vote lands on another master. The resources, tokens and everything else
    /// stay the same. A position past the node count is an error at [`build`](Self::build).
    pub fn key_slot(mut self, node: usize, slot: Slot) -> Self {
        self.key_slots.push((node, slot));
        self
    }

    /// How many nodes must grant a lock: a majority (`nodes / 2 + 1`) up to `nodes`.
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// The share of the TTL allowed for clock drift between nodes, in `[0, 1)`.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The fixed part of the drift allowance, up to [`MAX_DRIFT_FLOOR`].
    pub fn drift_floor(mut self, floor: Duration) -> Self {
        self.drift_floor = floor;
        self
    }

    /// The largest error of the clock the driver feeds the engine its instants with, up to
    /// [`MAX_CLOCK_BOUND`] (default zero): taken from every validity up front
    /// (`valid_until = t0 + ttl − drift − bound`, [`Drift::clock_bound`]). For an adapter
    /// whose clock counts the time the machine was suspended by reading two clocks, which are
    /// never read at the same instant: it counts as suspend only what grows beyond the bound,
    /// so a validity reads the same each time and is never later than the truth.
    pub fn clock_bound(mut self, bound: Duration) -> Self {
        self.clock_bound = bound;
        self
    }

    /// A fixed per-node timeout (1 ms ..= [`MAX_NODE_TIMEOUT`]) instead of the TTL-derived one.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// The least validity a fresh lock must have left; a quorum reached later than that counts
    /// as *too slow*.
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.min_validity = min;
        self
    }

    /// Bytes put in front of every resource name (for example `b"lock:"`).
    pub fn key_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The longest TTL any lock may use (default [`DEFAULT_MAX_TTL`]; 1 ms ..= [`MAX_TTL`](crate::MAX_TTL)). With
    /// restart-aware voting, a node that lost its memory refuses to vote for this long by its
    /// own clock, so keep it as short as your longest lock allows; a request above it is an
    /// error.
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = max_ttl;
        self
    }

    /// Turns restart-aware voting on (the default) or off.
    ///
    /// **Off is unsafe** unless every node keeps its keys across restarts (AOF with
    /// `appendfsync always`) or an operator delays every restart by the longest TTL: a node that
    /// restarted empty (or was flushed, or failed over to an empty replica) inside a holder's
    /// validity then votes for a second holder.
    pub fn restart_aware(mut self, on: bool) -> Self {
        self.restart_aware = on;
        self
    }

    /// The retry policy `lock` uses when a request does not bring its own.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Checks every setting and returns the [`Config`], or the first setting that is out of range.
    pub fn build(self) -> Result<Config, ConfigError> {
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return Err(ConfigError::NodeCount {
                got: self.nodes,
                max: MAX_NODES,
            });
        }
        let majority = crate::quorum::majority(self.nodes);
        let quorum = self.quorum.unwrap_or(majority);
        if quorum < majority || quorum > self.nodes {
            return Err(ConfigError::Quorum {
                got: quorum,
                nodes: self.nodes,
                min: majority,
                max: self.nodes,
            });
        }
        check_duration(
            "drift_floor",
            self.drift_floor,
            Duration::ZERO,
            MAX_DRIFT_FLOOR,
        )?;
        check_duration(
            "clock_bound",
            self.clock_bound,
            Duration::ZERO,
            MAX_CLOCK_BOUND,
        )?;
        let drift =
            Drift::new(self.drift_factor, self.drift_floor)?.with_clock_bound(self.clock_bound);
        if let Some(timeout) = self.node_timeout {
            check_duration(
                "node_timeout",
                timeout,
                Duration::from_millis(1),
                MAX_NODE_TIMEOUT,
            )?;
        }
        check_duration(
            "min_validity",
            self.min_validity,
            Duration::ZERO,
            crate::MAX_TTL,
        )?;
        if self.key_prefix.len() > MAX_KEY_PREFIX {
            return Err(ConfigError::KeyPrefixTooLong {
                len: self.key_prefix.len(),
                max: MAX_KEY_PREFIX,
            });
        }
        self.retry.check()?;
        check_duration(
            "max_ttl",
            self.max_ttl,
            Duration::from_millis(1),
            crate::MAX_TTL,
        )?;
        let key_slots = match self.key_slots.is_empty() {
            true => None,
            false => {
                let mut slots = vec![None; self.nodes];
                for &(node, slot) in &self.key_slots {
                    *slots.get_mut(node).ok_or(ConfigError::KeySlotNode {
                        node,
                        nodes: self.nodes,
                    })? = Some(slot);
                }
                Some(slots.into())
            }
        };
        Ok(Config {
            key_slots,
            nodes: self.nodes,
            quorum,
            drift,
            node_timeout: self.node_timeout,
            min_validity: self.min_validity,
            key_prefix: self.key_prefix.into(),
            retry: self.retry,
            restart_aware: self.restart_aware,
            max_ttl: self.max_ttl,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_slot_past_the_nodes_is_named() {
        let slot = crate::Slot::new(7).expect("a slot");
        let err = Config::builder(3)
            .key_slot(3, slot)
            .build()
            .expect_err("past");
        assert_eq!(err, ConfigError::KeySlotNode { node: 3, nodes: 3 });
        assert_eq!(
            err.to_string(),
            "key_slot: node #3 is not one of the 3 nodes (positions 0 to 2)"
        );
        let config = Config::builder(2)
            .nodes(3)
            .key_slot(2, slot)
            .build()
            .expect("valid");
        assert_eq!(config.nodes(), 3);
        assert_eq!(
            (0..3).map(|node| config.key_slot(node)).collect::<Vec<_>>(),
            [None, None, Some(slot)]
        );
        assert_eq!(Config::new(3).expect("valid").key_slot(0), None);
    }

    #[test]
    fn defaults_follow_the_redis_page() {
        let config = Config::new(5).expect("5 nodes are valid");
        assert_eq!(config.quorum(), 3);
        assert_eq!(config.drift().floor(), Duration::from_millis(2));
        assert_eq!(
            config.drift().of(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
        assert_eq!(
            config.node_timeout(Duration::from_secs(30)),
            Duration::from_secs(1)
        );
        assert_eq!(
            config.node_timeout(Duration::from_millis(50)),
            Duration::from_millis(10)
        );
        assert_eq!(
            config.node_timeout(Duration::from_secs(2)),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn node_count_is_bounded() {
        assert_eq!(
            Config::new(0),
            Err(ConfigError::NodeCount {
                got: 0,
                max: MAX_NODES
            })
        );
        assert!(Config::new(MAX_NODES).is_ok());
        assert!(matches!(
            Config::new(MAX_NODES + 1),
            Err(ConfigError::NodeCount { .. })
        ));
        assert!(matches!(
            Config::new(usize::MAX),
            Err(ConfigError::NodeCount { .. })
        ));
    }

    #[test]
    fn quorum_must_be_a_majority_and_at_most_n() {
        for (nodes, quorum, ok) in [
            (5, 2, false),
            (5, 3, true),
            (5, 5, true),
            (5, 6, false),
            (4, 2, false),
            (4, 3, true),
            (1, 1, true),
            (2, 1, false),
        ] {
            let got = Config::builder(nodes).quorum(quorum).build();
            assert_eq!(got.is_ok(), ok, "nodes {nodes} quorum {quorum}: {got:?}");
            if let Err(err) = got {
                assert!(err.to_string().starts_with("quorum:"), "{err}");
            }
        }
    }

    #[test]
    fn drift_factor_must_be_in_unit_interval() {
        for factor in [-0.1, 1.0, 1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let got = Config::builder(3).drift_factor(factor).build();
            assert!(
                matches!(got, Err(ConfigError::DriftFactor { .. })),
                "{factor}: {got:?}"
            );
        }
        assert!(Config::builder(3).drift_factor(0.0).build().is_ok());
        assert!(Config::builder(3).drift_factor(0.999).build().is_ok());
    }

    #[test]
    fn durations_are_range_checked() {
        let huge = Duration::MAX;
        let cases = [
            Config::builder(3).drift_floor(huge).build(),
            Config::builder(3).node_timeout(Duration::ZERO).build(),
            Config::builder(3).node_timeout(huge).build(),
            Config::builder(3).min_validity(huge).build(),
            Config::builder(3)
                .retry(RetryPolicy::default().delay(huge))
                .build(),
            Config::builder(3)
                .retry(RetryPolicy::default().deadline(Duration::ZERO))
                .build(),
        ];
        for case in cases {
            let err = case.expect_err("out of range");
            assert!(matches!(err, ConfigError::Duration { .. }), "{err:?}");
        }
    }

    #[test]
    fn retry_policy_must_run_and_must_pause() {
        let zero = Config::builder(3)
            .retry(RetryPolicy::default().attempts(0))
            .build();
        assert_eq!(zero, Err(ConfigError::NoAttempts));
        let busy = RetryPolicy::default()
            .delay(Duration::ZERO)
            .jitter(Duration::ZERO);
        assert_eq!(
            Config::builder(3).retry(busy).build(),
            Err(ConfigError::BusyRetry)
        );
        assert!(Config::builder(3).retry(busy.attempts(1)).build().is_ok());
        assert!(
            Config::builder(3)
                .retry(RetryPolicy::default().attempts(u32::MAX))
                .build()
                .is_ok()
        );
    }

    #[test]
    fn key_prefix_is_bounded() {
        let long = vec![b'x'; MAX_KEY_PREFIX + 1];
        assert!(matches!(
            Config::builder(3).key_prefix(long).build(),
            Err(ConfigError::KeyPrefixTooLong { .. })
        ));
    }
}
