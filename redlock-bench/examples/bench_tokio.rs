//! Throughput and latency of `redlock-tokio` against the floor: the same Redis commands fanned
//! out directly with the `redis` crate, with no lock logic (`common/floor.rs`), over one
//! `ConnectionManager` per node (a multiplexed RESP2 connection that reconnects by itself). `redlock-tokio` does not use
//! `ConnectionManager`: it keeps a multiplexed connection per node of its own, made again when
//! it breaks, with RESP3 client tracking to watch the node's memory. Both pipeline every task's
//! commands over one connection per node.
//! Prints ratios measured in one run; never asserts a time.
//!
//! `cargo run --release -p redlock-bench --example bench_tokio`

use std::time::{Duration, Instant};

use redlock_local::Servers;
use redlock_tokio::{LockRequest, Redlock};

#[path = "common/floor.rs"]
mod floor;
use floor::Floor;

const ROUNDS: u32 = 1_000;
const TRIALS: usize = 5;
const TASKS: u32 = 16;
const TTL: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let nodes = Servers::start(5);
    let floor = Floor::connect(nodes.urls()).await;
    let redlock = Redlock::new(nodes.urls()).expect("client");
    // The same without restart-aware voting (plain SET NX PX), to show what the vote costs.
    let unaware = Redlock::builder(nodes.urls())
        .config(|c| c.restart_aware(false))
        .build()
        .expect("client");

    // Warm up connections and script caches on both paths.
    for _ in 0..200 {
        floor.cycle("warm", "t").await;
        redlock
            .lock("warm", TTL)
            .await
            .expect("lock")
            .release()
            .await;
    }

    // Alternate the four measurements over several trials and keep each one's median, so that
    // load drifting on a shared machine hits both sides alike.
    let mut samples: [Vec<Duration>; 6] = Default::default();
    for _ in 0..TRIALS {
        let start = Instant::now();
        for _ in 0..ROUNDS {
            floor.cycle("bench:raw", "token").await;
        }
        samples[0].push(start.elapsed() / ROUNDS);

        let start = Instant::now();
        for _ in 0..ROUNDS {
            let lock = redlock.lock("bench:lock", TTL).await.expect("lock");
            lock.release().await;
        }
        samples[1].push(start.elapsed() / ROUNDS);

        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for t in 0..TASKS {
            let floor = floor.clone();
            set.spawn(async move {
                let key = format!("bench:raw:{t}");
                for _ in 0..ROUNDS / 4 {
                    floor.cycle(&key, "token").await;
                }
            });
        }
        while set.join_next().await.is_some() {}
        samples[2].push(start.elapsed() / (ROUNDS / 4 * TASKS));

        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for t in 0..TASKS {
            let redlock = redlock.clone();
            set.spawn(async move {
                let key = format!("bench:lock:{t}");
                for _ in 0..ROUNDS / 4 {
                    redlock
                        .lock(key.clone(), TTL)
                        .await
                        .expect("lock")
                        .release()
                        .await;
                }
            });
        }
        while set.join_next().await.is_some() {}
        samples[3].push(start.elapsed() / (ROUNDS / 4 * TASKS));

        let start = Instant::now();
        for _ in 0..ROUNDS {
            let request = LockRequest::new("bench:fenced", TTL).fenced();
            let lock = redlock.acquire(request).await.expect("fenced lock");
            lock.release().await;
        }
        samples[4].push(start.elapsed() / ROUNDS);

        let start = Instant::now();
        for _ in 0..ROUNDS {
            let lock = unaware.lock("bench:unaware", TTL).await.expect("lock");
            lock.release().await;
        }
        samples[5].push(start.elapsed() / ROUNDS);
    }
    let [
        raw_one,
        lock_one,
        raw_many,
        lock_many,
        fenced_one,
        unaware_one,
    ] = samples.map(|mut s| {
        s.sort();
        s[s.len() / 2]
    });

    println!(
        "N = 5 local redis-servers, median of {TRIALS} alternating trials of {ROUNDS} rounds; lower is better"
    );
    println!("{:<44} {:>12} {:>8}", "", "per op", "ratio");
    println!(
        "{:<44} {:>12.1?} {:>8}",
        "raw SET NX PX + release script, sequential", raw_one, "1.00"
    );
    println!(
        "{:<44} {:>12.1?} {:>8.2}",
        "redlock lock + release, sequential",
        lock_one,
        lock_one.as_secs_f64() / raw_one.as_secs_f64()
    );
    println!(
        "{:<44} {:>12.1?} {:>8.2}",
        "  same, restart-aware voting off",
        unaware_one,
        unaware_one.as_secs_f64() / raw_one.as_secs_f64()
    );
    println!(
        "{:<44} {:>12.1?} {:>8.2}  ({:.2}x plain redlock)",
        "  same, fenced (one more round trip)",
        fenced_one,
        fenced_one.as_secs_f64() / raw_one.as_secs_f64(),
        fenced_one.as_secs_f64() / lock_one.as_secs_f64()
    );
    println!(
        "{:<44} {:>12.1?} {:>8}",
        "raw, 16 concurrent tasks (amortized)", raw_many, "1.00"
    );
    println!(
        "{:<44} {:>12.1?} {:>8.2}",
        "redlock, 16 concurrent tasks (amortized)",
        lock_many,
        lock_many.as_secs_f64() / raw_many.as_secs_f64()
    );
}
