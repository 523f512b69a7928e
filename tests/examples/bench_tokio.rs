//! Throughput and latency of `redlock-tokio` against the floor: the same Redis commands fanned
//! out directly with the `redis` crate over the same kind of connections, with no lock logic.
//! Prints ratios measured in one run; never asserts a time.
//!
//! `cargo run --release -p redlock-tests --example bench_tokio`

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redlock_core::RELEASE_SCRIPT;
use redlock_tests::Cluster;
use redlock_tokio::Redlock;

const ROUNDS: u32 = 2_000;
const TTL: Duration = Duration::from_secs(10);

async fn raw_round(
    conns: &mut [ConnectionManager; 5],
    release: &redis::Script,
    key: &str,
    token: &str,
) {
    let set = |mut c: ConnectionManager| {
        let (key, token) = (key.to_owned(), token.to_owned());
        async move {
            let _: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await
                .expect("SET");
        }
    };
    let [a, b, c, d, e] = conns.clone();
    tokio::join!(set(a), set(b), set(c), set(d), set(e));
    let del = |mut c: ConnectionManager| {
        let mut invocation = release.prepare_invoke();
        invocation.key(key).arg(token);
        async move {
            let _: i64 = invocation
                .invoke_async(&mut c)
                .await
                .expect("release script");
        }
    };
    let [a, b, c, d, e] = conns.clone();
    tokio::join!(del(a), del(b), del(c), del(d), del(e));
}

fn per_round(elapsed: Duration, rounds: u32) -> Duration {
    elapsed / rounds
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let nodes = Cluster::start(5);
    let mut raw: Vec<ConnectionManager> = Vec::new();
    for url in nodes.urls() {
        let client = redis::Client::open(url).expect("url");
        raw.push(client.get_connection_manager().await.expect("connect"));
    }
    let mut conns: [ConnectionManager; 5] = raw.try_into().expect("five");
    let release = redis::Script::new(RELEASE_SCRIPT);
    let redlock = Redlock::new(nodes.urls()).expect("client");

    // Warm up connections and script caches on both paths.
    for _ in 0..200 {
        raw_round(&mut conns, &release, "warm", "t").await;
        redlock
            .lock("warm", TTL)
            .await
            .expect("lock")
            .release()
            .await;
    }

    let start = Instant::now();
    for _ in 0..ROUNDS {
        raw_round(&mut conns, &release, "bench:raw", "token").await;
    }
    let raw_one = per_round(start.elapsed(), ROUNDS);

    let start = Instant::now();
    for _ in 0..ROUNDS {
        let lock = redlock.lock("bench:lock", TTL).await.expect("lock");
        lock.release().await;
    }
    let lock_one = per_round(start.elapsed(), ROUNDS);

    // 16 tasks on distinct resources: throughput of concurrent lock + release.
    let tasks = 16;
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let mut conns = conns.clone();
        let release = release.clone();
        set.spawn(async move {
            let key = format!("bench:raw:{t}");
            for _ in 0..ROUNDS / 4 {
                raw_round(&mut conns, &release, &key, "token").await;
            }
        });
    }
    while set.join_next().await.is_some() {}
    let raw_many = per_round(start.elapsed(), ROUNDS / 4 * tasks);

    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
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
    let lock_many = per_round(start.elapsed(), ROUNDS / 4 * tasks);

    println!("N = 5 local redis-servers, {ROUNDS} rounds each; lower is better");
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
