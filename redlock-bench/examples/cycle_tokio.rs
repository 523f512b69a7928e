//! One side of `bench_tokio`'s sequential cycle, alone, for a profiler: `raw` (the floor, see
//! `common/floor.rs`), `lock` (`redlock-tokio` lock + release, restart-aware voting
//! off: a plain `SET NX PX` as the floor sends) or `aware` (the same with restart-aware voting,
//! the default: on stock nodes each `SET` goes sealed in a `MULTI`), `plain` (restart-aware on
//! nodes without `SWAPDB`, as redlock-bench's `--node-config plain`: a plain `SET NX PX` on a
//! proven connection) or `blocking`
//! (`redlock-blocking` as `lock`, from a blocking thread), run `CYCLES` times on 5 local redis-servers;
//! `raw-blocking` runs redlock-bench's threads floor (`src/clients/raw_threads.rs`: one thread
//! and blocking connection per node) from a blocking thread, `blocking`'s own floor.
//! `raw-64` and `plain-64` run the floor and `plain` from 64 tasks at once, each on a key of its
//! own, `CYCLES` in all (as redlock-bench's throughput scenario). `raw-async-std`, `async-std`,
//! `raw-smol` and `smol` run the floor and `plain` on a thread of
//! their own, blocked on by async-std or smol (as redlock-bench's rows of those names).
//! `raw`, `lock`, `aware` and `plain` run on the thread that blocks on `main` (every turn of the
//! client runs there, and the workers wake it for each reply); `raw-task` and `plain-task` run
//! the floor and `plain` in a task of their own on a worker, as redlock-bench's sequential
//! scenario runs every tokio contender.
//! Prints the time per cycle, the client's CPU time per cycle (user + system, from
//! `/proc/self/stat`), how often the cycle's future was polled per cycle (each poll after the
//! first is a wake-up the caller's task took) and the machine's idle share over the measured
//! cycles (`/proc/stat`); never asserts a time.
//!
//! `cargo build --release -p redlock-bench --example cycle_tokio`, then
//! `perf record -g target/release/examples/cycle_tokio lock 20000` (or
//! `valgrind --tool=callgrind … lock 2000` for repeatable counts). Built in `redlock-bench`, not
//! in `redlock-tests`, so that the library is built as a user builds it (no `metrics` feature).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use redlock_local::{ServerOptions, Servers};
use redlock_tokio::Redlock;

#[path = "common/floor.rs"]
mod floor;
use floor::Floor;
// redlock-bench's own clients: `raw-blocking` runs its threads floor itself, not a copy.
// Most of the module is the bench's other contenders, unused here.
#[allow(dead_code)]
#[path = "../src/clients/mod.rs"]
mod clients;
use clients::BlockingClient;
use clients::raw::RawClient;
use clients::raw_threads::NodeThreads;

const TTL: Duration = Duration::from_secs(10);

const USAGE: &str = "usage: cycle_tokio raw|lock|aware|plain|raw-task|plain-task|blocking|raw-blocking|raw-64|plain-64|raw-async-std|async-std|raw-smol|smol [CYCLES > 0, a multiple of 64 for the -64 sides]";

