//! The blocking client: what `redlock-blocking` is.
//!
//! One driver thread per client owns every lock (around the engine's `Multiplexer`), one worker thread and connection per node writes what the
//! driver hands it, and one subscriber thread per node hears releases once locks contend. Every
//! decision is `redlock-core`'s; use the `redlock-blocking` crate rather than this module.

mod client;
mod conn;
mod driver;
mod lock;
mod notices;
mod shard_notices;
mod watch;
mod with_lock;

pub use client::{Redlock, RedlockBuilder};
pub use lock::Lock;
pub use watch::LeaseWatch;
