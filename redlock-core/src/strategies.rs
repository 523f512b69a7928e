//! proptest strategies for property-testing an integration of the engine (feature `proptest`).
//!
//! Three kinds of input:
//! - **settings**: valid [`Config`]s ([`configs`]), [`RetryPolicy`]s ([`retry_policies`]) and
//!   [`LockRequest`]s that a given configuration accepts ([`lock_requests`], [`ttls`]);
//! - **answers**: every shape of [`Reply`] a node or a broken network can produce ([`replies`]);
//! - **schedules**: what the network does with each request a machine sends, plus replies and
//!   timer wake-ups nobody asked for ([`Schedule`], [`schedules`], [`honest_schedules`]).
//!
//! The strategies only produce data: a [`Schedule`] is applied by your own driver (or simulated
//! transport) as its documentation describes. Ranges are chosen so that runs end quickly in
//! virtual time: node timeouts and delays are in milliseconds, and a policy that retries
//! without an attempt limit always has an overall deadline.
//!
//! In a test, use them with `proptest!` (`fn t((config, request) in …)`), or run them directly:
//!
//! ```
//! use proptest::prelude::*;
//! use proptest::test_runner::TestRunner;
//! use redlock_core::strategies::{configs, lock_requests};
//!
//! let pairs = configs().prop_flat_map(|config| (Just(config.clone()), lock_requests(&config)));
//! TestRunner::default()
//!     .run(&pairs, |(config, request)| {
//!         // Drive your integration with `config` and `request` here, and check what it did.
//!         prop_assert!(config.quorum() * 2 > config.nodes());
//!         prop_assert!(request.ttl() >= std::time::Duration::from_millis(5));
//!         Ok(())
//!     })
//!     .unwrap();
//! ```

use std::time::Duration;

use proptest::collection::{btree_set, vec};
use proptest::prelude::*;

use crate::{Config, LockRequest, NodeErrorKind, Reply, RequestId, RetryPolicy};

/// The most nodes a generated [`Config`] has.
pub const MAX_GENERATED_NODES: usize = 9;

/// The shortest TTL [`ttls`] produces (unless the configuration needs a longer one).
pub const MIN_GENERATED_TTL: Duration = Duration::from_millis(5);

/// The longest TTL [`ttls`] produces (unless the configuration needs a longer one).
pub const MAX_GENERATED_TTL: Duration = Duration::from_secs(60);

fn micros(range: std::ops::RangeInclusive<u64>) -> impl Strategy<Value = Duration> + Clone {
    range.prop_map(Duration::from_micros)
}

/// Every [`NodeErrorKind`].
pub fn node_error_kinds() -> impl Strategy<Value = NodeErrorKind> {
    prop_oneof![
        Just(NodeErrorKind::Connection),
        Just(NodeErrorKind::Timeout),
        Just(NodeErrorKind::Auth),
        Just(NodeErrorKind::NoPermission),
        Just(NodeErrorKind::NoScript),
        Just(NodeErrorKind::WrongType),
        Just(NodeErrorKind::ReadOnly),
        Just(NodeErrorKind::OutOfMemory),
        Just(NodeErrorKind::Busy),
        Just(NodeErrorKind::Loading),
        Just(NodeErrorKind::Protocol),
        Just(NodeErrorKind::Cluster),
        Just(NodeErrorKind::Other),
    ]
}

/// Any [`Reply`]: `OK`, nil, the integers the scripts answer (-1, 0, 1) and any other, a
/// refusal to vote for any time and cause, every error kind, and [`Reply::Other`]. Meant for "a node (or something on the way) answered
/// this", whatever the command was.
pub fn replies() -> impl Strategy<Value = Reply> {
    prop_oneof![
        2 => Just(Reply::Ok),
        2 => Just(Reply::Nil),
        3 => (-1i64..=1).prop_map(Reply::Int),
        1 => any::<i64>().prop_map(Reply::Int),
        1 => (any::<u64>(), sit_out_causes())
            .prop_map(|(for_ms, cause)| Reply::Ineligible { for_ms, cause }),
        2 => node_error_kinds().prop_map(Reply::Error),
        1 => Just(Reply::Other),
    ]
}

/// Every [`SitOutCause`](crate::SitOutCause).
pub fn sit_out_causes() -> impl Strategy<Value = crate::SitOutCause> {
    proptest::sample::select(crate::SitOutCause::ALL.to_vec())
}

