//! The Redis side of redlock-rs, shared by every adapter so that they behave the same and are
//! written once: node URLs (and naming a node without its password), turning an engine
//! [`Command`](redlock_core::Command) into a Redis request, mapping replies and errors into
//! engine [`Reply`](redlock_core::Reply)s, the [`Error`] type — and the two clients: the async
//! one ([`aio`], generic over the runtime: `redlock-tokio`, `redlock-smol` and
//! `redlock-async-std` each name it with theirs) and the blocking one ([`blocking`]:
//! `redlock-blocking`). Use an adapter crate: each re-exports what its users need.
//!
//! # One name per concept
//! - [`Lifecycle`](redlock_core::Lifecycle): the engine's lock, from its first round to its
//!   release. It decides everything.
//! - [`Multiplexer`](redlock_core::Multiplexer): the engine's many lifecycles of one client,
//!   over one set of nodes.
//! - the *driver*: one per client (a task on the async runtime, or a thread), owning the
//!   multiplexer and every connection; its state is written once for both clients.
//! - `Lock`: the user's handle on a lock the driver owns.
//! - [`Lease`](redlock_core::Lease): a held lock's validity, votes and fence in the engine;
//!   [`LeaseWatch`]: the view of it every holder shares, kept current by the driver, whose
//!   instants count the time the machine was suspended.
//!
//! # Dialects
//! Each connection learns its node's [`Dialect`](redlock_core::Dialect) when it is made
//! (`HELLO` and `COMMAND INFO`), and every command goes out in that node's form
//! ([`Command::redis_form_on`](redlock_core::Command::redis_form_on)): native
//! `DELIFEQ`/`DELEX`, `MSETEX` and exact-TTL `SET … IFEQ` where the node has them and the
//! engine allows them, transactions or scripts otherwise. A node restarted as another server
//! behind the same address keeps the dialect its connection learnt until that connection is
//! rebuilt: a command it lost then fails (never runs weaker), one it gained is not used yet.
//!
//! This crate never makes an algorithmic decision (no quorum, validity or retry math: that is
//! `redlock-core`); its clients carry requests and replies, and wait.
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a client feature the crate holds only the shared types: the drivers' parts sit unused.
#![cfg_attr(
    not(any(feature = "tokio", feature = "smol", feature = "blocking")),
    allow(dead_code, unused_imports, unused_macros)
)]

mod answer;
mod asking;
#[macro_use]
mod entry_points;
mod builder;
mod clock;
mod cluster;
mod deployment;
mod dialect;
mod driver;
#[cfg(any(feature = "tokio", feature = "smol", feature = "blocking"))]
mod encoded;
mod entropy;
mod error;
mod handle;
mod lease_watch;
mod memory;
mod node;
mod reply;
mod request;
mod shard_notices;
mod sleepers;
mod subscribers;
pub mod telemetry;
#[cfg(feature = "tls")]
mod tls;
#[cfg(test)]
mod wakes;

#[cfg(any(feature = "tokio", feature = "smol"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "tokio", feature = "smol"))))]
pub mod aio;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;

pub(crate) use answer::Answer;
pub use builder::{Builder, DEFAULT_IO_TIMEOUT};
// How a builder makes its client: plumbing between the builder and the two clients (and the
// test harness), never named by a lock user.
#[doc(hidden)]
pub use builder::{FromSettings, Settings};
pub(crate) use clock::Clock;
#[doc(hidden)]
pub use cluster::SlotMap;
pub(crate) use deployment::Deployment;
#[cfg(feature = "blocking")]
pub(crate) use dialect::detect as detect_dialect;
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) use dialect::detect_async as detect_dialect_async;
pub(crate) use driver::{
    Call, DriverState, LockIds, Output, Post, acquire, flush, release_by_token, trust,
};
pub(crate) use entropy::seeded_rng;
pub use error::{Error, LockFailure, NodeReport};
pub(crate) use handle::LockHandle;
pub use lease_watch::LeaseWatch;
pub(crate) use memory::{Connected, MemoryWatchSettings, Tracking, resp3_client, speaks_no_resp3};
pub use node::NodeAddr;
#[cfg(feature = "blocking")]
pub(crate) use request::run_batch;
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) use request::run_batch_async;
pub(crate) use request::{Answers, BatchReplies};
pub(crate) use subscribers::{FromSubscriber, Subscribers};
#[cfg(feature = "tls")]
pub use tls::Tls;

/// Every type a lock user names: the types of the adapters' public signatures and of what they
/// return (errors and their per-node detail), re-exported by each adapter with
/// `pub use redlock_redis::api::*`, so that every adapter exports the same names from one list
/// and users never need to name `redlock-core` or this crate. (`redlock-blocking` puts its own
/// `LeaseWatch`, with `wait_lost`, in place of the shared one.)
pub mod api {
    pub use crate::builder::DEFAULT_IO_TIMEOUT;
    pub use crate::error::{Error, LockFailure, NodeReport};
    pub use crate::lease_watch::LeaseWatch;
    #[cfg(feature = "tls")]
    pub use crate::tls::Tls;
    pub use redlock_core::{
        Attempts, Config, ConfigBuilder, ConfigError, Drift, LockRequest, LossCause, NodeErrorKind,
        NodeRelease, ReleaseReport, RetryPolicy, SitOutCause, Token, Vote,
    };
}
