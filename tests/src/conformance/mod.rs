//! The conformance suite: one set of scenarios, written once, that every adapter must pass
//! against real `redis-server` processes. An adapter plugs in by implementing [`Adapter`] and
//! expanding [`conformance_tests!`](crate::conformance_tests) in a test file.

mod adapter;
mod async_adapter;
mod blocking;
pub mod cluster;
pub mod cluster_failover;
pub mod cluster_memory;
pub mod cluster_migration;
pub mod cluster_setups;
pub mod cluster_versions;
pub mod cluster_votes;
pub mod errors;
pub mod handles;
pub mod identity;
pub mod memory;
pub mod notices;
pub mod scenarios;
pub mod sealed;
pub mod tls;
pub mod trim;
pub mod turn;

pub use adapter::{Adapter, HeldLock, Options, Work, transport};
pub use async_adapter::{
    AsyncAdapter, AsyncLock, AsyncStd, AsyncStdLock, Smol, SmolLock, TestExecutor, Tokio, TokioLock,
};
pub use blocking::{Blocking, BlockingLock};

// Every adapter's lock is a handle any task or thread may share, and every client is cheap to
// clone and share: checked by the compiler.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    fn cloned<T: Send + Sync + Clone>() {}
    shared::<redlock_tokio::Lock>();
    shared::<redlock_async_std::Lock>();
    shared::<redlock_blocking::Lock>();
    shared::<redlock_redis::LeaseWatch>();
    cloned::<redlock_tokio::Redlock>();
    cloned::<redlock_async_std::Redlock>();
    cloned::<redlock_blocking::Redlock>();
};