/// How often the measured cycles' futures were polled.
static POLLS: AtomicU64 = AtomicU64::new(0);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let side = args.next().unwrap_or_default();
    let cycles: u32 = match args.next().map(|n| n.parse()) {
        None if side.ends_with("-64") => 64_000,
        None => 20_000,
        // The `-64` sides share the cycles out evenly among their tasks.
        Some(Ok(n)) if n > 0 && (!side.ends_with("-64") || n % TASKS == 0) => n,
        Some(_) => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    // `plain`: the nodes of redlock-bench's `--node-config plain` (no SWAPDB: a proven
    // connection's acquisition is the floor's `SET NX PX`).
    let nodes = match side.as_str() {
        "plain" | "plain-task" | "plain-64" | "async-std" | "smol" => {
            let options = ServerOptions::new().args(["--rename-command", "SWAPDB", ""]);
            Servers::start_with(5, &options)
        }
        _ => Servers::start(5),
    };
    let elapsed = match side.as_str() {
        "raw" => raw(&nodes, cycles).await,
        // In a task of their own, as redlock-bench's sequential scenario runs every tokio
        // contender: the lock calls' turns run on a worker, not on the thread blocking on main.
        "raw-task" => tokio::spawn(raw_urls(nodes.urls(), cycles))
            .await
            .expect("the floor's task"),
        "plain-task" => tokio::spawn(lock_on(Redlock::builder(nodes.urls()), cycles, true))
            .await
            .expect("plain's task"),
        "lock" => lock(&nodes, cycles, false).await,
        "aware" | "plain" => lock(&nodes, cycles, true).await,
        "raw-64" => raw_many(&nodes, cycles).await,
        "plain-64" => lock_many(&nodes, cycles).await,
        "blocking" => {
            let urls = nodes.urls();
            tokio::task::spawn_blocking(move || blocking(urls, cycles))
                .await
                .expect("blocking side")
        }
        "raw-blocking" => {
            let urls = nodes.urls();
            tokio::task::spawn_blocking(move || raw_blocking(urls, cycles))
                .await
                .expect("raw-blocking side")
        }
        "raw-async-std" | "raw-smol" | "async-std" | "smol" => {
            let urls = nodes.urls();
            // A thread outside tokio: the redis crate then runs its connections on smol's
            // async-io, as it does for redlock-bench's async-std and smol rows.
            let other = side.clone();
            std::thread::spawn(move || match other.as_str() {
                "raw-async-std" => async_std::task::block_on(raw_urls(urls, cycles)),
                "raw-smol" => smol::block_on(raw_urls(urls, cycles)),
                "async-std" => async_std::task::block_on(lock_on(
                    redlock_async_std::Redlock::builder(urls),
                    cycles,
                    true,
                )),
                _ => smol::block_on(lock_on(redlock_smol::Redlock::builder(urls), cycles, true)),
            })
            .join()
            .expect("async-std or smol side")
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let (wall, cpu) = elapsed;
    println!(
        "{side}: {:.1?} per cycle, client CPU {:.1?} per cycle (user {:.1?}), {:.2} polls per cycle, machine idle {:.0} % ({cycles} cycles)",
        wall / cycles,
        (cpu.user + cpu.system) / cycles,
        cpu.user / cycles,
        POLLS.load(Ordering::Relaxed) as f64 / f64::from(cycles),
        cpu.idle_percent()
    );
}

/// The floor's cycles: (wall time, client CPU time) of the measured ones.
async fn raw(nodes: &Servers, cycles: u32) -> (Duration, Cpu) {
    raw_urls(nodes.urls(), cycles).await
}

/// The floor's cycles on the nodes at `urls`.
async fn raw_urls(urls: Vec<String>, cycles: u32) -> (Duration, Cpu) {
    let floor = Floor::connect(urls).await;
    for _ in 0..200 {
        floor.cycle("cycle", "token").await;
    }
    measure(cycles, || floor.cycle("cycle", "token")).await
}

/// How many tasks the `-64` sides run at once.
const TASKS: u32 = 64;

/// The floor's cycles from [`TASKS`] tasks at once, `cycles` in all.
async fn raw_many(nodes: &Servers, cycles: u32) -> (Duration, Cpu) {
    let floor = Floor::connect(nodes.urls()).await;
    many(cycles, move |key| {
        let floor = floor.clone();
        async move { floor.cycle(&key, "token").await }
    })
    .await
}

/// `plain`'s cycles from [`TASKS`] tasks at once, `cycles` in all.
async fn lock_many(nodes: &Servers, cycles: u32) -> (Duration, Cpu) {
    let redlock = Redlock::new(nodes.urls()).expect("client");
    many(cycles, move |key| {
        let redlock = redlock.clone();
        async move {
            let lock = redlock.lock(key, TTL).await.expect("lock");
            lock.release().await;
        }
    })
    .await
}

/// Runs `one` (a cycle on the key it is given) from [`TASKS`] tasks, each on a key of its own,
/// 20 warm-up cycles each, then `cycles` in all: (wall time, client CPU time) of those.
async fn many<F, Fut>(cycles: u32, one: F) -> (Duration, Cpu)
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let run = |count: u32| {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let one = one.clone();
                tokio::spawn(async move {
                    for _ in 0..count {
                        Counted(std::pin::pin!(one(format!("cycle:{task}")))).await;
                    }
                })
            })
            .collect();
        async move {
            for task in tasks {
                task.await.expect("a cycle task");
            }
        }
    };
    run(20).await;
    POLLS.store(0, Ordering::Relaxed);
    let (start, cpu) = (Instant::now(), cpu_time());
    run(cycles / TASKS).await;
    (start.elapsed(), cpu_time().saturating_sub(cpu))
}

