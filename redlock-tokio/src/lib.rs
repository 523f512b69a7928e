//! Redlock distributed locks over Redis, for tokio.
//!
//! A thin driver for [`redlock_core`]: this crate owns the connections (one multiplexed,
//! reconnecting connection per node), the clock, the timers and the entropy; every decision —
//! quorum, validity, retry delay, when to extend — is the engine's.
//!
//! # Start here
//! 1. Depend on it: `redlock-tokio = { git = "https://github.com/redlock-rs/redlock-rs" }` until the
//!    crates are on crates.io, then `redlock-tokio = "0.1"`, and tokio with its `macros` and `rt-multi-thread` features for `#[tokio::main]`.
//! 2. [`Redlock`]`::new(urls)`: three or more independent Redis masters (`redis://host:port`).
//! 3. `redlock.lock(name, ttl).await` gives a [`Lock`]; `with_lock` keeps it extended while a
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
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! use std::time::Duration;
//! use redlock_tokio::Redlock;
//!
//! // `urls`: e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
//! let redlock = Redlock::new(urls)?;
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
//! assert_eq!(total, 42);
//! # Ok::<(), redlock_tokio::Error>(())
//! # })?;
//! # Ok(()) }
//! ```
//!
//! More in `examples/`: a cron job that runs once across a fleet (`cron_job`), a web handler
//! guarding a resource (`web_handler`), graceful shutdown on SIGTERM (`graceful_shutdown`).
//!
//! # What it never does
//! - It never blocks a runtime thread (no `block_on`, also not in `Drop`): the client's one
//!   driver task releases dropped locks and abandons cancelled acquisitions.
//! - It never spawns a task per lock or per request: one driver task per client (started on
//!   the runtime of the first task that locks), plus one release-notice subscriber per node
//!   once a lock waits for another holder.
//! - It never lets a lock depend on being awaited: a lock asked to auto-extend is extended by
//!   the driver, and a dropped future's operation still runs to its end.
//! - It never opens a connection per command.
//! - It never puts a password in an error, a log line or a `Debug` output: nodes are named by
//!   `host:port`.
//!
//! Everything must run inside a tokio runtime (the `time` driver enabled); called elsewhere, an
//! operation fails at once with [`Error::NoRuntime`], which says what is missing.
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::future::Future;
use std::time::Instant;

/// The tokio runtime, as the shared async driver sees it (runtime glue: users never name it).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Tokio(tokio::runtime::Handle);

impl redlock_redis::aio::Runtime for Tokio {
    fn current() -> Result<Self, &'static str> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            "redlock-tokio runs on tokio: call it from inside a tokio runtime (#[tokio::main], \
             or Runtime::block_on), built with timers (enable_all() or enable_time())"
        })?;
        // tokio offers no way to ask whether the runtime has timers but to make one: a runtime
        // without them panics here (its message goes to the panic hook), and is refused. Where
        // panics abort, there is no asking: such a runtime aborts on the driver's first timer.
        #[cfg(panic = "unwind")]
        {
            let timers = std::panic::catch_unwind(|| {
                let _guard = handle.enter();
                drop(tokio::time::sleep(std::time::Duration::ZERO));
            });
            timers.map_err(|_| {
                "this tokio runtime has no timers, which redlock-tokio needs (deadlines, retry \
                 pauses, auto-extension): build it with enable_all() or enable_time()"
            })?;
        }
        Ok(Self(handle))
    }

    fn is_current(&self) -> bool {
        tokio::runtime::Handle::try_current().is_ok_and(|current| current.id() == self.0.id())
    }

    fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.0.spawn(future));
    }

    fn sleep_until(deadline: Instant) -> impl Future<Output = ()> + Send {
        tokio::time::sleep_until(deadline.into())
    }
}

/// A Redlock client over N independent Redis masters, on tokio. Cheap to clone and share:
/// clones use the same connections.
pub type Redlock = redlock_redis::aio::Redlock<Tokio>;
/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder = redlock_redis::aio::RedlockBuilder<Tokio>;
/// A held lock; dropping it releases it in the background.
pub type Lock = redlock_redis::aio::Lock;

pub use redlock_redis::api::*;

/// The README's Rust examples, compiled as doc tests (`no_run`: they need real nodes), so that
/// what a new user copies builds.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;