/// Valid [`RetryPolicy`]s: one round; up to 5 rounds with or without an overall deadline; or
/// unlimited rounds with a deadline (up to 2 s). Pauses are `delay + U[0, jitter]` with delay 5 to
/// 300 ms and jitter 0 to 100 ms, or no delay and 20 to 100 ms of jitter. Unlimited rounds without
/// a deadline are left out: against nodes that never grant, they never end.
pub fn retry_policies() -> impl Strategy<Value = RetryPolicy> {
    let pause = prop_oneof![
        3 => (micros(5_000..=300_000), micros(0..=100_000)),
        1 => (Just(Duration::ZERO), micros(20_000..=100_000)),
    ];
    let deadline = micros(1_000..=2_000_000);
    let limited =
        (1u32..=5, proptest::option::of(deadline.clone())).prop_map(|(attempts, deadline)| {
            let policy = RetryPolicy::default().attempts(attempts).no_deadline();
            match deadline {
                Some(d) => policy.deadline(d),
                None => policy,
            }
        });
    let unlimited = deadline.prop_map(|d| RetryPolicy::default().unlimited().deadline(d));
    (prop_oneof![3 => limited, 1 => unlimited], pause)
        .prop_map(|(policy, (delay, jitter))| policy.delay(delay).jitter(jitter))
}

/// Valid [`Config`]s: 1 to [`MAX_GENERATED_NODES`] nodes, a quorum from a majority (most often)
/// to all of them, drift factor 0 to 0.3 (often the default 0.01), drift floor 0 to 10 ms, the
/// derived or a fixed node timeout (1 to 200 ms), a clock bound of 0 (most often) to 2 ms, a
/// minimum validity of 0 to 50 ms, an optional
/// key prefix, and a policy from [`retry_policies`].
pub fn configs() -> impl Strategy<Value = Config> {
    let nodes_and_quorum = (1..=MAX_GENERATED_NODES).prop_flat_map(|nodes| {
        let majority = crate::majority(nodes);
        (
            Just(nodes),
            prop_oneof![2 => Just(majority), 1 => majority..=nodes],
        )
    });
    let drift_factor = prop_oneof![Just(0.0), Just(0.01), 0.0..0.3f64];
    let drift_floor = prop_oneof![Just(Duration::from_millis(2)), micros(0..=10_000)];
    let clock_bound = prop_oneof![3 => Just(Duration::ZERO), 1 => micros(0..=2_000)];
    let node_timeout = proptest::option::of(micros(1_000..=200_000));
    let min_validity = prop_oneof![3 => Just(Duration::ZERO), 1 => micros(1..=50_000)];
    let key_prefix = prop_oneof![
        Just(&b""[..]),
        Just(&b"lock:"[..]),
        Just(&b"\x00{app}\xff"[..])
    ];
    (
        nodes_and_quorum,
        drift_factor,
        (drift_floor, clock_bound),
        node_timeout,
        min_validity,
        key_prefix,
        retry_policies(),
    )
        .prop_filter_map(
            "generated settings are valid by construction",
            |((nodes, quorum), factor, (floor, bound), timeout, min_validity, prefix, retry)| {
                let mut builder = Config::builder(nodes)
                    .quorum(quorum)
                    .drift_factor(factor)
                    .drift_floor(floor)
                    .clock_bound(bound)
                    .min_validity(min_validity)
                    .key_prefix(prefix)
                    .retry(retry);
                if let Some(timeout) = timeout {
                    builder = builder.node_timeout(timeout);
                }
                builder.build().ok()
            },
        )
}

