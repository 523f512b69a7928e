//! Scenario (c), contention: 8 tasks (threads for the blocking adapter and its floor) share one
//! client and compete for ONE key, each with its library's default retry policy, for a fixed
//! time. A holder releases at once and competes again. Measures acquisitions per second, the
//! hand-over gap — from a holder starting its release to *another* task's lock call returning
//! the lock — and checks mutual exclusion with an "inside" counter.
//!
//! The raw floors have no retry policy: their tasks (threads) try again at once (a spin), which
//! is the fastest hand-over possible, not a sensible client.
//!
//! When the time is up, async tasks are cancelled wherever they are (a lock call in its retry
//! pause included); blocking threads cannot be, so they finish the lock call they are in (up to
//! the whole default policy: that tail is wall time, not measured). Only acquisitions and
//! give-ups inside the window count. It never asserts: violations are counted and reported.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Scenario, warm_up, warm_up_blocking};
use crate::clients::{AsyncClient, BlockingClient};
use crate::exec::Executor;
use crate::stats;

/// Scenario (c) with its sizes.
#[derive(Debug, Clone)]
pub(crate) struct Contention {
    /// The one key, unique to this run.
    pub(crate) key: String,
    /// Competing tasks (threads).
    pub(crate) tasks: usize,
    /// The measured window.
    pub(crate) duration: Duration,
    /// Unmeasured sequential cycles first (on another key).
    pub(crate) warmup: u32,
}

/// What one contention run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ContentionRun {
    /// Competing tasks (threads).
    pub(crate) tasks: usize,
    /// The window.
    pub(crate) seconds: f64,
    /// Locks acquired inside the window.
    pub(crate) acquisitions: u64,
    /// Of those, the ones won by another task than the last holder.
    pub(crate) handovers: u64,
    /// Lock calls that gave up (the library's retries ran out).
    pub(crate) gave_up: u64,
    /// Times a task acquired the lock while another one was inside: must be 0.
    pub(crate) violations: u64,
    /// Acquisitions per second.
    pub(crate) acquisitions_per_sec: f64,
    /// Median hand-over gap, µs (`None` without a hand-over).
    pub(crate) handover_p50_us: Option<f64>,
    /// 99th percentile of the hand-over gap, µs.
    pub(crate) handover_p99_us: Option<f64>,
}

/// What the competing tasks share: the exclusion check and the hand-over record.
struct Arena {
    deadline: Instant,
    inside: AtomicUsize,
    violations: AtomicU64,
    acquisitions: AtomicU64,
    gave_up: AtomicU64,
    /// Which task last started a release, and when.
    last_release: Mutex<Option<(usize, Instant)>>,
    gaps: Mutex<Vec<Duration>>,
}

impl Arena {
    fn new(deadline: Instant) -> Self {
        Self {
            deadline,
            inside: AtomicUsize::new(0),
            violations: AtomicU64::new(0),
            acquisitions: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
            last_release: Mutex::new(None),
            gaps: Mutex::new(Vec::new()),
        }
    }

    /// Task `me` just got the lock: check that nobody is inside, record the hand-over, and
    /// leave again, stamping the start of `me`'s release. Nothing in here awaits, so a
    /// cancelled task is never left inside.
    fn hold(&self, me: usize) {
        let now = Instant::now();
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        let mut last = self
            .last_release
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if now < self.deadline {
            self.acquisitions.fetch_add(1, Ordering::Relaxed);
            if let Some((previous, released_at)) = *last
                && previous != me
            {
                self.gaps
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(now.saturating_duration_since(released_at));
            }
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
        *last = Some((me, Instant::now()));
    }

    /// A lock call gave up; counted only inside the window.
    fn gave_up(&self) {
        if Instant::now() < self.deadline {
            self.gave_up.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn into_run(self, tasks: usize, window: Duration) -> ContentionRun {
        let mut gaps = self
            .gaps
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        gaps.sort_unstable();
        let acquisitions = self.acquisitions.into_inner();
        ContentionRun {
            tasks,
            seconds: window.as_secs_f64(),
            acquisitions,
            handovers: u64::try_from(gaps.len()).unwrap_or(u64::MAX),
            gave_up: self.gave_up.into_inner(),
            violations: self.violations.into_inner(),
            acquisitions_per_sec: stats::per_second(acquisitions, window),
            handover_p50_us: stats::percentile(&gaps, 50.0).map(stats::micros),
            handover_p99_us: stats::percentile(&gaps, 99.0).map(stats::micros),
        }
    }
}

impl Scenario for Contention {
    type Run = ContentionRun;

    fn run_async<E: Executor, C: AsyncClient>(&self, exec: &E, client: &C) -> ContentionRun {
        exec.block_on(warm_up(client, &format!("{}:warm", self.key), self.warmup));
        let deadline = Instant::now() + self.duration;
        let arena = Arc::new(Arena::new(deadline));
        let tasks = (0..self.tasks)
            .map(|me| {
                let (client, key, arena) = (client.clone(), self.key.clone(), arena.clone());
                async move {
                    loop {
                        match client.lock_key(&key).await {
                            Ok(held) => {
                                arena.hold(me);
                                client.unlock(held).await;
                            }
                            Err(_) => arena.gave_up(),
                        }
                    }
                }
            })
            .collect();
        exec.run_until(tasks, deadline);
        let arena = Arc::into_inner(arena).expect("every task is gone after run_until");
        arena.into_run(self.tasks, self.duration)
    }

    fn run_blocking<C: BlockingClient>(&self, client: &C) -> ContentionRun {
        warm_up_blocking(client, &format!("{}:warm", self.key), self.warmup);
        let deadline = Instant::now() + self.duration;
        let arena = Arena::new(deadline);
        std::thread::scope(|scope| {
            for me in 0..self.tasks {
                let arena = &arena;
                scope.spawn(move || {
                    while Instant::now() < deadline {
                        match client.lock_key(&self.key) {
                            Ok(held) => {
                                arena.hold(me);
                                client.unlock(held);
                            }
                            Err(_) => arena.gave_up(),
                        }
                    }
                });
            }
        });
        arena.into_run(self.tasks, self.duration)
    }
}

/// Contended runs are not costed: a waiter's retries are part of what each library chooses.
impl crate::server_cpu::ServerCost for ContentionRun {
    fn record_server_cpu(&mut self, _seconds: f64, _warmup: u32) {}
}
