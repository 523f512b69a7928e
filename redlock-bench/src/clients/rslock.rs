//! `rslock` as an [`AsyncClient`]: `LockManager::lock(key, ttl)` (its default retry: 3
//! attempts, a random pause of 0–200 ms) and `Lock::release()`, nothing else.

use std::future::Future;

use rslock::{Lock, LockManager};

use super::{AsyncClient, TTL};

impl AsyncClient for LockManager {
    type Held = Lock;

    async fn lock_key(&self, key: &str) -> Result<Lock, String> {
        self.lock(key, TTL).await.map_err(|err| err.to_string())
    }

    fn unlock(&self, held: Lock) -> impl Future<Output = ()> + Send {
        held.release()
    }
}
