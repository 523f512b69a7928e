//! The scenarios, each in a file of its own: what one run of it does with one client, on an
//! async runtime ([`Scenario::run_async`]) or on threads ([`Scenario::run_blocking`]).
//!
//! A scenario never builds its own client or runtime (the contender hands them over), never
//! aggregates repetitions (the run does) and never prints.

pub(crate) mod contention;
pub(crate) mod latency;
pub(crate) mod memory;
pub(crate) mod throughput;

use crate::clients::{AsyncClient, BlockingClient};
use crate::exec::Executor;

/// One run of a scenario with one client.
pub(crate) trait Scenario {
    /// What one run measured.
    type Run;

    /// Runs with an async client on `exec`.
    fn run_async<E: Executor, C: AsyncClient>(&self, exec: &E, client: &C) -> Self::Run;

    /// Runs with a blocking client, on threads.
    fn run_blocking<C: BlockingClient>(&self, client: &C) -> Self::Run;
}

/// Lock+release cycles on `key` that are not measured: connections, script caches and the
/// allocator's pools are set up by them.
async fn warm_up<C: AsyncClient>(client: &C, key: &str, cycles: u32) {
    for _ in 0..cycles {
        let held = client
            .lock_key(key)
            .await
            .unwrap_or_else(|why| panic!("warm-up lock on an uncontended key failed: {why}"));
        client.unlock(held).await;
    }
}

/// [`warm_up`] for a blocking client.
fn warm_up_blocking<C: BlockingClient>(client: &C, key: &str, cycles: u32) {
    for _ in 0..cycles {
        let held = client
            .lock_key(key)
            .unwrap_or_else(|why| panic!("warm-up lock on an uncontended key failed: {why}"));
        client.unlock(held);
    }
}
