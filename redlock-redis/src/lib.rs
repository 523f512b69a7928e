//! What every redlock-rs adapter shares about talking to Redis through the `redis` crate, so that
//! the tokio, async-std and blocking adapters behave the same: parsing node URLs (and naming a
//! node without its password), turning an engine [`Command`](redlock_core::Command) into a Redis
//! request, mapping `redis::Value` / `RedisError` into engine [`Reply`](redlock_core::Reply)s,
//! the error type, and seeding the engine's RNG from the OS.
//!
//! This crate never makes an algorithmic decision (no quorum, validity or retry math: that is
//! `redlock-core`), never spawns, never sleeps and holds no connection.

mod builder;
mod entropy;
mod error;
mod node;
mod reply;
mod request;

pub use builder::{Builder, DEFAULT_IO_TIMEOUT, FromSettings, Settings};
pub use entropy::seeded_rng;
pub use error::{Error, LockFailure, NodeReport, ReleaseReport};
pub use node::NodeAddr;
pub use reply::{map_error, map_result, needs_new_connection};
pub use request::Request;
