//! Redlock distributed locks over Redis, for async-std.
//!
//! A thin driver for [`redlock_core`] with the same API and behaviour as `redlock-tokio`: one
//! multiplexed, reconnecting connection per node (the `redis` crate's `smol-comp` connections,
//! which run on the async-io reactor that async-std uses too), requests polled by the driver,
//! one driver task per client that owns every lock (releases of dropped locks, abandoned
//! acquisitions, auto-extension). Every decision —
//! quorum, validity, retry delay, when to extend — is the engine's.
//!
//! **async-std is discontinued upstream** (RUSTSEC-2025-0052: its maintainers point to smol),
//! and the `redis` crate dropped its async-std support in 1.x: this adapter runs on the
//! `redis` crate's smol connections (async-io, which async-std uses too) and spawns with
//! `async_std::task::spawn`. It stays for code that already runs on async-std; **smol users
//! pick `redlock-smol`**, which does not pull async-std in, and new code should not start on
//! async-std.
//!
//! # Start here
//! 1. Depend on it: `cargo add redlock-async-std` (until the crates are on crates.io:
//!    `redlock-async-std = { git = "https://github.com/redlock-rs/redlock-rs" }`).
//! 2. [`Redlock`]`::new(urls)`: three or more independent Redis masters (`redis://host:port`).
//! 3. `redlock.lock(name, ttl).await` gives a [`Lock`]; `with_lock` keeps it extended while a
//!    future runs; `acquire` takes a [`LockRequest`] with every option. Check `is_valid()`
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
//! # async_std::task::block_on(async {
//! use std::time::Duration;
//! use redlock_async_std::Redlock;
//!
//! // `urls`: e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
//! let redlock = Redlock::new(urls)?;
//! let lock = redlock.lock("invoice:42", Duration::from_secs(10)).await?;
//! // ... work that must not overlap, finished before lock.valid_until() ...
//! let report = lock.release().await;
//! assert_eq!(report.unreachable(), 0);
//! # Ok::<(), redlock_async_std::Error>(())
//! # })?;
//! # Ok(()) }
//! ```
//!
//! # What it never does
//! - It never blocks an executor thread (no `block_on`, also not in `Drop`).
//! - It never opens a connection per command.
//! - It never puts a password in an error, a log line or a `Debug` output.
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::future::Future;
use std::time::Instant;

/// The async-std runtime, as the shared async driver sees it (runtime glue: users never name
/// it).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct AsyncStd;

impl redlock_redis::aio::Runtime for AsyncStd {
    fn current() -> Result<Self, &'static str> {
        // async-std's executor is global: there is always one.
        Ok(Self)
    }

    fn is_current(&self) -> bool {
        // One global executor and timer thread.
        true
    }

    fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(async_std::task::spawn(future));
    }

    fn sleep_until(deadline: Instant) -> impl Future<Output = ()> + Send {
        async_std::task::sleep(deadline.saturating_duration_since(Instant::now()))
    }
}

/// A Redlock client over N independent Redis masters, on async-std. Cheap to clone and share:
/// clones use the same connections.
pub type Redlock = redlock_redis::aio::Redlock<AsyncStd>;
/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder = redlock_redis::aio::RedlockBuilder<AsyncStd>;
/// A held lock; dropping it releases it in the background.
pub type Lock = redlock_redis::aio::Lock;

pub use redlock_redis::api::*;
