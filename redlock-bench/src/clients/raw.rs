//! The raw floors: the Redis commands a lock sends, with no lock logic around them.
//!
//! Acquire is `SET key token NX PX ttl` sent to all 5 nodes at once; release is the library's
//! own compare-and-delete script ([`redlock_core::RELEASE_SCRIPT`], `EVALSHA`) sent to all 5
//! at once. That logic is written once, in [`RawClient`]; how the commands reach the nodes is
//! its [`Nodes`]:
//! - [`Multiplexed`]: one reconnecting multiplexed connection per node, shared by every task:
//!   the `redis` crate's `redis::aio::ConnectionManager`, which wraps a `MultiplexedConnection`
//!   and reconnects by itself, speaking RESP2. The adapters do not use it: they keep a
//!   `MultiplexedConnection` per node of their own (`redlock-redis`'s async connections), made
//!   again when it breaks, speaking RESP3 with client tracking to watch the node's memory. Both
//!   pipeline every task's commands over one connection per node; the floor has none of the
//!   tracking or memory proofs. The redis crate runs it on the runtime it was made on: tokio
//!   for the raw floor, smol's async-io for the async-std floor.
//! - [`NodeThreads`](super::raw_threads::NodeThreads): one thread and one blocking
//!   `redis::Connection` per node, for the blocking floor.
//!
//! The only decision it makes is the one mutual exclusion cannot do without: a key is held
//! when a majority answered OK; otherwise its SETs are deleted again and the caller may try
//! at once. It never waits for a validity, never retries by itself, never sleeps, and its
//! token is a counter, not 20 random bytes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis::aio::ConnectionManager;
use redis::{Cmd, Script, ScriptInvocation, Value};

use super::{AsyncClient, TTL};

/// Nodes of the bench deployment.
pub(crate) const NODES: usize = 5;
/// A majority of [`NODES`].
const QUORUM: usize = NODES / 2 + 1;
/// [`TTL`] in ms, as `PX` takes it.
const TTL_MS: u64 = TTL.as_secs() * 1000;

/// How a raw floor reaches its [`NODES`] nodes: each command goes to all of them at once, and
/// its future ends when every node answered.
pub(crate) trait Nodes: Send + Sync + 'static {
    /// `SET key token NX PX ttl` on every node at once; how many answered OK.
    fn set_all(&self, key: &str, token: &str) -> impl Future<Output = usize> + Send;

    /// The release script on every node at once.
    fn release_all(&self, key: &str, token: &str) -> impl Future<Output = ()> + Send;
}

/// A raw floor's client: its nodes and a token counter.
pub(crate) struct RawClient<N>(Arc<Inner<N>>);

struct Inner<N> {
    nodes: N,
    next_token: AtomicU64,
}

impl<N> Clone for RawClient<N> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

/// A key a majority of nodes set.
#[derive(Debug)]
pub(crate) struct RawHeld {
    key: String,
    token: String,
}

impl<N: Nodes> RawClient<N> {
    /// A client over `nodes`.
    pub(crate) fn new(nodes: N) -> Self {
        Self(Arc::new(Inner {
            nodes,
            next_token: AtomicU64::new(0),
        }))
    }
}

impl<N: Nodes> AsyncClient for RawClient<N> {
    type Held = RawHeld;

    async fn lock_key(&self, key: &str) -> Result<RawHeld, String> {
        let token = format!("raw:{}", self.0.next_token.fetch_add(1, Ordering::Relaxed));
        let granted = self.0.nodes.set_all(key, &token).await;
        if granted >= QUORUM {
            Ok(RawHeld {
                key: key.to_owned(),
                token,
            })
        } else {
            self.0.nodes.release_all(key, &token).await;
            Err(format!("{granted} of {NODES} nodes granted"))
        }
    }

    async fn unlock(&self, held: RawHeld) {
        self.0.nodes.release_all(&held.key, &held.token).await;
    }
}

/// The acquire command: `SET key token NX PX ttl`.
pub(crate) fn set_command(key: &str, token: &str) -> Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(token).arg("NX").arg("PX").arg(TTL_MS);
    cmd
}