/// The shortest whole-millisecond TTL (at least [`MIN_GENERATED_TTL`]) that `config` accepts:
/// one that leaves more than the minimum validity after the drift.
pub fn shortest_ttl(config: &Config) -> Duration {
    let drift = config.drift();
    let min_validity = config.min_validity();
    let fits = |ms: u64| {
        let ttl = Duration::from_millis(ms);
        ttl.checked_sub(drift.of(ttl))
            .is_some_and(|span| !span.is_zero() && span > min_validity)
    };
    let max_ms = u64::try_from(crate::MAX_TTL.as_millis()).unwrap_or(u64::MAX);
    let mut low = u64::try_from(MIN_GENERATED_TTL.as_millis()).unwrap_or(5);
    if fits(low) {
        return Duration::from_millis(low);
    }
    // What is left after the drift grows with the TTL (the factor is below 1): double, then
    // bisect between the last TTL that did not fit and the first that did.
    let mut high = low;
    while !fits(high) {
        if high >= max_ms {
            return crate::MAX_TTL;
        }
        low = high;
        high = high.saturating_mul(2).min(max_ms);
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if fits(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    Duration::from_millis(high)
}

/// Whole-millisecond TTLs from [`MIN_GENERATED_TTL`] to [`MAX_GENERATED_TTL`] that `config`
/// accepts (raised to [`shortest_ttl`] where the drift or minimum validity needs more), spread
/// over short (to 100 ms), medium (to 2 s) and long ones.
pub fn ttls(config: &Config) -> impl Strategy<Value = Duration> + use<> {
    let shortest = u64::try_from(shortest_ttl(config).as_millis()).unwrap_or(u64::MAX);
    let band = move |low: u64, high: u64| {
        let low = low.max(shortest);
        (low..=high.max(low)).prop_map(Duration::from_millis)
    };
    prop_oneof![2 => band(5, 100), 1 => band(100, 2_000), 1 => band(2_000, 60_000)]
}

/// [`LockRequest`]s that [`Acquire::new`](crate::Acquire::new) accepts with `config`: 1 to 3
/// distinct binary resource names (1 to 12 arbitrary bytes each) and a TTL from [`ttls`]. They
/// carry no token, retry policy or deadline of their own, so the configuration's policy applies
/// and the token comes from the RNG.
pub fn lock_requests(config: &Config) -> impl Strategy<Value = LockRequest> + use<> {
    let resources = btree_set(vec(any::<u8>(), 1..=12), 1..=3);
    (resources, ttls(config)).prop_map(|(resources, ttl)| {
        let mut names = resources.into_iter();
        let first = names.next().unwrap_or_else(|| b"resource".to_vec());
        names.fold(LockRequest::new(first, ttl), LockRequest::resource)
    })
}

/// Network delays: mostly 2 ms or less (at microsecond resolution, zero included), sometimes up
/// to 50 ms, sometimes up to 1.5 s — so that, against node timeouts of 1 ms to 1 s,
/// replies land both in time and late.
pub fn delays() -> impl Strategy<Value = Duration> {
    prop_oneof![
        2 => Just(Duration::ZERO),
        6 => micros(0..=2_000),
        1 => micros(0..=50_000),
        1 => micros(0..=1_500_000),
    ]
}

/// What the network does with one request and its reply.
///
/// Exhaustive on purpose: a driver that handles every fate should stop compiling, not silently
/// skip one, when a fate is added.
#[derive(Debug, Clone, PartialEq)]
pub enum Fate {
    /// The request reaches the node `there` after it was sent; the node runs it, and its reply
    /// arrives `back` after that.
    Deliver {
        /// Delay of the request.
        there: Duration,
        /// Delay of the reply.
        back: Duration,
    },
    /// The request is lost: the node never runs it, and nothing comes back.
    Drop,
    /// The node runs the request `there` after it was sent, but its reply is lost.
    LoseReply {
        /// Delay of the request.
        there: Duration,
    },
    /// Like [`Fate::Deliver`], and a second copy of the same reply arrives `again` after the
    /// first.
    Duplicate {
        /// Delay of the request.
        there: Duration,
        /// Delay of the reply.
        back: Duration,
        /// Delay of the copy after the first reply.
        again: Duration,
    },
    /// The node never runs the request, yet `reply` (anything at all, under the request's id)
    /// arrives `after` it was sent: a confused proxy or a broken node.
    Wrong {
        /// Delay of the reply.
        after: Duration,
        /// What arrives.
        reply: Reply,
    },
    /// Like [`Fate::Deliver`], and another reply, `reply`, arrives under the same id `after` the
    /// request was sent (before or after the node's own): only the first of the two may count.
    Contradict {
        /// Delay of the request.
        there: Duration,
        /// Delay of the node's reply.
        back: Duration,
        /// Delay of the other reply, from when the request was sent.
        after: Duration,
        /// The other reply.
        reply: Reply,
    },
}

/// Fates of an honest network: delivered (most often), dropped, reply lost, or duplicated.
pub fn honest_fates() -> impl Strategy<Value = Fate> {
    prop_oneof![
        12 => (delays(), delays()).prop_map(|(there, back)| Fate::Deliver { there, back }),
        1 => Just(Fate::Drop),
        1 => delays().prop_map(|there| Fate::LoseReply { there }),
        2 => (delays(), delays(), delays())
            .prop_map(|(there, back, again)| Fate::Duplicate { there, back, again }),
    ]
}

/// Every fate, [`Fate::Wrong`] and [`Fate::Contradict`] included (one in ten).
pub fn fates() -> impl Strategy<Value = Fate> {
    prop_oneof![
        18 => honest_fates(),
        1 => (delays(), replies()).prop_map(|(after, reply)| Fate::Wrong { after, reply }),
        1 => (delays(), delays(), delays(), replies())
            .prop_map(|(there, back, after, reply)| Fate::Contradict { there, back, after, reply }),
    ]
}

/// Which id a reply nobody asked for carries, relative to the latest request sent (`latest`).
/// None of them is the id of a request in flight, so the engine must ignore them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stray {
    /// An id from `back` batches before the latest one (a batch that is over, or one that
    /// never existed).
    Earlier {
        /// How many batches back (at least 1).
        back: u32,
        /// Node index.
        node: usize,
    },
    /// An id from `ahead` batches after the latest one (a batch not sent yet).
    Later {
        /// How many batches ahead (at least 1).
        ahead: u32,
        /// Node index.
        node: usize,
    },
    /// The latest batch, but a node index past the configuration's `nodes`.
    UnknownNode {
        /// How far past the last node.
        beyond: usize,
    },
}

impl Stray {
    /// The id this stray reply carries, given the latest request sent and the number of nodes.
    pub fn id(&self, latest: RequestId, nodes: usize) -> RequestId {
        match *self {
            Stray::Earlier { back, node } => latest
                .with_batch(latest.batch().saturating_sub(back.max(1)))
                .with_node(node),
            Stray::Later { ahead, node } => latest
                .with_batch(latest.batch().saturating_add(ahead.max(1)))
                .with_node(node),
            Stray::UnknownNode { beyond } => latest.with_node(nodes.saturating_add(beyond)),
        }
    }
}

/// Stray ids: earlier or later batches (1 to 3 away), or unknown nodes (just past the last,
/// or far past it).
pub fn strays() -> impl Strategy<Value = Stray> {
    let node = 0..MAX_GENERATED_NODES;
    prop_oneof![
        (1u32..=3, node.clone()).prop_map(|(back, node)| Stray::Earlier { back, node }),
        (1u32..=3, node).prop_map(|(ahead, node)| Stray::Later { ahead, node }),
        prop_oneof![0usize..=2, 0usize..=1_000].prop_map(|beyond| Stray::UnknownNode { beyond }),
    ]
}

/// A reply nobody asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Spurious {
    /// When it arrives, from the start of the run.
    pub at: Duration,
    /// The id it carries, resolved against the latest request sent when it arrives (a driver
    /// that has sent nothing yet drops it).
    pub stray: Stray,
    /// What it says.
    pub reply: Reply,
}

