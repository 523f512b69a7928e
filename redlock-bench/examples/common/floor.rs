//! The raw floor the tokio examples measure against: a lock's commands fanned out with the
//! `redis` crate to 5 nodes, with no lock logic — `SET key token NX PX 10000` on every node at
//! once, then the release script on every node at once. One `ConnectionManager` per node (a
//! multiplexed RESP2 connection that reconnects by itself). Never asserts a time.

use redis::aio::ConnectionManager;
use redlock_core::RELEASE_SCRIPT;

/// One multiplexed connection per node, and the release script.
#[derive(Clone)]
pub(crate) struct Floor {
    conns: [ConnectionManager; 5],
    release: redis::Script,
}

impl Floor {
    /// Connects to the 5 nodes at `urls`.
    pub(crate) async fn connect(urls: Vec<String>) -> Self {
        let mut conns = Vec::new();
        for url in urls {
            let client = redis::Client::open(url).expect("url");
            conns.push(client.get_connection_manager().await.expect("connect"));
        }
        Self {
            conns: conns.try_into().expect("five nodes"),
            release: redis::Script::new(RELEASE_SCRIPT),
        }
    }

    /// One cycle: `key` set to `token` on every node, then released on every node.
    pub(crate) async fn cycle(&self, key: &str, token: &str) {
        self.set_all(key, token).await;
        self.release_all(key, token).await;
    }

    /// `key` set to `token` on every node at once (`SET NX PX`), every reply awaited.
    pub(crate) async fn set_all(&self, key: &str, token: &str) {
        let set = |mut c: ConnectionManager| async move {
            let _: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await
                .expect("SET");
        };
        let [a, b, c, d, e] = self.conns.clone();
        tokio::join!(set(a), set(b), set(c), set(d), set(e));
    }

    /// `key` released on every node at once (the release script), every reply awaited.
    pub(crate) async fn release_all(&self, key: &str, token: &str) {
        let del = |mut c: ConnectionManager| {
            let mut invocation = self.release.prepare_invoke();
            invocation.key(key).arg(token);
            async move {
                let _: i64 = invocation
                    .invoke_async(&mut c)
                    .await
                    .expect("release script");
            }
        };
        let [a, b, c, d, e] = self.conns.clone();
        tokio::join!(del(a), del(b), del(c), del(d), del(e));
    }
}