/// Whether a node set the key.
pub(crate) fn granted(reply: &redis::RedisResult<Value>) -> bool {
    matches!(reply, Ok(Value::Okay))
}

/// The release script, ready to run on `key` with `token` (`EVALSHA`, loading the script on
/// `NOSCRIPT`).
pub(crate) fn release_invocation<'a>(
    script: &'a Script,
    key: &str,
    token: &str,
) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    invocation.key(key).arg(token);
    invocation
}

/// The release script.
pub(crate) fn release_script() -> Script {
    Script::new(redlock_core::RELEASE_SCRIPT)
}

/// Whether the floors release with `DELIFEQ key token` (set once, before any floor runs, when
/// the nodes are Valkey ≥ 9: the cheapest correct compare-and-delete there) instead of the
/// release script.
static NATIVE_RELEASE: AtomicBool = AtomicBool::new(false);

/// Makes the floors release with `DELIFEQ` (`true`) or the script (`false`).
pub(crate) fn release_natively(native: bool) {
    NATIVE_RELEASE.store(native, Ordering::Relaxed);
}

/// `DELIFEQ key token`, when the floors release natively.
pub(crate) fn native_release(key: &str, token: &str) -> Option<Cmd> {
    NATIVE_RELEASE.load(Ordering::Relaxed).then(|| {
        let mut cmd = redis::cmd("DELIFEQ");
        cmd.arg(key).arg(token);
        cmd
    })
}

/// One multiplexed, reconnecting connection per node, shared by every task.
pub(crate) struct Multiplexed {
    conns: [ConnectionManager; NODES],
    release: Script,
}

impl Multiplexed {
    /// Connects to every node at `urls`, on the runtime this future runs on (the redis crate
    /// picks tokio inside a tokio runtime, smol's async-io elsewhere).
    ///
    /// # Panics
    /// Unless there are exactly [`NODES`] reachable nodes: the bench starts them itself.
    pub(crate) async fn connect(urls: &[String]) -> Self {
        let mut conns = Vec::with_capacity(NODES);
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("a node URL the bench made");
            let conn = client
                .get_connection_manager()
                .await
                .expect("a connection to a local redis-server the bench started");
            conns.push(conn);
        }
        let count = conns.len();
        let conns: [ConnectionManager; NODES] = conns
            .try_into()
            .unwrap_or_else(|_| panic!("the raw floor needs {NODES} nodes, got {count}"));
        Self {
            conns,
            release: release_script(),
        }
    }
}

impl Nodes for Multiplexed {
    async fn set_all(&self, key: &str, token: &str) -> usize {
        let [a, b, c, d, e] = self.conns.clone();
        // `tokio::join!` only polls: it needs no tokio runtime, and runs on async-std alike.
        let (a, b, c, d, e) = tokio::join!(
            set(a, key, token),
            set(b, key, token),
            set(c, key, token),
            set(d, key, token),
            set(e, key, token),
        );
        [a, b, c, d, e].into_iter().filter(|ok| *ok).count()
    }

    async fn release_all(&self, key: &str, token: &str) {
        let [a, b, c, d, e] = self.conns.clone();
        let script = &self.release;
        tokio::join!(
            release(script, a, key, token),
            release(script, b, key, token),
            release(script, c, key, token),
            release(script, d, key, token),
            release(script, e, key, token),
        );
    }
}

async fn set(mut conn: ConnectionManager, key: &str, token: &str) -> bool {
    granted(&set_command(key, token).query_async(&mut conn).await)
}

async fn release(script: &Script, mut conn: ConnectionManager, key: &str, token: &str) {
    // Deleted (1) or not ours (0): the floor does nothing with the answer.
    let _: redis::RedisResult<Value> = match native_release(key, token) {
        Some(cmd) => cmd.query_async(&mut conn).await,
        None => {
            release_invocation(script, key, token)
                .invoke_async(&mut conn)
                .await
        }
    };
}
