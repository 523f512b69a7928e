//! Redlock distributed locks over Redis, for blocking code: no async runtime.
//!
//! A thin driver for [`redlock_core`]: this crate owns the threads (one driver thread per
//! client, one worker thread and connection per node), the clock and the waiting; every
//! decision — quorum, validity, retry delay, when to extend, which replies count — is the
//! engine's. Same API and behaviour as `redlock-tokio`, blocking.
//!
//! # Start here
//! 1. Depend on it: `redlock-blocking = { git = "https://github.com/redlock-rs/redlock-rs" }` until the
//!    crates are on crates.io, then `redlock-blocking = "0.1"`; no runtime needed.
//! 2. [`Redlock`]`::new(urls)`: three or more independent Redis masters (`redis://host:port`).
//! 3. `redlock.lock(name, ttl)` gives a [`Lock`]; `with_lock` keeps it extended while a
//!    closure runs; `acquire` takes a [`LockRequest`] with every option. Check `is_valid()`
//!    before each step that must not overlap another holder's; `release()` when done.
//! 4. Everything fails with [`Error`], whose message (and `Debug`) says what each node did and
//!    what to do about it.
//! 5. First deployment: fresh nodes refuse to vote for `max_ttl` (60 s), as nodes that lost
//!    their memory do. When no lock can be live on them, trust them once: `redlock nodes
//!    trust`, or `trust_nodes()` — then they vote at once.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # // Three local redis-servers for this example (the doc test runs it).
//! # let nodes = redlock_local::Nodes::from_env_or_start(3)?;
//! # let urls = nodes.urls();
//! use std::time::Duration;
//! use redlock_blocking::Redlock;
//!
//! // `urls`: e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
//! let redlock = Redlock::new(urls)?;
//! let lock = redlock.lock("invoice:42", Duration::from_secs(10))?;
//! // ... work that must not overlap, finished before lock.valid_until() ...
//! let report = lock.release();
//! assert_eq!(report.unreachable(), 0);
//!
//! let total = redlock.with_lock("report:daily", Duration::from_secs(10), |lease| {
//!     // check lease.is_valid() before each step that must not overlap another holder's
//!     40 + 2
//! })?;
//! assert_eq!(total, 42);
//! # Ok(()) }
//! ```
//!
//! # What it never does
//! - A slow or dead node never holds up a decision the other nodes already settled, nor delays
//!   anything past the engine's per-node deadline: the driver thread sleeps until the engine's
//!   deadline, while each node's worker thread waits on its socket.
//! - A late reply is never read as the answer to another request: a connection whose transport
//!   broke is dropped (the worker reconnects on its next request), and one whose reply timed
//!   out is kept with that reply counted to be skipped when it comes — so a release never
//!   overtakes, through a new connection, a `SET` still on its way on the old one.
//! - `Drop` never blocks: an unreleased lock's release is a message to the driver.
//! - A lock never depends on a thread waiting on it: the driver extends the locks that asked
//!   for it and releases dropped ones.
//! - No password in an error, a log line or a `Debug` output: nodes are named by `host:port`.
//!
//! # Implementation note
//! One driver per client owns every lock (`redlock_redis::blocking`, around the engine's
//! `Multiplexer`): its state is stepped by whichever thread brings an input (a caller's call,
//! a worker's replies) while no other thread does, and its thread keeps the deadlines. One
//! worker thread per node writes what the driver hands it:
//! whatever queued up meanwhile goes out as one pipeline, across locks, with at most one request
//! per lock in flight on a node (so a lock's requests never overtake each other). A stopped node
//! delays later requests to that node (up to the I/O timeout each) — they count as timed out
//! for their lock, which the other nodes decide without them. A waiting lock hears releases
//! through one subscriber thread per node, started on first contention.
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use redlock_redis::api::*;
// The blocking watch (with `wait_lost`) shadows the shared one of `api`.
pub use redlock_redis::blocking::{LeaseWatch, Lock, Redlock, RedlockBuilder};
