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
//! # Driving a machine
//! There is one machine per operation: [`Acquire`], [`Extend`], [`Release`]. Each takes two
//! inputs, `handle_reply(now, id, reply)` and `handle_timeout(now)`, and one output,
//! `poll_output(now)`. After creating a machine, and after every input, drain `poll_output` until
//! it returns [`Output::Wait`] (sleep until that instant or the next reply), [`Output::Done`]
//! (the outcome) or [`Output::Idle`]. Every [`Output::Send`] of a round comes out before the
//! round's first `Wait`, so all nodes are asked at once.
//!
//! ```
//! use std::collections::HashMap;
//! use std::time::{Duration, Instant};
//! use rand_core::SeedableRng;
//! use redlock_core::{Acquire, AcquireOutcome, Config, LockRequest, Op, Output, Reply};
//!
//! // Five in-memory "nodes": key -> token (TTL expiry left out for brevity).
//! let mut nodes: Vec<HashMap<Vec<u8>, Vec<u8>>> = vec![HashMap::new(); 5];
//! let config = Config::new(5)?;
//! let mut rng = chacha20::ChaCha8Rng::seed_from_u64(7);
//! let now = Instant::now();
//! let request = LockRequest::new("invoices", Duration::from_secs(10));
//! let mut acquire = Acquire::new(now, &config, &request, &mut rng)?;
//!
//! let lease = loop {
//!     match acquire.poll_output(now) {
//!         Output::Send(transmit) => {
//!             let node = &mut nodes[transmit.id.node()];
//!             let cmd = &transmit.command;
//!             let key = cmd.spec().keys().next().unwrap().to_vec();
//!             let token = cmd.spec().token().as_bytes().to_vec();
//!             let reply = match cmd.op() {
//!                 Op::SetIfAbsent if node.contains_key(&key) => Reply::Nil,
//!                 Op::SetIfAbsent => { node.insert(key, token); Reply::Ok }
//!                 _ => Reply::Int(0),
//!             };
//!             acquire.handle_reply(now, transmit.id, reply);
//!         }
//!         Output::Done(AcquireOutcome::Acquired(lease)) => break lease,
//!         other => panic!("unexpected: {other:?}"),
//!     }
//! };
//! assert!(lease.valid_until() <= now + Duration::from_millis(10_000 - 100 - 2));
//! assert_eq!(nodes.iter().filter(|n| n.contains_key(&b"invoices"[..])).count(), 5);
//! # Ok::<(), redlock_core::ConfigError>(())
//! ```
//!
//! Auto-extension is a policy too: [`Renewal`] says when to start an [`Extend`] and when the
//! lock must be given up as lost. For a network stack of your own, [`resp`] encodes commands and
//! parses replies; the `tcp_lock` example drives a lock over `std::net::TcpStream`.
//!
//! # Safety model
//! A lease is valid until `t0 + ttl − drift` where `t0` is when its winning round started, by the
//! holder's monotonic clock. That bound holds while the nodes' clocks run within the drift factor
//! of the holder's, no node loses a key before its TTL (no restart without persistence inside
//! the longest TTL), and the holder stops using the lock when validity ends (process pauses
//! included). Where the protected resource can check it, prefer a fencing token.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
// Unit tests build virtual time from one real instant; the engine itself never reads the clock.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod acquire;
mod backoff;
mod command;
mod config;
mod error;
mod extend;
mod lease;
mod output;
mod quorum;
mod release;
mod renewal;
pub mod resp;
mod retry;
mod round;
mod spec;
#[cfg(feature = "proptest")]
pub mod strategies;
mod token;
mod validity;

pub use acquire::{Acquire, AcquireFailure, AcquireOutcome, LockRequest};
pub use command::{ACQUIRE_SCRIPT, Command, EXTEND_SCRIPT, Op, RELEASE_SCRIPT, RedisForm};
pub use config::{
    Config, ConfigBuilder, MAX_DRIFT_FLOOR, MAX_KEY_PREFIX, MAX_NODE_TIMEOUT, MAX_NODES,
};
pub use error::ConfigError;
pub use extend::{Extend, ExtendFailure, ExtendOutcome};
pub use lease::Lease;
pub use output::{Machine, Output, RequestId, Transmit};
pub use quorum::{FailureReason, majority};
pub use release::{Release, ReleaseReport};
pub use renewal::{Renewal, RenewalStep};
pub use reply::{NodeErrorKind, Reply};
pub use retry::{Attempts, MAX_DEADLINE, MAX_RETRY_DELAY, RetryPolicy};
pub use round::{NodeRelease, Vote};
pub use spec::{LockSpec, MAX_KEY_LEN, MAX_RESOURCES};
pub use token::{MAX_TOKEN_LEN, TOKEN_ENTROPY_BYTES, Token};
pub use validity::{Drift, MAX_TTL};

mod reply;

#[cfg(test)]
mod testing;
