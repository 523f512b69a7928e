//! The engine's errors: an input (configuration or lock request) that is not allowed
//! ([`ConfigError`]), and why a [`Multiplexer`](crate::Multiplexer) did not start a lock
//! ([`StartError`]: that input, or ids the driver chose or the generator drew).
//!
//! A lock that could not be acquired is *not* an error here: it is an outcome
//! ([`AcquireFailure`](crate::AcquireFailure)). Every variant names the input and the range
//! that is allowed, and carries no secret (tokens and keys are reported by length and
//! position only).

use std::time::Duration;

/// An input that is outside what the engine allows. Returned once, when a [`Config`](crate::Config)
/// is built or a request is checked; the engine never panics on bad input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The number of nodes is outside `1..=max`.
    #[error("nodes: {got} is not allowed; use 1 to {max} nodes")]
    NodeCount {
        /// What was given.
        got: usize,
        /// The largest node count the engine accepts.
        max: usize,
    },
    /// The quorum is below a majority or above the node count.
    #[error(
        "quorum: {got} is not allowed for {nodes} nodes; use {min} to {max} (a majority at least)"
    )]
    Quorum {
        /// What was given.
        got: usize,
        /// The number of nodes.
        nodes: usize,
        /// The smallest allowed quorum, `nodes / 2 + 1`.
        min: usize,
        /// The largest allowed quorum, `nodes`.
        max: usize,
    },
    /// The clock-drift factor is not a number in `[0, 1)`.
    #[error("drift_factor: {got} is not allowed; use a number from 0 up to (not including) 1")]
    DriftFactor {
        /// What was given.
        got: f64,
    },
    /// A duration setting is outside its range.
    #[error("{field}: {got:?} is not allowed; use {min:?} to {max:?}")]
    Duration {
        /// The setting's name, as in the builder method.
        field: &'static str,
        /// What was given.
        got: Duration,
        /// Smallest allowed value.
        min: Duration,
        /// Largest allowed value.
        max: Duration,
    },
    /// The lock TTL is not larger than the clock drift plus the minimum validity, so a lock
    /// could never be valid.
    #[error(
        "ttl: {got:?} leaves no validity after the clock drift of {drift:?} and the minimum validity of {min_validity:?}; use a longer TTL"
    )]
    TtlTooShort {
        /// What was given.
        got: Duration,
        /// The allowance the TTL must exceed (`ttl × drift_factor + drift_floor + clock_bound`).
        drift: Duration,
        /// The configured minimum validity.
        min_validity: Duration,
    },
    /// The retry policy allows no attempt at all.
    #[error("retry attempts: 0 is not allowed; use at least 1 (1 = a single round, no retry)")]
    NoAttempts,
    /// The retry policy would retry with no pause at all, hammering the nodes.
    #[error(
        "retry delay and jitter: both are zero with more than one attempt; give at least one of them a positive value"
    )]
    BusyRetry,
    /// The number of resources in one lock is outside `1..=max`.
    #[error("resources: {got} given; a lock takes 1 to {max} resources")]
    ResourceCount {
        /// What was given.
        got: usize,
        /// The most resources one lock may take.
        max: usize,
    },
    /// A resource name is empty.
    #[error("resource #{index}: empty names are not allowed")]
    EmptyResource {
        /// Position of the resource in the request (0-based).
        index: usize,
    },
    /// A resource name (with the key prefix) is too long.
    #[error("resource #{index}: {len} bytes with the key prefix; at most {max} are allowed")]
    ResourceTooLong {
        /// Position of the resource in the request (0-based).
        index: usize,
        /// Length of the key, prefix included.
        len: usize,
        /// The longest key allowed.
        max: usize,
    },
    /// The same resource appears twice in one request.
    #[error("resource #{index}: it repeats resource #{first}; each resource may appear once")]
    DuplicateResource {
        /// Position of the repeat (0-based).
        index: usize,
        /// Position of the first occurrence.
        first: usize,
    },
    /// A key slot was given for a node past the node count ([`ConfigBuilder::key_slot`]).
    ///
    /// [`ConfigBuilder::key_slot`]: crate::ConfigBuilder::key_slot
    #[error("key_slot: node #{node} is not one of the {nodes} nodes (positions 0 to {last})", last = nodes.saturating_sub(1))]
    KeySlotNode {
        /// The position given.
        node: usize,
        /// How many nodes there are.
        nodes: usize,
    },
    /// The key prefix is too long.
    #[error("key_prefix: {len} bytes; at most {max} are allowed")]
    KeyPrefixTooLong {
        /// What was given.
        len: usize,
        /// The longest prefix allowed.
        max: usize,
    },
    /// A caller-chosen token has a length outside `1..=max`.
    #[error("token: {len} bytes; a token must have 1 to {max} bytes")]
    TokenLength {
        /// What was given.
        len: usize,
        /// The longest token allowed.
        max: usize,
    },
    /// A lock can only be resumed (or released from another client) by the token it was taken
    /// with.
    #[error(
        "token: resuming or releasing a lock by token needs the token it was acquired with; none was given"
    )]
    ResumeWithoutToken,
    /// A lock TTL above the configured longest TTL (restart-aware voting bounds every TTL).
    #[error(
        "ttl: {got:?} is above max_ttl ({max_ttl:?}), the longest TTL a node that lost its memory waits out; shorten the ttl or raise max_ttl"
    )]
    TtlAboveMax {
        /// What was given.
        got: Duration,
        /// The configured longest TTL.
        max_ttl: Duration,
    },
    /// A resource whose key is reserved by the engine ([`EPOCH_KEY`](crate::EPOCH_KEY), or a
    /// key under [`FENCE_KEY_PREFIX`](crate::FENCE_KEY_PREFIX)).
    #[error(
        "resource #{index}: its key is reserved (the restart-aware voting epoch, its identity, or a fence counter); use another name"
    )]
    ReservedKey {
        /// Position of the resource in the request (0-based).
        index: usize,
    },
}

/// Why a [`Multiplexer`](crate::Multiplexer) did not start a lock: the request or the
/// settings (what a user gave), or the ids (what the driver chose, or the generator drew).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The request or the settings are invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A lock id that already names a running lock: the driver must choose another.
    #[error("lock id {id}: already in use by a running lock; use an id not in use")]
    LockIdInUse {
        /// The id given.
        id: u64,
    },
    /// The lifecycle drew a random id that a running lock has (once in 2^64): nothing
    /// started; starting again draws afresh.
    #[error("a lifecycle id was drawn twice; start again")]
    DrawnTwice,
}
