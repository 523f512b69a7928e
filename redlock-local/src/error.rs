//! The one error type of the harness.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// Why a `redis-server` could not be started.
///
/// Its `Display` text is meant to be read by a person looking at a failed test: it says what to
/// do (install the binary) or shows the server's own log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The `redis-server` binary was not found.
    #[error(
        "redis-server binary `{binary}` not found. These tests need a real Redis: install it \
         with `apt-get install -y redis-server`, or set REDIS_SERVER=/path/to/redis-server"
    )]
    MissingBinary {
        /// The program that was looked for.
        binary: String,
    },
    /// A Valkey server was asked for and `$VALKEY_SERVER` is not set.
    #[error(
        "this test runs Valkey nodes: set VALKEY_SERVER=/path/to/valkey-server \
         (`export VALKEY_SERVER=$(scripts/ensure-valkey.sh)` fetches one; scripts/test.sh does it)"
    )]
    MissingValkey,
    /// A Valkey 9.1 server was asked for and `$VALKEY9_SERVER` is not set.
    #[error(
        "this test runs Valkey 9.1 nodes: set VALKEY9_SERVER=/path/to/valkey-server \
         (`export VALKEY9_SERVER=$(scripts/ensure-valkey.sh 9.1)` fetches one; scripts/test.sh \
         does it)"
    )]
    MissingValkey9,
    /// The binary exists but could not be run.
    #[error("could not run `{binary}`: {source}")]
    Spawn {
        /// The program that was run.
        binary: String,
        /// The error from the operating system.
        source: io::Error,
    },
    /// The process exited before it answered.
    #[error("redis-server for {addr} exited during startup ({status}); its log:\n{log}")]
    Exited {
        /// The address it was told to listen on.
        addr: SocketAddr,
        /// How it exited.
        status: String,
        /// Its output.
        log: String,
    },
    /// The process did not answer PING in time.
    #[error("redis-server on {addr} did not answer PING within {waited:?}; its log:\n{log}")]
    NotReady {
        /// The address it was told to listen on.
        addr: SocketAddr,
        /// How long the harness waited.
        waited: Duration,
        /// Its output so far.
        log: String,
    },
    /// No port could be handed out: the range of `REDLOCK_LOCAL_PORTS` is malformed or full.
    #[error("local ports: {0}")]
    Ports(String),
    /// A cluster could not be formed.
    #[error("local cluster: {0}")]
    Cluster(String),
    /// Some other I/O failure of the harness (temp dir, log file, ...).
    #[error("redis test harness I/O error: {0}")]
    Io(#[from] io::Error),
}
