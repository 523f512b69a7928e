//! Test support for redlock-rs: real `redis-server` processes (from `redlock-local`, re-exported
//! here) and a fault-injecting TCP proxy.
//!
//! - [`RedisServer`] starts one `redis-server` (binary from `$REDIS_SERVER`, else `PATH`) on a free
//!   loopback port in a temp dir, and can kill it, restart it empty on the same port, pause it
//!   (SIGSTOP) and resume it. [`Servers`] starts several at once.
//! - [`FaultProxy`] sits between a client and a server and adds latency, stalls, partitions, or
//!   cuts a reply after the command ran.
//!
//! The harness never skips: if `redis-server` is missing, starting one panics with a message
//! saying how to install it. It only signals processes it started, through their own handles,
//! and kills them on drop.
//!
//! ```
//! use redlock_tests::{Servers, FaultProxy};
//!
//! let nodes = Servers::start(3);
//! let proxy = FaultProxy::start(nodes[0].addr());
//! let url = nodes[0].url_via(proxy.addr()); // what a client under test connects to
//! # let _ = url;
//! nodes[1].set("k", "v");
//! assert_eq!(nodes.count_holding("k", "v"), 1);
//! ```

pub mod chaos;
pub mod conformance;
pub mod executor;
mod fenced_store;
mod proxy;
mod pump;
mod rng;
pub mod sim;

pub use fenced_store::FencedStore;
pub use proxy::FaultProxy;
pub use redlock_local::{
    CLUSTER_NODE_TIMEOUT, HarnessError, INSPECT_TIMEOUT, REDIS_SERVER_ENV, RedisCluster,
    RedisServer, ServerOptions, Servers, VALKEY_SERVER_ENV,
};
