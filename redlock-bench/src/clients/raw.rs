//! The raw floor: the Redis commands a lock sends, with no lock logic around them.
//!
//! Acquire is `SET key token NX PX ttl` sent to all 5 nodes at once; release is the library's
//! own compare-and-delete script ([`redlock_core::RELEASE_SCRIPT`], `EVALSHA` through
//! `redis::Script`) sent to all 5 at once. One reconnecting multiplexed connection per node
//! (`redis::aio::ConnectionManager`, the kind redlock-tokio uses), shared by every task.
//!
//! The only decision it makes is the one mutual exclusion cannot do without: a key is held
//! when a majority answered OK; otherwise its SETs are deleted again and the caller may try
//! at once. It never waits for a validity, never retries by itself, never sleeps, and its
//! token is a counter, not 20 random bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::ConnectionManager;
use redis::{Script, Value};

use super::{AsyncClient, TTL};

/// Nodes of the bench deployment.
pub(crate) const NODES: usize = 5;
/// A majority of [`NODES`].
const QUORUM: usize = NODES / 2 + 1;
/// [`TTL`] in ms, as `PX` takes it.
const TTL_MS: u64 = TTL.as_secs() * 1000;

/// The raw floor's client: one connection per node, the release script, a token counter.
#[derive(Clone)]
pub(crate) struct RawClient(Arc<Inner>);

struct Inner {
    conns: [ConnectionManager; NODES],
    release: Script,
    next_token: AtomicU64,
}

/// A key a majority of nodes set.
#[derive(Debug)]
pub(crate) struct RawHeld {
    key: String,
    token: String,
}

impl RawClient {
    /// Connects to every node at `urls`.
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
        Self(Arc::new(Inner {
            conns,
            release: Script::new(redlock_core::RELEASE_SCRIPT),
            next_token: AtomicU64::new(0),
        }))
    }

    /// `SET key token NX PX ttl` on every node at once; how many answered OK.
    async fn set_all(&self, key: &str, token: &str) -> usize {
        let [a, b, c, d, e] = self.0.conns.clone();
        let (a, b, c, d, e) = tokio::join!(
            set(a, key, token),
            set(b, key, token),
            set(c, key, token),
            set(d, key, token),
            set(e, key, token),
        );
        [a, b, c, d, e].into_iter().filter(|ok| *ok).count()
    }

    /// The release script on every node at once.
    async fn delete_all(&self, key: &str, token: &str) {
        let [a, b, c, d, e] = self.0.conns.clone();
        let script = &self.0.release;
        tokio::join!(
            delete(script, a, key, token),
            delete(script, b, key, token),
            delete(script, c, key, token),
            delete(script, d, key, token),
            delete(script, e, key, token),
        );
    }
}

async fn set(mut conn: ConnectionManager, key: &str, token: &str) -> bool {
    let reply: redis::RedisResult<Value> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(TTL_MS)
        .query_async(&mut conn)
        .await;
    matches!(reply, Ok(Value::Okay))
}

async fn delete(script: &Script, mut conn: ConnectionManager, key: &str, token: &str) {
    let mut invocation = script.prepare_invoke();
    invocation.key(key).arg(token);
    // Deleted (1) or not ours (0): the floor does nothing with the answer.
    let _: redis::RedisResult<Value> = invocation.invoke_async(&mut conn).await;
}

impl AsyncClient for RawClient {
    type Held = RawHeld;

    async fn lock_key(&self, key: &str) -> Result<RawHeld, String> {
        let token = format!("raw:{}", self.0.next_token.fetch_add(1, Ordering::Relaxed));
        let granted = self.set_all(key, &token).await;
        if granted >= QUORUM {
            Ok(RawHeld {
                key: key.to_owned(),
                token,
            })
        } else {
            self.delete_all(key, &token).await;
            Err(format!("{granted} of {NODES} nodes granted"))
        }
    }

    async fn unlock(&self, held: RawHeld) {
        self.delete_all(&held.key, &held.token).await;
    }
}
