//! The Redlock distributed-lock algorithm as pure, deterministic state machines.
//!
//! `redlock-core` holds the *whole* algorithm — acquisition rounds, quorum counting, validity and
//! clock-drift math, retry jitter, extension, release and auto-extension — and none of the I/O.
//! Adapters (`redlock-tokio`, `redlock-async-std`, `redlock-blocking`) drive it over real Redis
//! connections; you can drive it over any network stack of your own.
//!
//! # What it never does
//! - It never reads a clock: every call takes `now: Instant` (the monotonic clock; wall-clock
//!   time never enters a decision).
//! - It never sleeps, never spawns, never touches a socket or a file.
//! - It never takes entropy from the OS or a thread-local RNG: tokens and jitter come from the
//!   `rand_core` RNG you inject, so a fixed seed replays a run exactly.
//! - It never panics on bad input: configurations and requests are checked into a
//!   [`ConfigError`], and stale, duplicate, late or unknown replies are ignored.
//!
//! These are enforced by the build (`clippy.toml` bans the clock, sleeping and I/O types).
//!
//! # Driving a lock
//! A [`Lifecycle`] owns one lock from its first round to its last release: acquisition rounds
//! and retries, auto-extension when asked for, extensions on demand, the release. Its inputs
//! are `handle_reply(now, id, reply)`, `handle_timeout(now)` and `handle_wake(now)` (plus the
//! caller's `extend` and `release`); its one output is `poll_output(now)`. After creating it and
//! after every input, drain `poll_output` until it says [`LockOutput::Wait`] (sleep until that
//! instant or the next reply) or [`LockOutput::Idle`]; send every [`LockOutput::Send`] at once
//! and pass every [`LockOutput::Event`] on. That loop is all a driver is:
//!
//! ```
//! use std::collections::HashMap;
//! use std::time::{Duration, Instant};
//! use rand_core::SeedableRng;
//! use redlock_core::{Config, Lifecycle, LockEvent, LockOutput, LockRequest, Op, Reply};
//!
//! // Five in-memory "nodes" (key -> token); node 4 never answers.
//! let mut nodes: Vec<HashMap<Vec<u8>, Vec<u8>>> = vec![HashMap::new(); 5];
//! let run = |node: &mut HashMap<Vec<u8>, Vec<u8>>, cmd: &redlock_core::Command| {
//!     let key = cmd.spec().keys().next().unwrap().to_vec();
//!     let token = cmd.spec().token().as_bytes().to_vec();
//!     match cmd.op() {
//!         Op::SetIfAbsent if node.contains_key(&key) => Reply::Nil,
//!         Op::SetIfAbsent => { node.insert(key, token); Reply::Ok }
//!         Op::DeleteIfEquals if node.get(&key) == Some(&token) => { node.remove(&key); Reply::Int(1) }
//!         _ => Reply::Int(0),
//!     }
//! };
//! let config = Config::new(5)?;
//! let mut rng = chacha20::ChaCha8Rng::seed_from_u64(7);
//! let mut now = Instant::now(); // the driver's clock; the engine never reads one
//! let request = LockRequest::new("invoices", Duration::from_secs(10));
//! let mut lock = Lifecycle::acquire(now, &config, &request, &mut rng)?;
//! let mut inbox = Vec::new(); // replies "on the wire"
//! let mut released = None;
//! while released.is_none() {
//!     match lock.poll_output(now) {
//!         LockOutput::Send(transmit) if transmit.id.node() == 4 => {} // lost in the network
//!         LockOutput::Send(transmit) => {
//!             let reply = run(&mut nodes[transmit.id.node()], &transmit.command);
//!             inbox.push((transmit.id, reply));
//!         }
//!         LockOutput::Wait { at, reason } => match inbox.pop() {
//!             Some((id, reply)) => lock.handle_reply(now, id, reply),
//!             None => {
//!                 println!("sleeping until {at:?} for {reason:?}");
//!                 now = at;
//!                 lock.handle_timeout(now);
//!             }
//!         },
//!         LockOutput::Event(LockEvent::Acquired(lease)) => {
//!             assert!(lease.valid_until() <= now + Duration::from_millis(10_000 - 100 - 2));
//!             // ... the protected work, finished before lease.valid_until() ...
//!             lock.release(now);
//!         }
//!         LockOutput::Event(LockEvent::Released(report)) => released = Some(report),
//!         LockOutput::Event(other) => panic!("unexpected: {other:?}"),
//!         LockOutput::Idle => unreachable!("a lock being acquired or released is never idle"),
//!     }
//! }
//! let report = released.unwrap();
//! assert_eq!((report.released(), report.unreachable()), (4, 1)); // node 4 timed out
//! assert!(nodes.iter().all(|n| n.is_empty()));
//! # Ok::<(), redlock_core::ConfigError>(())
//! ```
//!
//! **[`Lifecycle`] is the one engine API.** Everything it decides (rounds, retries,
//! auto-extension, loss, release) is in it; the per-operation machines it is built from are
//! private building blocks (exposed only with the `testing` feature, for the project's own
//! tests). For a network stack of your own, [`resp`] encodes commands and parses replies; the
//! `tcp_lock` example drives a lock over `std::net::TcpStream`.
//!
//! # Many locks: the [`Multiplexer`]
//! As soon as a client holds more than one lock, its driver needs what every adapter of this
//! project runs: the [`Multiplexer`] owns many lifecycles by [`LockId`], queues each one's
//! requests per node (at most one request per lock in flight on a node, so a release never
//! overtakes its own acquire), hands out one [`Batch`] per node across locks, answers caller
//! extensions one by one, keeps release-notice subscriptions, and says when to wake next. An
//! async or blocking shell around it only moves batches, replies and time.
//!
//! # Names
//! [`Lifecycle`]: the engine's lock, first round to release. [`Lease`]: a held lock's
//! validity, votes and fence. [`Multiplexer`]: a client's many lifecycles over one set of
//! nodes. The adapters add `Lock`, the user's handle on a lock their driver owns.
//!
//! # Safety model
//! A lease is valid until `t0 + ttl − drift` where `t0` is when its winning round started, by the
//! holder's monotonic clock. That bound holds while the nodes' clocks run within the drift factor
//! of the holder's, no node votes with keys it lost, and the holder stops using the lock when
//! validity ends (process pauses included). Where the protected resource can check it, prefer a
//! fencing token.
//!
//! # Restart-aware voting (on by default)
//! A node that lost its memory (restart without persistence, `FLUSHALL`/`FLUSHDB`, failover to an
//! empty replica) lost the keys of locks that may still be valid; if it voted again at once, a
//! second client could win a quorum with it. So every acquire ([`ACQUIRE_CHECKED_SCRIPT`]) first
//! reads the node's epoch ([`EPOCH_KEY`]), the node's own `TIME` when its memory began: missing,
//! it is created now; younger than the longest TTL in use ([`Config::max_ttl`]), the node refuses
//! ([`Vote::Ineligible`], counted like an error).
//!
//! *Why it is safe.* Let a lock be granted in a round started at `t0` with TTL `ttl ≤ max_ttl`,
//! valid until `V = t0 + ttl − drift` on the holder's clock, and let a node that granted it lose
//! its memory at `L > t0`. The epoch key lives in the same keyspace, so it is lost too; the node's
//! first acquire after `L` sets the epoch `E ≥ L` on the node's clock, and the node grants nothing
//! until its clock reads `E + max_ttl`. Measured on the holder's clock that is at least
//! `max_ttl − drift` after `L > t0` — the same bound that makes a key's `ttl` on the node outlast
//! the holder's `ttl − drift` in plain Redlock (clock rates within the drift factor). So the node
//! votes again only after `V`. A *partial* loss of memory keeps the epoch but not the newest lock
//! keys: a node that reloads an older state (an RDB snapshot, `appendfsync everysec` after a
//! machine crash) or a replica promoted in its place. The epoch carries the identity of the
//! memory it was stamped in ([`EPOCH_ID_KEY`]: `run_id:master_replid:database:evicted_keys`),
//! which both change, so the script stamps a new epoch then, as for a missing one. A database
//! swapped in carries another number, and an eviction (a lock key dropped while the epoch
//! stays) moves the count: the same. A proven connection, which no push tells of either, seals
//! its acquisitions on nodes where they can happen ([`SealRead`]): each reads, atomically with
//! its `SET`, the marker its proof's script wrote ([`EPOCH_MARKER_PREFIX`]: no other database
//! holds it), or where there is none the epoch and its stamp. `TIME` is the
//! node's wall clock: a forward jump shortens the wait as it shortens key TTLs in Redis itself
//! (outside the model either way), a backward jump lengthens it.
//!
//! # Fencing tokens from a quorum (opt-in: [`LockRequest::fenced`])
//! The first round of a fenced acquisition ([`ACQUIRE_FENCED_SCRIPT`]) also answers, on each
//! node that grants, `v` = the largest of the resource's fence counter and the node's `TIME` in
//! ms. The engine takes `F = max(v) + 1` over the granting nodes and commits it there
//! ([`COMMIT_FENCE_SCRIPT`]: raise the counter to at least `F`, only while our keys are still
//! there), inside the validity; the lock is held only with a quorum of commits
//! ([`Lease::fence`]).
//!
//! *Why fences increase.* Let `A` hold with fence `F` committed on a quorum `Q`, and let `B`
//! be granted later by a quorum `Q'`. `Q ∩ Q'` has a node `m`. On `m`, `A`'s commit ran while
//! `A`'s key was there, and `B`'s grant ran when no key was there (`B`'s script sets the key only
//! if none exists), so after `A`'s key left `m` — after the commit. Counters never go down
//! (the commit keeps the larger value), so `B` reads at least `F` on `m` and takes a larger
//! fence. The counter can be lost in two ways, both covered: it expires
//! ([`FENCE_RETENTION_MS`] after its last commit), and then the node's clock has moved past it;
//! or the node loses its memory, and then restart-aware voting keeps the node out for the
//! longest TTL, after which its clock is past every fence it committed — provided the nodes'
//! wall clocks agree within that TTL (the simulator's controls break each assumption and see
//! fences go backwards).
//!
//! *Once per connection instead of per acquire.* A connection with client tracking can prove
//! the node's memory once and then acquire with a plain `SET NX PX`
//! ([`MemoryWatch`]: the node pushes an invalidation ahead of any later reply when the epoch key
//! is deleted, evicted or flushed, and a restart ends the connection; a reply counts only with
//! neither before it). Same argument: between the proof and a counted reply the epoch key was
//! untouched, so the node's memory was at least `max_ttl` old when it voted. Tracking is
//! `OPTIN` without `NOLOOP`, so that holds for what the connection's own commands cause too (an
//! eviction its `SET` sets off is pushed before that `SET`'s reply). The protocol per batch —
//! forms, proof reads, counting — is [`NodeBatch`]; a node without scripts claims a missing
//! epoch by its own clock ([`EPOCH_CLAIM`]).
//!
//! # Dialects
//! A [`Command`] says what it means; [`Command::redis_form_on`] picks its cheapest form on a
//! node of a [`Dialect`] — native `DELIFEQ`/`DELEX`, `MSETEX`, and the exact-TTL `SET … IFEQ`
//! where the engine allows it ([`Command::sets_exact_ttl`]) — or
//! [`NodeErrorKind::NoSafeForm`] when the node has no form of that meaning, never a weaker one.
//! The fake node (module `fake`, feature `testing`) runs every form.
//!
//! A new node has no epoch either and waits the same once, unless an operator who knows no lock
//! is live says so ([`Lifecycle::trust`], [`TRUST_SCRIPT`]: epoch `0` = trusted). The feature can
//! be turned off ([`ConfigBuilder::restart_aware`]) — unsafe unless nodes persist every write or
//! restarts are delayed by the longest TTL.
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
// Unit tests build virtual time from one real instant; the engine itself never reads the clock.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod acquire;
mod broadcast;
mod command;
mod config;
mod dialect;
mod epoch;
mod error;
mod event;
mod extend;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
mod id;
mod identity;
mod jitter;
mod keyspace;
mod lease;
mod lifecycle;
mod machine;
mod memory_watch;
mod multiplexer;
mod node_batch;
mod output;
mod part_read;
mod quorum;
mod release;
mod renewal;
mod request;
pub mod resp;
mod retry;
mod round;
mod sit_out;
mod slot;
mod spec;
#[cfg(feature = "proptest")]
pub mod strategies;
mod token;
mod transmits;
mod trust;
mod validity;

