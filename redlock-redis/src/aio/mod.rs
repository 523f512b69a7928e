//! The async client, generic over the runtime: what `redlock-tokio`, `redlock-smol` and
//! `redlock-async-std` are, each with its own [`Runtime`].
//!
//! One driver task per client (the engine's multiplexer, driven over the nodes), one lazy, reconnecting multiplexed connection per node, the lock
//! handle and `with_lock`. Every decision is `redlock-core`'s. An adapter supplies the
//! [`Runtime`] (spawn, sleep) and names the types; use an adapter crate rather than this module.

mod client;
mod conn;
mod driver;
mod in_flight;
mod lock;
mod notices;
mod runtime;
mod shard_notices;
mod turn;
mod with_lock;

pub use client::{Redlock, RedlockBuilder};
pub use lock::Lock;
pub use runtime::Runtime;
