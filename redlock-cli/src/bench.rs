//! `redlock bench`: lock latency, throughput and hand-over under contention against the
//! configured nodes (or local ones it starts), with progress bars and a latency histogram.
//!
//! Absolute numbers depend on the machine and the network; the reference printed beside them
//! is the PING round trip to the nodes measured in the same run (a lock+release cycle needs at
//! least two round trips). Never a pass/fail verdict: it measures.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use redlock_blocking::{Redlock, RetryPolicy};
use serde_json::json;

use crate::cli::Global;
use crate::histogram::{Histogram, micros};
use crate::output::Out;
use crate::probe::{self, Probe};
use crate::{Failure, UNAVAILABLE, USAGE};

/// `redlock bench` options.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Start this many local redis-servers for the run (and stop them after) instead of using
    /// --node / REDLOCK_NODES.
    #[arg(long, value_name = "NODES", value_parser = clap::value_parser!(u8).range(1..=15))]
    pub(crate) local: Option<u8>,
    /// Sequential lock+release cycles for the latency scenario.
    #[arg(long, default_value = "2000", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub(crate) cycles: u32,
    /// Threads locking their own keys in the throughput scenario.
    #[arg(long, default_value = "64", value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub(crate) clients: u16,
    /// Threads competing for one key in the contention scenario.
    #[arg(long, default_value = "8", value_parser = clap::value_parser!(u16).range(2..=4096))]
    pub(crate) contenders: u16,
    /// How long the throughput and contention scenarios each run.
    #[arg(long, default_value = "3s", value_parser = crate::duration::parse)]
    pub(crate) duration: Duration,
}

/// TTL of the bench's locks: long enough never to expire mid-cycle on a loaded machine.
const TTL: Duration = Duration::from_secs(10);