#[cfg(any(test, feature = "testing"))]
pub use acquire::Acquire;
pub use acquire::{AcquireFailure, AcquireOutcome};
pub use command::{
    ACQUIRE_CHECKED_SCRIPT, ACQUIRE_FENCED_SCRIPT, ACQUIRE_SCRIPT, Arg, COMMIT_FENCE_SCRIPT,
    Command, EPOCH_ID_KEY, EPOCH_KEY, EPOCH_MARKER_PREFIX, EXTEND_NEVER_SHORTENS, EXTEND_SCRIPT,
    FENCE_KEY_PREFIX, FENCE_MEMBER, FENCE_RETENTION_MS, Op, RELEASE_SCRIPT,
    RELEASED_CHANNEL_PREFIX, RedisForm, Script, ScriptArgs, ScriptKeys, TRUST_SCRIPT,
    released_channel,
};
pub use config::{
    Config, ConfigBuilder, DEFAULT_MAX_TTL, MAX_CLOCK_BOUND, MAX_DRIFT_FLOOR, MAX_KEY_PREFIX,
    MAX_NODE_TIMEOUT, MAX_NODES,
};
pub use dialect::{DeleteIfEq, Dialect, ServerFacts};
pub use epoch::{EPOCH_CLAIM, EPOCH_CLAIM_TTL_MS, Epoch};
pub use error::{ConfigError, StartError};
pub use event::{LockEvent, LockOutput, Operation, Trigger, WakeReason};
#[cfg(any(test, feature = "testing"))]
pub use extend::Extend;
pub use extend::{ExtendFailure, ExtendOutcome};
pub use id::{Origin, RequestId};
pub use identity::{
    SealRead, SealReplies, eviction_channel, evicts, node_identity, notifies_evictions,
};
pub use keyspace::{EpochNames, Keyspace, SLOT_EPOCH_ID_PREFIX, SLOT_EPOCH_PREFIX};
pub use lease::Lease;
pub use lifecycle::Lifecycle;
#[cfg(any(test, feature = "testing"))]
pub use machine::Machine;
pub use memory_watch::{MemoryWatch, WatchFault};
pub use multiplexer::{Batch, Change, LINGER, LockId, Multiplexer, Start, Timeout, TimeoutReason};
pub use node_batch::{NodeBatch, ProofRead, Stamp};
#[cfg(any(test, feature = "testing"))]
pub use output::Output;
pub use output::Transmit;
pub use part_read::{PartRead, PartValue};
pub use quorum::{FailureReason, majority};
#[cfg(any(test, feature = "testing"))]
pub use release::Release;
pub use release::ReleaseReport;
pub use renewal::LossCause;
#[cfg(any(test, feature = "testing"))]
pub use renewal::{Renewal, RenewalStep};
pub use reply::{NodeErrorKind, Reply};
pub use request::LockRequest;
pub use retry::{
    Attempts, DEFAULT_RETRY_DEADLINE, DEFAULT_WAKE_JITTER, MAX_DEADLINE, MAX_RETRY_DELAY,
    RetryPolicy,
};
pub use round::{NodeRelease, Vote};
pub use sit_out::{SitOutCause, split_stamp, stamp_change};
pub use slot::{MAX_CLUSTER_VOTES, SLOT_COUNT, Slot, TAG_ALPHABET, crc16, hash_tag, vote_slots};
pub use spec::{LockSpec, MAX_KEY_LEN, MAX_RESOURCES};
pub use token::{MAX_TOKEN_LEN, TOKEN_ENTROPY_BYTES, Token};
pub use transmits::{IntoIter as TransmitsIntoIter, Transmits};
#[cfg(any(test, feature = "testing"))]
pub use trust::Trust;
pub use validity::{Drift, MAX_TTL};

mod reply;

#[cfg(test)]
mod fence_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod testing;
