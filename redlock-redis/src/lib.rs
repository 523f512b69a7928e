//! What every redlock-rs adapter shares about talking to Redis through the `redis` crate, so that
//! the tokio, async-std and blocking adapters behave the same: parsing node URLs (and naming a
//! node without its password), turning an engine [`Command`](redlock_core::Command) into a Redis
//! request, mapping `redis::Value` / `RedisError` into engine [`Reply`](redlock_core::Reply)s,
//! the error type, and seeding the engine's RNG from the OS.
//!
//! It also holds what every adapter does with a lock the same way, whatever its transport: the
//! client's settings and RNG, reading a lock lifecycle's events into results and errors, the
//! held lock's accessors ([`lock_accessors!`]) and [`LeaseWatch`].
//!
//! This crate never makes an algorithmic decision (no quorum, validity or retry math: that is
//! `redlock-core`), never spawns, never sleeps and holds no connection.

mod builder;
mod clock;
mod entropy;
mod error;
mod lease_watch;
mod lock_state;
mod node;
pub mod notice_board;
mod reply;
mod request;
pub mod telemetry;
#[cfg(feature = "tls")]
mod tls;

pub use builder::{Builder, DEFAULT_IO_TIMEOUT, FromSettings, Settings};
pub use clock::{Clock, Readings, suspend_adjusted};
pub use entropy::seeded_rng;
pub use error::{Error, LockFailure, NodeReport};
pub use lease_watch::{LeaseKeeper, LeaseWatch, lease_watch, lease_watch_at};
pub use lock_state::{ClientCore, Start, extended, kept};
pub use node::NodeAddr;
pub use reply::{map_error, map_result, needs_new_connection};
pub use request::Request;
#[cfg(feature = "tls")]
pub use tls::Tls;

/// Every type the adapters' public signatures use, re-exported by each adapter with
/// `pub use redlock_redis::api::*`, so that the three adapters export the same names from one
/// list and users never need to name `redlock-core` or this crate.
pub mod api {
    pub use crate::builder::DEFAULT_IO_TIMEOUT;
    pub use crate::error::{Error, LockFailure, NodeReport};
    pub use crate::lease_watch::LeaseWatch;
    #[cfg(feature = "tls")]
    pub use crate::tls::Tls;
    pub use redlock_core::{
        Attempts, Config, ConfigBuilder, ConfigError, Drift, ExtendFailure, ExtendOutcome,
        FailureReason, Lease, LockRequest, LockSpec, LossCause, NodeErrorKind, NodeRelease,
        ReleaseReport, RetryPolicy, Token, Vote,
    };
}
