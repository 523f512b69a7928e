//! Scenario (b), throughput: 64 tasks (threads for the blocking adapter and its floor) share one
//! client, each locking and releasing a key of its own in a loop for a fixed time. Measures completed
//! cycles per second.
//!
//! No key is contended, so no acquisition waits for another: this is the client's own cost
//! under load (connections, driver, engine), never hand-over. A task finishes the cycle it is
//! in when the time is up; those last cycles count, over the time they really took.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Scenario, warm_up, warm_up_blocking};
use crate::clients::{AsyncClient, BlockingClient};
use crate::exec::Executor;
use crate::stats;

/// Scenario (b) with its sizes.
#[derive(Debug, Clone)]
pub(crate) struct Throughput {
    /// Prefix of the keys, unique to this run; task `i` locks `{prefix}:{i}`.
    pub(crate) prefix: String,
    /// Concurrent tasks (threads).
    pub(crate) tasks: usize,
    /// How long the tasks start new cycles.
    pub(crate) duration: Duration,
    /// Unmeasured sequential cycles first.
    pub(crate) warmup: u32,
}

/// What one throughput run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ThroughputRun {
    /// Concurrent tasks (threads).
    pub(crate) tasks: usize,
    /// From the start until the last task finished.
    pub(crate) seconds: f64,
    /// Completed lock+release cycles.
    pub(crate) cycles: u64,
    /// Lock calls that returned an error (none expected: no key is contended).
    pub(crate) failures: u64,
    /// Completed cycles per second.
    pub(crate) cycles_per_sec: f64,
    /// The servers' CPU per completed cycle, warm-up and failed locks included (`None`: not
    /// read).
    #[serde(default)]
    pub(crate) server_cpu_us_per_cycle: Option<f64>,
}

impl crate::server_cpu::ServerCost for ThroughputRun {
    fn record_server_cpu(&mut self, seconds: f64, warmup: u32) {
        self.server_cpu_us_per_cycle =
            crate::server_cpu::per_cycle_us(seconds, self.cycles, warmup);
    }
}

impl ThroughputRun {
    fn new(tasks: usize, elapsed: Duration, counts: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let (cycles, failures) = counts
            .into_iter()
            .fold((0, 0), |(c, f), (dc, df)| (c + dc, f + df));
        Self {
            tasks,
            seconds: elapsed.as_secs_f64(),
            cycles,
            failures,
            cycles_per_sec: stats::per_second(cycles, elapsed),
            server_cpu_us_per_cycle: None,
        }
    }
}

impl Scenario for Throughput {
    type Run = ThroughputRun;

    fn run_async<E: Executor, C: AsyncClient>(&self, exec: &E, client: &C) -> ThroughputRun {
        exec.block_on(warm_up(
            client,
            &format!("{}:warm", self.prefix),
            self.warmup,
        ));
        let start = Instant::now();
        let deadline = start + self.duration;
        let tasks = (0..self.tasks)
            .map(|task| {
                let (client, key) = (client.clone(), format!("{}:{task}", self.prefix));
                async move {
                    let (mut cycles, mut failures) = (0, 0);
                    while Instant::now() < deadline {
                        match client.lock_key(&key).await {
                            Ok(held) => {
                                client.unlock(held).await;
                                cycles += 1;
                            }
                            Err(_) => failures += 1,
                        }
                    }
                    (cycles, failures)
                }
            })
            .collect();
        let counts = exec.join_tasks(tasks);
        ThroughputRun::new(self.tasks, start.elapsed(), counts)
    }

    fn run_blocking<C: BlockingClient>(&self, client: &C) -> ThroughputRun {
        warm_up_blocking(client, &format!("{}:warm", self.prefix), self.warmup);
        let start = Instant::now();
        let deadline = start + self.duration;
        let counts: Vec<(u64, u64)> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..self.tasks)
                .map(|task| {
                    let key = format!("{}:{task}", self.prefix);
                    scope.spawn(move || {
                        let (mut cycles, mut failures) = (0, 0);
                        while Instant::now() < deadline {
                            match client.lock_key(&key) {
                                Ok(held) => {
                                    client.unlock(held);
                                    cycles += 1;
                                }
                                Err(_) => failures += 1,
                            }
                        }
                        (cycles, failures)
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|thread| thread.join().expect("a throughput thread panicked"))
                .collect()
        });
        ThroughputRun::new(self.tasks, start.elapsed(), counts)
    }
}
