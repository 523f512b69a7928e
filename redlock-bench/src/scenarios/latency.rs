//! Scenario (a), sequential latency: one client, one task (one thread for the blocking
//! adapter and its floor), lock+release cycles on one key one after the other. Measures the acquire alone
//! and the whole cycle of every cycle, and the heap allocations per cycle of the whole process.
//!
//! Nobody else uses the key, so every acquisition wins its first round: this is the cost of
//! the happy path, never of retries.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Scenario, warm_up, warm_up_blocking};
use crate::client_cpu;
use crate::clients::{AsyncClient, BlockingClient};
use crate::exec::Executor;
use crate::memory::{self, HeapDelta};
use crate::stats::{self, CURVE};

/// Scenario (a) with its sizes.
#[derive(Debug, Clone)]
pub(crate) struct Latency {
    /// The key, unique to this run.
    pub(crate) key: String,
    /// Unmeasured cycles first.
    pub(crate) warmup: u32,
    /// Measured cycles.
    pub(crate) cycles: u32,
}

/// What one latency run measured (times in µs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LatencyRun {
    /// Measured cycles.
    pub(crate) cycles: u32,
    /// Median lock+release cycle.
    pub(crate) cycle_p50_us: f64,
    /// 99th percentile of the cycle.
    pub(crate) cycle_p99_us: f64,
    /// Median acquire (lock call until it returned the lock).
    pub(crate) acquire_p50_us: f64,
    /// 99th percentile of the acquire.
    pub(crate) acquire_p99_us: f64,
    /// Heap allocations of the whole process per cycle.
    pub(crate) allocs_per_cycle: f64,
    /// Heap bytes requested per cycle.
    pub(crate) bytes_per_cycle: f64,
    /// The cycle at each percentile of [`CURVE`], for the chart.
    pub(crate) curve_us: Vec<f64>,
    /// The servers' CPU per cycle, warm-up cycles included (`None`: not read).
    #[serde(default)]
    pub(crate) server_cpu_us_per_cycle: Option<f64>,
    /// The bench process's CPU (every thread) per measured cycle (`None`: not read).
    #[serde(default)]
    pub(crate) client_cpu_us_per_cycle: Option<f64>,
}

impl crate::server_cpu::ServerCost for LatencyRun {
    fn record_server_cpu(&mut self, seconds: f64, warmup: u32) {
        self.server_cpu_us_per_cycle =
            crate::server_cpu::per_cycle_us(seconds, u64::from(self.cycles), warmup);
    }
}

/// Per-cycle times, preallocated so that recording them allocates nothing.
struct Samples {
    acquire: Vec<Duration>,
    cycle: Vec<Duration>,
}

impl Samples {
    fn with_capacity(cycles: u32) -> Self {
        let cycles = usize::try_from(cycles).unwrap_or(usize::MAX);
        Self {
            acquire: Vec::with_capacity(cycles),
            cycle: Vec::with_capacity(cycles),
        }
    }

    fn record(&mut self, acquire: Duration, cycle: Duration) {
        self.acquire.push(acquire);
        self.cycle.push(cycle);
    }

    fn into_run(mut self, heap: HeapDelta, cpu_before: Option<Duration>) -> LatencyRun {
        self.acquire.sort_unstable();
        self.cycle.sort_unstable();
        let at = |sorted: &[Duration], p: f64| {
            stats::percentile(sorted, p).map_or(f64::NAN, stats::micros)
        };
        let cycles = u32::try_from(self.cycle.len()).unwrap_or(u32::MAX);
        let per_cycle = |total: u64| total as f64 / f64::from(cycles.max(1));
        LatencyRun {
            cycles,
            cycle_p50_us: at(&self.cycle, 50.0),
            cycle_p99_us: at(&self.cycle, 99.0),
            acquire_p50_us: at(&self.acquire, 50.0),
            acquire_p99_us: at(&self.acquire, 99.0),
            allocs_per_cycle: per_cycle(heap.allocations + heap.reallocations),
            bytes_per_cycle: per_cycle(heap.bytes_allocated),
            curve_us: CURVE.iter().map(|p| at(&self.cycle, *p)).collect(),
            server_cpu_us_per_cycle: None,
            client_cpu_us_per_cycle: client_cpu::per_cycle_us(cpu_before, cycles),
        }
    }
}

impl Scenario for Latency {
    type Run = LatencyRun;

    fn run_async<E: Executor, C: AsyncClient>(&self, exec: &E, client: &C) -> LatencyRun {
        let (client, this) = (client.clone(), self.clone());
        let task = async move {
            warm_up(&client, &this.key, this.warmup).await;
            let mut samples = Samples::with_capacity(this.cycles);
            let before = memory::heap();
            let cpu = client_cpu::now();
            for _ in 0..this.cycles {
                let start = Instant::now();
                let held = client
                    .lock_key(&this.key)
                    .await
                    .unwrap_or_else(|why| panic!("uncontended lock failed: {why}"));
                let acquired = start.elapsed();
                client.unlock(held).await;
                samples.record(acquired, start.elapsed());
            }
            samples.into_run(before.until(memory::heap()), cpu)
        };
        exec.join_tasks(vec![task])
            .pop()
            .expect("one task, one result")
    }

    fn run_blocking<C: BlockingClient>(&self, client: &C) -> LatencyRun {
        warm_up_blocking(client, &self.key, self.warmup);
        let mut samples = Samples::with_capacity(self.cycles);
        let before = memory::heap();
        let cpu = client_cpu::now();
        for _ in 0..self.cycles {
            let start = Instant::now();
            let held = client
                .lock_key(&self.key)
                .unwrap_or_else(|why| panic!("uncontended lock failed: {why}"));
            let acquired = start.elapsed();
            client.unlock(held);
            samples.record(acquired, start.elapsed());
        }
        samples.into_run(before.until(memory::heap()), cpu)
    }
}
