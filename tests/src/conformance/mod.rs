//! The conformance suite: one set of scenarios, written once, that every adapter must pass
//! against real `redis-server` processes. An adapter plugs in by implementing [`Adapter`] and
//! expanding [`conformance_tests!`](crate::conformance_tests) in a test file.

mod adapter;
mod async_adapter;
mod blocking;
pub mod errors;
pub mod handles;
pub mod notices;
pub mod scenarios;
pub mod tls;

pub use adapter::{Adapter, HeldLock, Options, Work, transport};
pub use async_adapter::{
    AsyncAdapter, AsyncLock, AsyncStd, AsyncStdLock, Smol, SmolLock, TestExecutor, Tokio, TokioLock,
};
pub use blocking::{Blocking, BlockingLock};
