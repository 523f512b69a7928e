//! redlock-bench's contention scenario (c) on `redlock-tokio` alone, with what the nodes ran
//! for it: `TASKS` tasks of one client compete for one key for `SECONDS` seconds (a holder
//! releases at once and competes again), on 5 local redis-servers of `--node-config plain`
//! (no `SWAPDB`: a proven connection's acquisition is a plain `SET NX PX`). Prints
//! acquisitions and hand-overs per second, and per acquisition the `SET`s (rounds' votes),
//! releases (`EVALSHA` and `DELIFEQ`) and `PUBLISH`es the nodes ran (`INFO commandstats`,
//! summed over the nodes and divided by 5): how many rounds a lock costs under contention.
//! Never asserts anything.
//!
//! `cargo build --release -p redlock-bench --example contend_tokio`, then
//! `target/release/examples/contend_tokio [SECONDS] [TASKS]` (defaults 5 and 8).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redlock_local::{ServerOptions, Servers};
use redlock_tokio::Redlock;

const TTL: Duration = Duration::from_secs(10);

/// The commands counted, as `INFO commandstats` names them.
const COUNTED: [&str; 4] = ["set", "evalsha", "delifeq", "publish"];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(Ok(5), |s| s.parse()).unwrap_or(0);
    let tasks: usize = args.next().map_or(Ok(8), |s| s.parse()).unwrap_or(0);
    if seconds == 0 || tasks == 0 {
        eprintln!("usage: contend_tokio [SECONDS > 0] [TASKS > 0]");
        std::process::exit(2);
    }
    let options = ServerOptions::new().args(["--rename-command", "SWAPDB", ""]);
    let nodes = Servers::start_with(5, &options);
    let redlock = Redlock::new(nodes.urls()).expect("client");
    for _ in 0..200 {
        redlock
            .lock("warm-up", TTL)
            .await
            .expect("lock")
            .release()
            .await;
    }
    let before = counts(&nodes);
    let acquired = Arc::new(AtomicU64::new(0));
    let handovers = Arc::new(AtomicU64::new(0));
    let gave_up = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let end = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    let running: Vec<_> = (0..tasks as u64)
        .map(|task| {
            let (redlock, acquired, handovers, gave_up, last) = (
                redlock.clone(),
                acquired.clone(),
                handovers.clone(),
                gave_up.clone(),
                last.clone(),
            );
            tokio::spawn(async move {
                while Instant::now() < end {
                    match redlock.lock("hot", TTL).await {
                        Ok(lock) => {
                            acquired.fetch_add(1, Ordering::Relaxed);
                            if last.swap(task, Ordering::Relaxed) != task {
                                handovers.fetch_add(1, Ordering::Relaxed);
                            }
                            lock.release().await;
                        }
                        Err(_) => {
                            gave_up.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for task in running {
        task.await.expect("a contending task");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = counts(&nodes);
    let acquisitions = acquired.load(Ordering::Relaxed);
    let per = |at: usize| (after[at] - before[at]) as f64 / 5.0 / acquisitions.max(1) as f64;
    println!(
        "{tasks} tasks, {elapsed:.1} s: {:.0} acquisitions/s, {:.0} hand-overs/s, {} gave up; \
         per acquisition: {:.2} SET, {:.2} EVALSHA, {:.2} DELIFEQ, {:.2} PUBLISH",
        acquisitions as f64 / elapsed,
        handovers.load(Ordering::Relaxed) as f64 / elapsed,
        gave_up.load(Ordering::Relaxed),
        per(0),
        per(1),
        per(2),
        per(3),
    );
}

/// The calls of each of [`COUNTED`] so far, summed over the nodes.
fn counts(nodes: &Servers) -> [u64; 4] {
    let mut sums = [0; 4];
    for server in nodes.servers() {
        for (sum, command) in sums.iter_mut().zip(COUNTED) {
            *sum += server.calls(command);
        }
    }
    sums
}
