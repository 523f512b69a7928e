//! Redlock distributed locks over Redis, for blocking code: no async runtime.
//!
//! A thin driver for [`redlock_core`]: this crate owns the connections (one worker thread and one
//! connection per node), the clock and the waiting; every decision — quorum, validity, retry
//! delay, when to extend, which replies count — is the engine's (`redlock_core::Lifecycle`). Same API and behaviour as `redlock-tokio`, blocking.
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
//!   anything past the engine's per-node deadline: the caller waits on answers with the
//!   machine's deadline, while the node's worker waits on the socket.
//! - A connection whose request failed or timed out is never reused (a late reply would be read
//!   as the answer to the next command); the worker reconnects on its next request.
//! - `Drop` never blocks: an unreleased lock's release is handed to the node workers.
//! - No password in an error, a log line or a `Debug` output: nodes are named by `host:port`.
//!
//! # Implementation note
//! Each node's worker runs requests in submission order, for every lock of the client: one at
//! a time when they come one at a time, and whatever queued up meanwhile as one pipeline (at most
//! one request per lock in a pipeline, so a lock's requests never overtake each other). A
//! stopped node therefore delays later requests to that node (up to the I/O timeout each) — they
//! count as timed out for their lock, which the other nodes decide without them. A waiting lock
//! hears releases through one subscriber thread per node, started on first contention.

mod client;
mod conn;
mod driver;
mod lock;
mod notices;
mod with_lock;

pub use client::{Redlock, RedlockBuilder};
pub use lock::Lock;
pub use redlock_redis::api::*;