/// What the network (and the driver's timer) does during one run.
///
/// A driver applies it like this: the `n`-th request the machine sends (counting from 0, over
/// the whole run) meets [`fate(n)`](Schedule::fate); each [`Spurious`] reply is handed to the
/// machine at its instant with the id its [`Stray`] resolves to; at each instant of `ticks` the
/// driver calls `handle_timeout` although no deadline asked for it; and the driver's timer fires
/// `timer_lag` after each `Wait` instant, handing in first whatever arrived meanwhile. Time is
/// virtual: every instant is an offset from the start of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// One fate per request, in send order; reused from the start when there are more
    /// requests than fates.
    pub fates: Vec<Fate>,
    /// Replies nobody asked for.
    pub spurious: Vec<Spurious>,
    /// Instants at which the driver calls `handle_timeout` unasked.
    pub ticks: Vec<Duration>,
    /// How late the driver's timer fires after the instant of a `Wait` (a busy executor, a
    /// coarse timer): replies that arrive in between are handed in before the timeout.
    pub timer_lag: Duration,
}

impl Schedule {
    /// The fate of the `n`-th request sent (counting from 0). An empty list delivers
    /// everything at once.
    pub fn fate(&self, n: usize) -> Fate {
        match self.fates.len() {
            0 => Fate::Deliver {
                there: Duration::ZERO,
                back: Duration::ZERO,
            },
            len => self.fates[n % len].clone(),
        }
    }
}

fn offsets() -> impl Strategy<Value = Duration> {
    prop_oneof![micros(0..=20_000), micros(0..=2_000_000)]
}

fn schedule_of(fate: impl Strategy<Value = Fate>) -> impl Strategy<Value = Schedule> {
    let spurious = (offsets(), strays(), replies()).prop_map(|(at, stray, reply)| Spurious {
        at,
        stray,
        reply,
    });
    let timer_lag =
        prop_oneof![3 => Just(Duration::ZERO), 1 => micros(0..=2_000), 1 => micros(0..=50_000)];
    (
        vec(fate, 1..=16),
        vec(spurious, 0..=6),
        vec(offsets(), 0..=6),
        timer_lag,
    )
        .prop_map(|(fates, spurious, ticks, timer_lag)| Schedule {
            fates,
            spurious,
            ticks,
            timer_lag,
        })
}

/// Schedules of every kind: 1 to 16 fates from [`fates`] (made-up replies included), up to 6
/// stray replies, up to 6 unasked timer wake-ups, and a timer that is on time (most often) or
/// up to 50 ms late.
pub fn schedules() -> impl Strategy<Value = Schedule> {
    schedule_of(fates())
}

/// Schedules without [`Fate::Wrong`] or [`Fate::Contradict`]: whatever reaches the engine under a
/// request's id is what the node answered. Stray replies still come (the engine must ignore them).
pub fn honest_schedules() -> impl Strategy<Value = Schedule> {
    schedule_of(honest_fates())
}
