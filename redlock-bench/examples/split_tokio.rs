//! Where a sequential cycle's time goes: the lock call and the release, timed apart, for the
//! floor (`common/floor.rs`, split into its `SET`s and its releases) and `redlock-tokio`
//! (restart-aware, on nodes without `SWAPDB`: a proven connection's acquisition is the floor's
//! `SET NX PX`), in one process on 5 local nodes, in a task of its own on a 2-worker
//! multi-thread runtime (as redlock-bench's sequential scenario runs it). The two alternate in
//! blocks of `BLOCK` cycles, `BLOCKS` times, so that load drifting on the machine hits both
//! alike; prints the median of each half and of the whole cycle, the client's CPU time per
//! cycle (every thread of the process, from `/proc/self/task/*/schedstat`, in nanoseconds), and
//! ours over the floor's. `ct` runs both on a current-thread runtime instead. Never asserts a
//! time.
//!
//! `cargo build --release -p redlock-bench --example split_tokio`, then
//! `target/release/examples/split_tokio [mt|ct] [BLOCKS]` (`REDIS_SERVER` names the server
//! binary).

use std::time::{Duration, Instant};

use redlock_local::{ServerOptions, Servers};
use redlock_tokio::Redlock;

#[path = "common/floor.rs"]
mod floor;
use floor::Floor;

const TTL: Duration = Duration::from_secs(10);
/// Cycles per block.
const BLOCK: usize = 200;

/// One side's per-cycle times: the lock call, the release.
#[derive(Default)]
struct Halves {
    lock: Vec<Duration>,
    release: Vec<Duration>,
    cycle: Vec<Duration>,
    cpu: Duration,
}

impl Halves {
    fn record(&mut self, start: Instant, locked: Instant, end: Instant) {
        self.lock.push(locked - start);
        self.release.push(end - locked);
        self.cycle.push(end - start);
    }
}

fn median(times: &mut [Duration]) -> f64 {
    times.sort_unstable();
    times
        .get(times.len() / 2)
        .map_or(f64::NAN, |t| t.as_secs_f64() * 1e6)
}

/// The CPU time every thread of this process ran so far (threads that ended are not counted:
/// the runtime's threads live as long as the process).
fn cpu_time() -> Duration {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    let ns = tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

const USAGE: &str = "usage: split_tokio [mt|ct] [BLOCKS > 0]";

fn main() {
    let mut args = std::env::args().skip(1);
    let mut builder = match args.next().as_deref() {
        None | Some("mt") => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(2);
            builder
        }
        Some("ct") => tokio::runtime::Builder::new_current_thread(),
        Some(_) => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let blocks: usize = match args.next().map(|n| n.parse()) {
        None => 20,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let runtime = builder.enable_all().build().expect("a tokio runtime");
    runtime.block_on(measure(blocks));
}

async fn measure(blocks: usize) {
    let options = ServerOptions::new().args(["--rename-command", "SWAPDB", ""]);
    let nodes = Servers::start_with(5, &options);
    let urls = nodes.urls();
    let (floor, ours) = tokio::spawn(async move {
        let floor = Floor::connect(urls.clone()).await;
        let redlock = Redlock::new(urls).expect("client");
        for _ in 0..BLOCK {
            floor.cycle("split", "token").await;
            let lock = redlock.lock("split", TTL).await.expect("lock");
            lock.release().await;
        }
        let (mut of_floor, mut of_ours) = (Halves::default(), Halves::default());
        for _ in 0..blocks {
            let cpu = cpu_time();
            for _ in 0..BLOCK {
                let start = Instant::now();
                floor.set_all("split", "token").await;
                let locked = Instant::now();
                floor.release_all("split", "token").await;
                of_floor.record(start, locked, Instant::now());
            }
            of_floor.cpu += cpu_time().saturating_sub(cpu);
            let cpu = cpu_time();
            for _ in 0..BLOCK {
                let start = Instant::now();
                let lock = redlock.lock("split", TTL).await.expect("lock");
                let locked = Instant::now();
                lock.release().await;
                of_ours.record(start, locked, Instant::now());
            }
            of_ours.cpu += cpu_time().saturating_sub(cpu);
        }
        (of_floor, of_ours)
    })
    .await
    .expect("the measuring task");
    let (mut floor, mut ours) = (floor, ours);
    println!(
        "median µs over {} cycles each: floor / ours (ratio)",
        floor.cycle.len()
    );
    for (name, a, b) in [
        ("lock", &mut floor.lock, &mut ours.lock),
        ("release", &mut floor.release, &mut ours.release),
        ("cycle", &mut floor.cycle, &mut ours.cycle),
    ] {
        let (a, b) = (median(a), median(b));
        println!("{name:8} {a:7.1} / {b:7.1} ({:.2})", b / a);
    }
    let per_cycle = |h: &Halves| h.cpu.as_secs_f64() * 1e6 / h.cycle.len().max(1) as f64;
    let (a, b) = (per_cycle(&floor), per_cycle(&ours));
    println!("cpu      {a:7.1} / {b:7.1} ({:.2}) per cycle", b / a);
}
