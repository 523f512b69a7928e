//! The async driver shared by the redlock-rs async adapters (`redlock-tokio`,
//! `redlock-async-std`), generic over the runtime.
//!
//! It owns what every async adapter does the same way: one lazy, reconnecting multiplexed
//! connection per node, the loop that runs an engine machine (and nothing else: every decision
//! is `redlock-core`'s), background releases of dropped locks and cancelled acquisitions, and
//! `with_lock`'s auto-extension. An adapter supplies a [`Runtime`] (spawn, sleep) and names the
//! types. Use an adapter crate, not this one.

#[cfg(not(any(feature = "tokio", feature = "smol")))]
compile_error!("redlock-async needs a runtime feature: `tokio` or `smol` (use an adapter crate)");

mod client;
mod conn;
mod driver;
mod lock;
mod runtime;
mod scoped;

pub use client::{Redlock, RedlockBuilder};
pub use lock::Lock;
pub use runtime::Runtime;
pub use scoped::LeaseWatch;
