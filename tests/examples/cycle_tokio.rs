//! One side of `bench_tokio`'s sequential cycle, alone, for a profiler: `raw` (the floor: `SET
//! NX PX` then the release script, fanned out with the `redis` crate over one
//! `ConnectionManager` per node) or `lock` (`redlock-tokio` lock + release, restart-aware voting
//! off: a plain `SET NX PX` as the floor sends), run `CYCLES` times on 5 local redis-servers.
//! Prints the time per cycle and the client's CPU time per cycle (user + system, from
//! `/proc/self/stat`); never asserts a time.
//!
//! `cargo build --release -p redlock-tests -p redlock-bench --example cycle_tokio`, then
//! `perf record -g target/release/examples/cycle_tokio lock 20000` (or
//! `valgrind --tool=callgrind … lock 2000` for repeatable counts).

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redlock_core::RELEASE_SCRIPT;
use redlock_tests::Servers;
use redlock_tokio::Redlock;

const TTL: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let side = args.next().unwrap_or_default();
    let cycles: u32 = match args.next().map(|n| n.parse()) {
        None => 20_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: cycle_tokio raw|lock [CYCLES > 0]");
            std::process::exit(2);
        }
    };
    let nodes = Servers::start(5);
    let elapsed = match side.as_str() {
        "raw" => raw(&nodes, cycles).await,
        "lock" => lock(&nodes, cycles).await,
        _ => {
            eprintln!("usage: cycle_tokio raw|lock [CYCLES > 0]");
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
    let mut conns = Vec::new();
    for url in nodes.urls() {
        let client = redis::Client::open(url).expect("url");
        conns.push(client.get_connection_manager().await.expect("connect"));
    }
    let conns: [ConnectionManager; 5] = conns.try_into().expect("five");
    let release = redis::Script::new(RELEASE_SCRIPT);
    let one = async |conns: &[ConnectionManager; 5]| {
        let set = |mut c: ConnectionManager| async move {
            let _: Option<String> = redis::cmd("SET")
                .arg("cycle")
                .arg("token")
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await
                .expect("SET");
        };
        let [a, b, c, d, e] = conns.clone();
        tokio::join!(set(a), set(b), set(c), set(d), set(e));
        let del = |mut c: ConnectionManager| {
            let mut invocation = release.prepare_invoke();
            invocation.key("cycle").arg("token");
            async move {
                let _: i64 = invocation.invoke_async(&mut c).await.expect("release");
            }
        };
        let [a, b, c, d, e] = conns.clone();
        tokio::join!(del(a), del(b), del(c), del(d), del(e));
    };
    for _ in 0..200 {
        one(&conns).await;
    }
    measure(cycles, async || one(&conns).await).await
}

/// `redlock-tokio`'s cycles: (wall time, client CPU time) of the measured ones.
async fn lock(nodes: &Servers, cycles: u32) -> (Duration, Duration) {
    let redlock = Redlock::builder(nodes.urls())
        .config(|c| c.restart_aware(false))
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