/// Runs the three scenarios and prints what they measured.
pub(crate) fn bench(global: &Global, args: &BenchArgs) -> Result<std::process::ExitCode, Failure> {
    let out = Out::new(global);
    let local = match args.local {
        Some(count) => Some(
            redlock_local::Servers::try_start_with(
                usize::from(count),
                &redlock_local::ServerOptions::new(),
            )
            .map_err(|err| {
                (
                    UNAVAILABLE,
                    format!("cannot start local redis-servers: {err}"),
                )
            })?,
        ),
        None => None,
    };
    let urls = match &local {
        Some(servers) => servers.urls(),
        None if global.nodes.is_empty() => {
            return Err((
                USAGE,
                "no nodes: give --node URL / REDLOCK_NODES, or --local 5 to start local ones"
                    .to_owned(),
            ));
        }
        None => global.nodes.clone(),
    };
    let global = Global {
        nodes: urls,
        ..global.clone()
    };
    let floor = ping_floor(&global)?;
    let prefix = format!("{}bench:{}:", global.prefix, std::process::id());
    let client = |retry: RetryPolicy| {
        crate::clusters(Redlock::builder(&global.nodes), &global)?
            .key_prefix(prefix.as_bytes())
            .config(|c| c.max_ttl(global.max_ttl))
            .retry(retry)
            .build()
            .map_err(|err| (USAGE, err.to_string()))
    };
    let show = !global.quiet && !out.json();

    let sequential = sequential(&client(RetryPolicy::once())?, args.cycles, show)?;
    let throughput = throughput(&client(RetryPolicy::once())?, args, show)?;
    let contention = contention(&client(RetryPolicy::default().unlimited())?, args, show);

    let nodes = global.nodes.len();
    out.report(
        || {
            let mut text = format!(
                "redlock bench: {nodes} node(s); PING round trip (slowest node, median) {}\n\n",
                micros(floor)
            );
            text += &format!(
                "sequential, {} cycles:\n  acquire p50 {}  p99 {}\n  cycle   p50 {}  p99 {}  \
                 ({:.2}× two PING round trips)\n",
                sequential.cycle.len(),
                micros(sequential.acquire.quantile(0.5)),
                micros(sequential.acquire.quantile(0.99)),
                micros(sequential.cycle.quantile(0.5)),
                micros(sequential.cycle.quantile(0.99)),
                sequential.cycle.quantile(0.5) as f64 / (2 * floor.max(1)) as f64,
            );
            text += &sequential.cycle.render(true);
            text += &format!(
                "\nthroughput, {} threads on their own keys: {:.0} cycles/s ({} cycles, {} failed)\n",
                args.clients, throughput.per_second, throughput.cycles, throughput.failed
            );
            text += &format!(
                "\ncontention, {} threads on one key (default retry policy): {:.1} acquisitions/s\n  \
                 release → next holder p50 {}  p99 {}\n  mutual exclusion: {} violation(s)\n",
                args.contenders,
                contention.per_second,
                micros(contention.handover.quantile(0.5)),
                micros(contention.handover.quantile(0.99)),
                contention.violations,
            );
            text
        },
        || {
            json!({
                "nodes": nodes,
                "ping_us": floor,
                "sequential": {
                    "cycles": sequential.cycle.len(),
                    "acquire_p50_us": sequential.acquire.quantile(0.5),
                    "acquire_p99_us": sequential.acquire.quantile(0.99),
                    "cycle_p50_us": sequential.cycle.quantile(0.5),
                    "cycle_p99_us": sequential.cycle.quantile(0.99),
                },
                "throughput": {
                    "clients": args.clients,
                    "cycles_per_second": throughput.per_second,
                    "cycles": throughput.cycles,
                    "failed": throughput.failed,
                },
                "contention": {
                    "contenders": args.contenders,
                    "acquisitions_per_second": contention.per_second,
                    "handover_p50_us": contention.handover.quantile(0.5),
                    "handover_p99_us": contention.handover.quantile(0.99),
                    "violations": contention.violations,
                },
            })
        },
    );
    drop(local);
    if contention.violations > 0 {
        return Err((
            crate::LOST,
            format!(
                "{} mutual-exclusion violation(s) under contention",
                contention.violations
            ),
        ));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The slowest node's median PING round trip, in µs.
fn ping_floor(global: &Global) -> Result<u64, Failure> {
    let mut slowest = Duration::ZERO;
    for node in probe::nodes(global)? {
        let latency = Probe::connect(&node)
            .and_then(|mut probe| probe.latency(&node, 101))
            .map_err(|why| (UNAVAILABLE, format!("{node}: {why}")))?;
        slowest = slowest.max(latency);
    }
    Ok(u64::try_from(slowest.as_micros()).unwrap_or(u64::MAX))
}

fn bar(show: bool, len: u64, what: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg:<28} [{bar:30}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

struct Sequential {
    acquire: Histogram,
    cycle: Histogram,
}

fn sequential(redlock: &Redlock, cycles: u32, show: bool) -> Result<Sequential, Failure> {
    let progress = bar(show, u64::from(cycles), "sequential lock+release");
    let mut result = Sequential {
        acquire: Histogram::default(),
        cycle: Histogram::default(),
    };
    for _ in 0..cycles {
        let started = Instant::now();
        let lock = redlock
            .lock("seq", TTL)
            .map_err(|err| (UNAVAILABLE, format!("sequential scenario: {err}")))?;
        result.acquire.record(started.elapsed());
        let _ = lock.release();
        result.cycle.record(started.elapsed());
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok(result)
}

struct Throughput {
    cycles: u64,
    failed: u64,
    per_second: f64,
}

fn throughput(redlock: &Redlock, args: &BenchArgs, show: bool) -> Result<Throughput, Failure> {
    let seconds = args.duration.as_secs().max(1);
    let progress = bar(show, seconds, "throughput (seconds)");
    let (done, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + args.duration;
    std::thread::scope(|scope| {
        for client in 0..args.clients {
            let (redlock, done, failed) = (redlock.clone(), &done, &failed);
            scope.spawn(move || {
                let resource = format!("own:{client}");
                while Instant::now() < deadline {
                    match redlock.lock(resource.as_bytes(), TTL) {
                        Ok(lock) => {
                            let _ = lock.release();
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            progress.set_position(started.elapsed().as_secs().min(seconds));
        }
    });
    progress.finish_and_clear();
    let cycles = done.into_inner();
    Ok(Throughput {
        cycles,
        failed: failed.into_inner(),
        per_second: cycles as f64 / started.elapsed().as_secs_f64(),
    })
}

struct Contention {
    per_second: f64,
    handover: Histogram,
    violations: usize,
}

/// `contenders` threads take one lock in turn; each measures the gap from the previous
/// holder's release (by another thread) to its own acquisition, and counts overlaps.
fn contention(redlock: &Redlock, args: &BenchArgs, show: bool) -> Contention {
    let seconds = args.duration.as_secs().max(1);
    let progress = bar(show, seconds, "contention (seconds)");
    let inside = AtomicUsize::new(0);
    let violations = AtomicUsize::new(0);
    let acquisitions = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    // Who released last, and when.
    let released: Mutex<Option<(u16, Instant)>> = Mutex::new(None);
    let handover = Mutex::new(Histogram::default());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for me in 0..args.contenders {
            let redlock = redlock.clone();
            let (inside, violations, acquisitions, stop, released, handover) = (
                &inside,
                &violations,
                &acquisitions,
                &stop,
                &released,
                &handover,
            );
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(lock) = redlock.lock("contended", TTL) else {
                        continue;
                    };
                    let now = Instant::now();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    let previous = *released.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some((who, at)) = previous
                        && who != me
                    {
                        handover
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .record(now.saturating_duration_since(at));
                    }
                    acquisitions.fetch_add(1, Ordering::Relaxed);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    *released.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some((me, Instant::now()));
                    let _ = lock.release();
                }
            });
        }
        while started.elapsed() < args.duration {
            std::thread::sleep(Duration::from_millis(100));
            progress.set_position(started.elapsed().as_secs().min(seconds));
        }
        stop.store(true, Ordering::Relaxed);
    });
    progress.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    Contention {
        per_second: acquisitions.into_inner() as f64 / elapsed,
        handover: handover
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner),
        violations: violations.into_inner(),
    }
}
