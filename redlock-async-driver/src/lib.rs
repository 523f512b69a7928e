//! The async driver shared by the redlock-rs async adapters (`redlock-tokio`,
//! `redlock-async-std`), generic over the runtime.
//!
//! It owns what every async adapter does the same way: one driver task per client (the
//! engine's multiplexer, in `redlock_redis::DriverState`, driven over the nodes), one lazy,
//! reconnecting multiplexed connection per node, the lock handle and `with_lock`. Every
//! decision is `redlock-core`'s. An adapter supplies a [`Runtime`] (spawn, sleep) and names the
//! types; the adapter crates re-export everything a user needs, so use one of them rather than
//! this crate.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "tokio", feature = "smol")))]
compile_error!(
    "redlock-async-driver needs a runtime feature: `tokio` or `smol` (use an adapter crate)"
);

mod client;
mod conn;
mod driver;
mod lock;
mod notices;
mod runtime;
mod with_lock;

pub use client::{Redlock, RedlockBuilder};
pub use lock::Lock;
pub use runtime::Runtime;