/// `redlock-tokio`'s cycles: (wall time, client CPU time) of the measured ones.
async fn lock(nodes: &Servers, cycles: u32, restart_aware: bool) -> (Duration, Cpu) {
    lock_on(Redlock::builder(nodes.urls()), cycles, restart_aware).await
}

/// The async client's cycles on any runtime: (wall time, client CPU time) of the measured ones.
async fn lock_on<R: redlock_redis::aio::Runtime>(
    builder: redlock_redis::aio::RedlockBuilder<R>,
    cycles: u32,
    restart_aware: bool,
) -> (Duration, Cpu) {
    let redlock = builder
        .config(|c| c.restart_aware(restart_aware))
        .build()
        .expect("client");
    let redlock = &redlock;
    let one = move || async move {
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
fn blocking(urls: Vec<String>, cycles: u32) -> (Duration, Cpu) {
    let redlock = redlock_blocking::Redlock::builder(urls)
        .config(|c| c.restart_aware(false))
        .build()
        .expect("client");
    let one = || {
        let lock = redlock.lock("cycle", TTL).expect("lock");
        lock.release();
    };
    measure_blocking(cycles, one)
}

/// The threads floor's cycles on a thread of its own: (wall time, client CPU time) of the
/// measured ones.
fn raw_blocking(urls: Vec<String>, cycles: u32) -> (Duration, Cpu) {
    let floor = RawClient::new(NodeThreads::connect(&urls));
    let one = || {
        let held = floor.lock_key("cycle").expect("the floor's SETs");
        floor.unlock(held);
    };
    measure_blocking(cycles, one)
}

/// 200 warm-up cycles of `one` on this thread, then `cycles` measured: (wall time, client CPU
/// time) of those.
fn measure_blocking(cycles: u32, one: impl Fn()) -> (Duration, Cpu) {
    for _ in 0..200 {
        one();
    }
    let (start, cpu) = (Instant::now(), cpu_time());
    for _ in 0..cycles {
        one();
    }
    (start.elapsed(), cpu_time().saturating_sub(cpu))
}

async fn measure<F: Future<Output = ()>>(
    cycles: u32,
    mut one: impl FnMut() -> F,
) -> (Duration, Cpu) {
    let (start, cpu) = (Instant::now(), cpu_time());
    for _ in 0..cycles {
        Counted(std::pin::pin!(one())).await;
    }
    (start.elapsed(), cpu_time().saturating_sub(cpu))
}

/// A future that counts its polls in [`POLLS`].
struct Counted<'a, F>(Pin<&'a mut F>);

impl<F: Future> Future for Counted<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        POLLS.fetch_add(1, Ordering::Relaxed);
        self.0.as_mut().poll(cx)
    }
}

/// This process's user and system CPU time (`/proc/self/stat`, in clock ticks of 10 ms).
fn cpu_time() -> Cpu {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start at its closing ')'.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let mut ticks = after
        .split_whitespace()
        .skip(11)
        .map(|field| Duration::from_millis(field.parse::<u64>().unwrap_or(0) * 10));
    let (idle, total) = machine_ticks();
    Cpu {
        user: ticks.next().unwrap_or_default(),
        system: ticks.next().unwrap_or_default(),
        idle,
        total,
    }
}

/// The whole machine's idle and total CPU time so far (`/proc/stat`'s `cpu` line, in clock
/// ticks: idle and iowait, and every field up to steal).
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .find_map(|line| line.strip_prefix("cpu "))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let idle = fields.get(3..5).map_or(0, |idle| idle.iter().sum());
    let total = fields.iter().take(8).sum();
    (idle, total)
}

/// The process's CPU time (every thread), in user and system mode: the system part is mostly
/// the kernel's TCP work for the loopback connections, the user part the client's code.
/// Beside it, the whole machine's idle and total ticks: the share of both cores no thread used
/// (the client, its connections and the 5 nodes share them), which a client that keeps the
/// nodes waiting on its own turns leaves higher than the floor.
#[derive(Clone, Copy)]
struct Cpu {
    user: Duration,
    system: Duration,
    idle: u64,
    total: u64,
}

impl Cpu {
    fn saturating_sub(self, earlier: Self) -> Self {
        Self {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            idle: self.idle.saturating_sub(earlier.idle),
            total: self.total.saturating_sub(earlier.total),
        }
    }

    /// The machine's idle share, in percent.
    fn idle_percent(self) -> f64 {
        100.0 * self.idle as f64 / self.total.max(1) as f64
    }
}
