//! Local `redis-server` processes on loopback, started and stopped by this process: what the
//! redlock-rs test harness, `redlock demo` and `redlock bench --local` run on.
//!
//! - [`RedisServer`] starts one `redis-server` (binary from `$REDIS_SERVER`, else `PATH`) on a free
//!   loopback port in a temp dir, and can kill it, restart it empty on the same port, pause it
//!   (SIGSTOP) and resume it. [`Servers`] starts several at once; [`RedisCluster`] starts and
//!   forms a Redis Cluster (masters splitting the slots evenly, and replicas).
//! - Inspection helpers ([`RedisServer::get`], [`RedisServer::pttl`], [`Servers::count_holding`])
//!   read a node directly, past any lock client.
//!
//! It never skips and never guesses: if `redis-server` is missing, starting one fails with a
//! message saying how to install it. It only signals processes it started, through their own
//! handles, and kills them on drop. It never binds anything but 127.0.0.1.
//!
//! ```
//! use redlock_local::Servers;
//!
//! let nodes = Servers::start(3);
//! nodes[1].set("k", "v");
//! assert_eq!(nodes.count_holding("k", "v"), 1);
//! ```
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cluster;
mod error;
mod inspect;
mod nodes;
mod options;
mod port;
mod server;
mod servers;
#[cfg(feature = "tls")]
mod tls;

pub use cluster::{CLUSTER_NODE_TIMEOUT, RedisCluster};
pub use error::HarnessError;
pub use inspect::INSPECT_TIMEOUT;
pub use nodes::{NODES_ENV, Nodes};
pub use options::{
    DENY_SCRIPTING_ENV, MIX_ENV, REDIS_SERVER_ENV, ServerOptions, VALKEY_SERVER_ENV,
    VALKEY9_SERVER_ENV,
};
pub use port::PORTS_ENV;
pub use server::RedisServer;
pub use servers::Servers;
#[cfg(feature = "tls")]
pub use tls::{Pem, TlsFiles, install_crypto_provider};
