//! What every redlock-rs adapter shares, so that the tokio, async-std and blocking adapters
//! behave the same and are written once: parsing node URLs (and naming a node without its
//! password), turning an engine [`Command`](redlock_core::Command) into a Redis request,
//! mapping `redis::Value` / `RedisError` into engine [`Reply`](redlock_core::Reply)s, the error
//! type, seeding the engine's RNG from the OS — and a client's driver state, the lock handle
//! and the answers its callers wait for.
//!
//! # One name per concept
//! - [`Lifecycle`](redlock_core::Lifecycle): the engine's lock, from its first round to its
//!   release. It decides everything.
//! - [`Multiplexer`](redlock_core::Multiplexer): the engine's many lifecycles of one client,
//!   over one set of nodes.
//! - the *driver*: one per client (a task on the async runtime, or a thread), owning the
//!   multiplexer and every connection; its state, written once, is [`DriverState`].
//! - `Lock`: the user's handle on a lock the driver owns ([`LockHandle`] is its body).
//! - [`Lease`](redlock_core::Lease): a held lock's validity, votes and fence;
//!   [`LeaseWatch`]: the view of it every holder shares, kept current by the driver.
//!
//! # Dialects
//! Each connection learns its node's [`Dialect`](redlock_core::Dialect) when it is made
//! ([`detect_dialect`]: `HELLO` and `COMMAND INFO`), and [`run_batch`] sends every command in
//! that node's form ([`Command::redis_form_on`](redlock_core::Command::redis_form_on)): native
//! `DELIFEQ`/`DELEX`, `MSETEX` and exact-TTL `SET … IFEQ` where the node has them and the
//! engine allows them, the scripts otherwise. A node restarted as another server behind the
//! same address keeps the dialect its async connection learnt until that connection is rebuilt:
//! a command it lost then fails (never runs weaker), one it gained is not used yet.
//!
//! This crate never makes an algorithmic decision (no quorum, validity or retry math: that is
//! `redlock-core`), never spawns, never sleeps and holds no connection. It is the adapters'
//! shared code: use an adapter crate.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
mod builder;
mod clock;
mod deployment;
mod dialect;
mod driver;
mod entropy;
mod error;
mod handle;
mod lease_watch;
mod memory;
mod node;
mod reply;
mod request;
mod subscribers;
pub mod telemetry;
#[cfg(feature = "tls")]
mod tls;

pub use answer::{Answer, Responder, answer};
pub use builder::{Builder, DEFAULT_IO_TIMEOUT, FromSettings, Settings};
pub use clock::{Clock, Readings, suspend_adjusted};
pub use deployment::Deployment;
pub use dialect::detect as detect_dialect;
#[cfg(any(feature = "tokio", feature = "smol"))]
pub use dialect::detect_async as detect_dialect_async;
pub use driver::{
    Call, DriverState, LockIds, Output, Post, SUSPEND_CHECK, acquire, flush, release_by_token,
    trust,
};
pub use entropy::seeded_rng;
pub use error::{Error, LockFailure, NodeReport};
pub use handle::{LockHandle, Pending, Releasing};
pub use lease_watch::LeaseWatch;
pub use memory::{Connected, MemoryWatchSettings, Tracking, resp3_client, speaks_no_resp3};
pub use node::NodeAddr;
pub use reply::{map_error, map_result, needs_new_connection};
#[cfg(any(feature = "tokio", feature = "smol"))]
pub use request::run_batch_async;
pub use request::{Answers, BatchReplies, run_batch};
pub use subscribers::Subscribers;
#[cfg(feature = "tls")]
pub use tls::Tls;

/// Every type the adapters' public signatures use, re-exported by each adapter with
/// `pub use redlock_redis::api::*`, so that the three adapters export the same names from one
/// list and users never need to name `redlock-core` or this crate.
pub mod api {
    pub use crate::builder::DEFAULT_IO_TIMEOUT;
    pub use crate::deployment::Deployment;
    pub use crate::error::{Error, LockFailure, NodeReport};
    pub use crate::lease_watch::LeaseWatch;
    #[cfg(feature = "tls")]
    pub use crate::tls::Tls;
    pub use redlock_core::{
        Attempts, Config, ConfigBuilder, ConfigError, Drift, ExtendFailure, ExtendOutcome,
        FailureReason, Lease, LockRequest, LockSpec, LossCause, NodeErrorKind, NodeRelease,
        ReleaseReport, RetryPolicy, SitOutCause, Token, Vote,
    };
}
