//! Redlock distributed locks over Redis, for tokio.
//!
//! A thin driver for [`redlock_core`]: this crate owns the connections (one multiplexed,
//! reconnecting connection per node), the clock, the timers and the entropy; every decision —
//! quorum, validity, retry delay, when to extend — is the engine's.
//!
//! ```no_run
//! # async fn demo() -> Result<(), redlock_tokio::Error> {
//! use std::time::Duration;
//! use redlock_tokio::Redlock;
//!
//! let redlock = Redlock::new([
//!     "redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
//! ])?;
//! let lock = redlock.lock("invoice:42", Duration::from_secs(10)).await?;
//! // ... work that must not overlap, finished before lock.valid_until() ...
//! let report = lock.release().await;
//! assert_eq!(report.unreachable(), 0);
//!
//! // Or let the lock extend itself while the work runs:
//! let total = redlock
//!     .with_lock("report:daily", Duration::from_secs(10), |lease| async move {
//!         // check lease.is_valid() before each step that must not overlap another holder's
//!         40 + 2
//!     })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # What it never does
//! - It never blocks a runtime thread (no `block_on`, also not in `Drop`): releases of dropped
//!   locks and cancelled acquisitions run as background tasks on the runtime.
//! - It never opens a connection per command.
//! - It never puts a password in an error, a log line or a `Debug` output: nodes are named by
//!   `host:port`.
//!
//! Everything must run inside a tokio runtime (the `time` driver enabled).

mod client;
mod conn;
mod driver;
mod lock;
mod scoped;

pub use client::{Redlock, RedlockBuilder};
pub use lock::Lock;
pub use redlock_core::{
    Config, ConfigBuilder, ConfigError, FailureReason, LockRequest, NodeErrorKind, NodeRelease,
    RetryPolicy, Token, Vote,
};
pub use redlock_redis::{DEFAULT_IO_TIMEOUT, Error, LockFailure, NodeReport, ReleaseReport};
pub use scoped::LeaseWatch;
