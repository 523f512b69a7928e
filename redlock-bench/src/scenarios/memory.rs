//! Scenario (d), memory: `redlock-tokio` on a multi-thread runtime, 64 tasks on their own keys,
//! for many lock+release cycles. Reads the process's RSS and live heap after the warm-up, after
//! the first 10k cycles and after all of them, and counts heap allocations per cycle.
//!
//! It runs in a child process of its own ([`measure`] starts this binary again with
//! `--memory-probe`, which lands in [`probe`]), so that the RSS is that of a process which did
//! nothing else — not of one that ran five other contenders first. It is a leak check, not a
//! timing: it runs once, not per repetition.

use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::warm_up;
use crate::args::{Args, Plan, THROUGHPUT_TASKS};
use crate::clients::AsyncClient;
use crate::exec::{Executor, TokioExec};
use crate::memory::{self, HeapDelta};
use crate::stats;

/// What the memory scenario measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MemoryRun {
    /// Concurrent tasks.
    pub(crate) tasks: usize,
    /// Cycles before the first reading.
    pub(crate) first_cycles: u64,
    /// Cycles before the last reading.
    pub(crate) total_cycles: u64,
    /// RSS after the warm-up, KiB.
    pub(crate) rss_start_kib: Option<u64>,
    /// RSS after `first_cycles`, KiB.
    pub(crate) rss_first_kib: Option<u64>,
    /// RSS after `total_cycles`, KiB.
    pub(crate) rss_total_kib: Option<u64>,
    /// Growth of the live heap from the warm-up to `first_cycles`, bytes.
    pub(crate) heap_growth_first_bytes: i64,
    /// Growth of the live heap from the warm-up to `total_cycles`, bytes.
    pub(crate) heap_growth_total_bytes: i64,
    /// Heap allocations (and reallocations) per cycle, over all cycles.
    pub(crate) allocs_per_cycle: f64,
    /// Heap bytes requested per cycle, over all cycles.
    pub(crate) bytes_per_cycle: f64,
    /// Lock calls that failed (none expected).
    pub(crate) failures: u64,
    /// How long the cycles took.
    pub(crate) seconds: f64,
    /// Cycles per second.
    pub(crate) cycles_per_sec: f64,
}

/// Runs the memory scenario in a child process against the nodes at `urls`.
pub(crate) fn measure(plan: &Plan, urls: &[String]) -> Result<MemoryRun, String> {
    let exe = std::env::current_exe().map_err(|err| format!("cannot find this binary: {err}"))?;
    let mut command = Command::new(exe);
    command.arg("--memory-probe");
    for url in urls {
        command.arg("--node").arg(url);
    }
    if plan.smoke {
        command.arg("--smoke");
    } else {
        command.arg(format!("--memory-cycles={}", plan.memory_total));
    }
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("cannot start the memory probe: {err}"))?;
    if !output.status.success() {
        return Err(format!("the memory probe failed ({})", output.status));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|err| format!("the memory probe printed no report: {err}"))
}

/// The child side: runs the scenario in this process and prints its JSON on stdout.
pub(crate) fn probe(args: &Args) -> Result<ExitCode, String> {
    if args.nodes.is_empty() {
        return Err(
            "--memory-probe is internal: it needs the --node URLs of a running bench".into(),
        );
    }
    let plan = Plan::from_args(args);
    let exec = TokioExec::multi_thread();
    let client = redlock_tokio::Redlock::new(&args.nodes).map_err(|err| err.to_string())?;
    exec.block_on(warm_up(&client, "mem:warm", plan.warmup));

    let (rss_start, heap_start) = (memory::rss_bytes(), memory::heap());
    let start = Instant::now();
    let mut failures = cycles(&exec, &client, plan.memory_first);
    let (rss_first, heap_first) = (memory::rss_bytes(), memory::heap());
    failures += cycles(&exec, &client, plan.memory_total - plan.memory_first);
    let (rss_total, heap_total) = (memory::rss_bytes(), memory::heap());
    let elapsed = start.elapsed();

    let all: HeapDelta = heap_start.until(heap_total);
    let per_cycle = |n: u64| n as f64 / plan.memory_total.max(1) as f64;
    let run = MemoryRun {
        tasks: THROUGHPUT_TASKS,
        first_cycles: plan.memory_first,
        total_cycles: plan.memory_total,
        rss_start_kib: rss_start.map(|b| b / 1024),
        rss_first_kib: rss_first.map(|b| b / 1024),
        rss_total_kib: rss_total.map(|b| b / 1024),
        heap_growth_first_bytes: heap_start.until(heap_first).live_bytes,
        heap_growth_total_bytes: all.live_bytes,
        allocs_per_cycle: per_cycle(all.allocations + all.reallocations),
        bytes_per_cycle: per_cycle(all.bytes_allocated),
        failures,
        seconds: elapsed.as_secs_f64(),
        cycles_per_sec: stats::per_second(plan.memory_total, elapsed),
    };
    let json = serde_json::to_string(&run).map_err(|err| err.to_string())?;
    println!("{json}");
    Ok(ExitCode::SUCCESS)
}

/// `count` lock+release cycles spread over [`THROUGHPUT_TASKS`] tasks on their own keys;
/// returns how many lock calls failed.
fn cycles<E: Executor, C: AsyncClient>(exec: &E, client: &C, count: u64) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let tasks = (0..THROUGHPUT_TASKS)
        .map(|task| {
            let (client, next, key) = (client.clone(), next.clone(), format!("mem:{task}"));
            async move {
                let mut failures = 0;
                while next.fetch_add(1, Ordering::Relaxed) < count {
                    match client.lock_key(&key).await {
                        Ok(held) => client.unlock(held).await,
                        Err(_) => failures += 1,
                    }
                }
                failures
            }
        })
        .collect();
    exec.join_tasks(tasks).into_iter().sum()
}
