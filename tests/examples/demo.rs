//! A tour of redlock-rs on five real `redis-server` processes started on loopback.
//!
//! `cargo run -p redlock-tests --example demo` (needs `redis-server`: `apt-get install -y
//! redis-server`, or set `REDIS_SERVER=/path/to/redis-server`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlock_tests::Cluster;
use redlock_tokio::{LockRequest, Redlock, RetryPolicy, Vote};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut nodes = Cluster::start(5);
    println!("started 5 redis-server nodes: {:?}", nodes.urls());
    let retry = RetryPolicy::default()
        .unlimited()
        .delay(Duration::from_millis(5))
        .jitter(Duration::from_millis(20))
        .deadline(Duration::from_secs(30));
    let redlock = Redlock::builder(nodes.urls()).retry(retry).build()?;

    // Eight workers, five critical sections each; `inside` counts who is in one right now.
    let inside = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..8 {
        let (redlock, inside) = (redlock.clone(), inside.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..5 {
                let lock = redlock.lock("demo:report", Duration::from_secs(5)).await?;
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                let report = lock.release().await;
                assert_eq!(report.unreachable(), 0);
            }
            Ok::<_, redlock_tokio::Error>(worker)
        }));
    }
    for worker in workers {
        worker.await??;
    }
    println!(
        "8 workers x 5 critical sections, never two at once, in {:?}",
        started.elapsed()
    );

    let held = redlock.lock("demo:job", Duration::from_secs(10)).await?;
    let err = redlock
        .try_lock("demo:job", Duration::from_secs(10))
        .await
        .unwrap_err();
    println!("a second try_lock while held: {err}");
    held.release().await;

    nodes.kill(0);
    nodes.kill(1);
    let lock = redlock
        .try_lock("demo:job", Duration::from_secs(10))
        .await?;
    println!(
        "2 of 5 nodes down: still locked, valid for {:?} more",
        lock.remaining()
    );
    lock.release().await;
    nodes.kill(2);
    let err = redlock
        .try_lock("demo:job", Duration::from_secs(10))
        .await
        .unwrap_err();
    println!("3 of 5 nodes down: {err}");

    // Nodes 0 and 1 come back empty: they lost their memory, so restart-aware voting keeps them
    // out until the longest TTL in use (60 s by default) has passed on their clocks.
    nodes.restart_empty(0);
    nodes.restart_empty(1);
    // (The first round after a restart may still find the old connections broken.)
    let mut refused = None;
    for _ in 0..20 {
        let err = redlock
            .try_lock("demo:job", Duration::from_secs(10))
            .await
            .unwrap_err();
        let ineligible = err.failure().is_some_and(|f| {
            f.nodes
                .iter()
                .any(|n| matches!(n.result, Vote::Ineligible { .. }))
        });
        refused = Some(err);
        if ineligible {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(err) = refused {
        println!("2 nodes restarted empty, 1 still down: {err}");
    }
    // This demo knows no lock is live on them (it holds none): it may say so.
    let trusted = redlock.trust_nodes().await;
    println!(
        "trusted the restarted nodes: {}",
        trusted
            .iter()
            .map(|n| format!("{} {:?}", n.node, n.result))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let total = redlock
        .with_lock(
            "demo:scoped",
            Duration::from_millis(500),
            |lease| async move {
                // Work for three TTLs; the lock extends itself meanwhile.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                assert!(lease.is_valid());
                42
            },
        )
        .await;
    println!("with_lock over 3x its TTL (nodes restarted): {total:?}");

    // Fencing: a holder that pauses past its validity is fenced off by the protected store.
    nodes.restart_empty(2);
    nodes[2].trust();
    let store_server = redlock_tests::RedisServer::start();
    let store = redlock_tests::FencedStore::new(&store_server.url(), "demo:report");
    let fenced = |ttl| LockRequest::new("demo:fenced", ttl).fenced();
    let paused = redlock.acquire(fenced(Duration::from_millis(300))).await?;
    let old_fence = paused.fence().unwrap_or_default();
    tokio::time::sleep(Duration::from_millis(600)).await; // a GC pause, past the validity
    let next = redlock.acquire(fenced(Duration::from_secs(5))).await?;
    let new_fence = next.fence().unwrap_or_default();
    let written = store.write(new_fence, "from the new holder");
    let stale = store.write(old_fence, "from the paused holder");
    println!(
        "fences {old_fence} then {new_fence}: the new holder's write accepted: {written}, the \
         paused holder's write accepted: {stale}"
    );
    next.release().await;
    drop(paused);
    Ok(())
}
