//! One side of `bench_tokio`'s sequential cycle, alone, for a profiler: `raw` (the floor, see
//! `common/floor.rs`), `lock` (`redlock-tokio` lock + release, restart-aware voting
//! off: a plain `SET NX PX` as the floor sends) or `aware` (the same with restart-aware voting,
//! the default: on stock nodes each `SET` goes sealed in a `MULTI`), `plain` (restart-aware on
//! nodes without `SWAPDB`, as redlock-bench's `--node-config plain`: a plain `SET NX PX` on a
//! proven connection) or `blocking`
//! (`redlock-blocking` as `lock`, from a blocking thread), run `CYCLES` times on 5 local redis-servers.
//! Prints the time per cycle and the client's CPU time per cycle (user + system, from
//! `/proc/self/stat`); never asserts a time.
//!
//! `cargo build --release -p redlock-bench --example cycle_tokio`, then
//! `perf record -g target/release/examples/cycle_tokio lock 20000` (or
//! `valgrind --tool=callgrind … lock 2000` for repeatable counts). Built in `redlock-bench`, not
//! in `redlock-tests`, so that the library is built as a user builds it (no `metrics` feature).

use std::time::{Duration, Instant};

use redlock_local::{ServerOptions, Servers};
use redlock_tokio::Redlock;

#[path = "common/floor.rs"]
mod floor;
use floor::Floor;

const TTL: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let side = args.next().unwrap_or_default();
    let cycles: u32 = match args.next().map(|n| n.parse()) {
        None => 20_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: cycle_tokio raw|lock|aware|plain|blocking [CYCLES > 0]");
            std::process::exit(2);
        }
    };
    // `plain`: the nodes of redlock-bench's `--node-config plain` (no SWAPDB: a proven
    // connection's acquisition is the floor's `SET NX PX`).
    let nodes = match side.as_str() {
        "plain" => {
            let options = ServerOptions::new().args(["--rename-command", "SWAPDB", ""]);
            Servers::start_with(5, &options)
        }
        _ => Servers::start(5),
    };
    let elapsed = match side.as_str() {
        "raw" => raw(&nodes, cycles).await,
        "lock" => lock(&nodes, cycles, false).await,
        "aware" | "plain" => lock(&nodes, cycles, true).await,
        "blocking" => {
            let urls = nodes.urls();
            tokio::task::spawn_blocking(move || blocking(urls, cycles))
                .await
                .expect("blocking side")
        }
        _ => {
            eprintln!("usage: cycle_tokio raw|lock|aware|plain|blocking [CYCLES > 0]");
            std::process::exit(2);
        }
    };
    let (wall, cpu) = elapsed;
    println!(
        "{side}: {:.1?} per cycle, client CPU {:.1?} per cycle ({cycles} cycles)",
        wall / cycles,
        cpu / cycles
    );
}

/// The floor's cycles: (wall time, client CPU time) of the measured ones.
async fn raw(nodes: &Servers, cycles: u32) -> (Duration, Duration) {
    let floor = Floor::connect(nodes.urls()).await;
    for _ in 0..200 {
        floor.cycle("cycle", "token").await;
    }
    measure(cycles, async || floor.cycle("cycle", "token").await).await
}

/// `redlock-tokio`'s cycles: (wall time, client CPU time) of the measured ones.
async fn lock(nodes: &Servers, cycles: u32, restart_aware: bool) -> (Duration, Duration) {
    let redlock = Redlock::builder(nodes.urls())
        .config(|c| c.restart_aware(restart_aware))
        .build()
        .expect("client");
    let one = async || {
        let lock = redlock.lock("cycle", TTL).await.expect("lock");
        lock.release().await;
    };
    for _ in 0..200 {
        one().await;
    }
    measure(cycles, one).await
}

/// `redlock-blocking`'s cycles, restart-aware voting off as `lock`'s, on a thread of its own:
/// (wall time, client CPU time) of the measured ones.
fn blocking(urls: Vec<String>, cycles: u32) -> (Duration, Duration) {
    let redlock = redlock_blocking::Redlock::builder(urls)
        .config(|c| c.restart_aware(false))
        .build()
        .expect("client");
    let one = || {
        let lock = redlock.lock("cycle", TTL).expect("lock");
        lock.release();
    };
    for _ in 0..200 {
        one();
    }
    let (start, cpu) = (Instant::now(), cpu_time());
    for _ in 0..cycles {
        one();
    }
    (start.elapsed(), cpu_time().saturating_sub(cpu))
}

async fn measure(cycles: u32, mut one: impl AsyncFnMut()) -> (Duration, Duration) {
    let (start, cpu) = (Instant::now(), cpu_time());
    for _ in 0..cycles {
        one().await;
    }
    (start.elapsed(), cpu_time().saturating_sub(cpu))
}

/// This process's user + system CPU time (`/proc/self/stat`, in clock ticks of 10 ms).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start at its closing ')'.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}
