//! Redlock distributed locks over Redis, for smol.
//!
//! A thin driver for [`redlock_core`](https://docs.rs/redlock-core) with the same API and
//! behaviour as `redlock-tokio`: one multiplexed, reconnecting connection per node (the `redis`
//! crate's `smol-comp` connections, on the async-io reactor), requests polled by the driver, one
//! driver task per client that owns every lock (releases of dropped locks, abandoned
//! acquisitions, auto-extension). Every decision — quorum, validity, retry delay, when to
//! extend — is the engine's. The driver is spawned on smol's global executor
//! (`smol::spawn`) and sleeps with async-io's timers, so it runs whether or not your code awaits
//! anything, under `smol::block_on` or any executor of yours.
//!
//! # Start here
//! 1. Depend on it: `cargo add redlock-smol` (until the crates are on crates.io:
//!    `redlock-smol = { git = "https://github.com/redlock-rs/redlock-rs" }`).
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
//! # smol::block_on(async {
//! use std::time::Duration;
//! use redlock_smol::Redlock;
//!
//! // `urls`: e.g. ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
//! let redlock = Redlock::new(urls)?;
//! let lock = redlock.lock("invoice:42", Duration::from_secs(10)).await?;
//! // ... work that must not overlap, finished before lock.valid_until() ...
//! let report = lock.release().await;
//! assert_eq!(report.unreachable(), 0);
//! # Ok::<(), redlock_smol::Error>(())
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

/// The smol runtime, as the async client sees it (runtime glue: users never name it).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Smol;

impl redlock_redis::aio::Runtime for Smol {
    fn current() -> Result<Self, &'static str> {
        // smol's global executor starts its own threads on first use: there is always one.
        Ok(Self)
    }

    fn is_current(&self) -> bool {
        // One global executor, and async-io's timers, which any task may poll.
        true
    }

    fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        smol::spawn(future).detach();
    }

    fn sleep_until(deadline: Instant) -> impl Future<Output = ()> + Send {
        let timer = async_io::Timer::at(deadline);
        async move {
            timer.await;
        }
    }
}

/// A Redlock client over N independent Redis masters, on smol. Cheap to clone and share:
/// clones use the same connections.
pub type Redlock = redlock_redis::aio::Redlock<Smol>;
/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder = redlock_redis::aio::RedlockBuilder<Smol>;
/// A held lock; dropping it releases it in the background.
pub type Lock = redlock_redis::aio::Lock;

pub use redlock_redis::api::*;
