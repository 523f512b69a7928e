//! `redlock-tokio` and `redlock-async-std` (both `redlock_async_driver::Redlock<R>`) as an
//! [`AsyncClient`]: `lock(key, ttl)` and `release()`, nothing else.

use std::future::Future;

use redlock_async_driver::{Lock, Redlock, Runtime};

use super::{AsyncClient, TTL};

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
