//! `redlock-tokio` and `redlock-async-std` (both `redlock_redis::aio::Redlock<R>`) as an
//! [`AsyncClient`], and `redlock-blocking` as a [`BlockingClient`]: `lock(key, ttl)` and
//! `release()`, nothing else.

use std::future::Future;

use redlock_redis::aio::{Lock, Redlock, Runtime};

use super::{AsyncClient, BlockingClient, TTL};

impl<R: Runtime> AsyncClient for Redlock<R> {
    type Held = Lock;

    fn lock_key(&self, key: &str) -> impl Future<Output = Result<Lock, String>> + Send {
        let acquire = self.lock(key, TTL);
        async move { acquire.await.map_err(|err| err.to_string()) }
    }

    async fn unlock(&self, held: Lock) {
        held.release().await;
    }
}

impl BlockingClient for redlock_blocking::Redlock {
    type Held = redlock_blocking::Lock;

    fn lock_key(&self, key: &str) -> Result<redlock_blocking::Lock, String> {
        self.lock(key, TTL).map_err(|err| err.to_string())
    }

    fn unlock(&self, held: redlock_blocking::Lock) {
        held.release();
    }
}
