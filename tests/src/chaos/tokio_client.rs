//! The `redlock-tokio` executor of the workload: one client, as a task on a shared multi-thread
//! runtime, with its own `Redlock` (its own connections, through its own proxies) and its own
//! connection to the counter server.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use redis::aio::MultiplexedConnection;
use redlock_redis::Error;
use redlock_tokio::Redlock;
use tokio::time::timeout;

use super::bounds::{Call, SLACK};
use super::config::ChaosConfig;
use super::recorder::Window;
use super::workload::{Entry, Planner, Shared, Step};

/// A `redlock-tokio` client for the nodes at `urls`, with the run's settings.
pub(crate) fn build(urls: &[String], config: &ChaosConfig) -> Result<Redlock, Error> {
    Redlock::builder(urls)
        .config(|c| c.key_prefix(config.key_prefix.clone()).retry(config.retry))
        .io_timeout(config.io_timeout)
        .build()
}

/// One client of the run.
pub(crate) struct TokioClient {
    index: usize,
    redlock: Redlock,
    counter: MultiplexedConnection,
    planner: Planner,
}

/// What the work inside `with_lock` saw, handed out even when `with_lock` returns `Lost`.
#[derive(Debug, Clone, Copy)]
struct ScopedEnd {
    acquired_at: Instant,
    valid_until: Instant,
    ended_at: Instant,
    wrote: bool,
    late: bool,
}

impl TokioClient {
    pub(crate) fn new(
        index: usize,
        redlock: Redlock,
        counter: MultiplexedConnection,
        planner: Planner,
    ) -> Self {
        Self {
            index,
            redlock,
            counter,
            planner,
        }
    }

    /// Runs critical sections until the run's end; hands the client back for the checks after.
    pub(crate) async fn run(mut self, shared: Arc<Shared>) -> Redlock {
        while Instant::now() < shared.stop_at {
            let step = self.planner.next_step();
            match step.entry {
                Entry::WithLock => self.scoped(&step, &shared).await,
                _ => self.plain(&step, &shared).await,
            }
            tokio::time::sleep(step.think).await;
        }
        self.redlock
    }

    /// A section under `lock` / `try_lock`, with an optional extension, then release (or drop).
    async fn plain(&mut self, step: &Step, shared: &Shared) {
        let resource = shared.resources[step.resource].as_str();
        let call = match step.entry {
            Entry::TryLock => Call::TryLock,
            _ => Call::Lock,
        };
        let bound = shared.bounds.bound(call, step.ttl);
        let limit = shared.bounds.limit(call, step.ttl);
        let give_up = match step.entry {
            Entry::Cancellable(after) => after.min(limit),
            _ => limit,
        };
        let started = Instant::now();
        let attempt = match step.entry {
            Entry::TryLock => timeout(give_up, self.redlock.try_lock(resource, step.ttl)).await,
            _ => timeout(give_up, self.redlock.lock(resource, step.ttl)).await,
        };
        let took = started.elapsed();
        let result = match attempt {
            Ok(result) => {
                shared
                    .tally()
                    .calls
                    .record(self.index, call, took, bound, limit);
                result
            }
            Err(_elapsed) if give_up < limit => {
                // The future was dropped: the library releases in the background.
                shared.tally().cancelled += 1;
                return;
            }
            Err(_elapsed) => {
                shared.tally().calls.record_hang(self.index, call, limit);
                return;
            }
        };
        let mut lock = match result {
            Ok(lock) => lock,
            Err(err) => {
                shared.tally().error(call.name(), &err);
                return;
            }
        };
        let acquired_at = Instant::now();
        {
            let mut tally = shared.tally();
            tally.acquired += 1;
            tally.entry(step.entry);
        }
        let key = shared.counters[step.resource].as_str();
        let value = read_counter(&mut self.counter, key).await;
        tokio::time::sleep(step.work.0).await;
        if let Some(ttl) = step.extend {
            let bound = shared.bounds.bound(Call::Extend, ttl);
            let limit = shared.bounds.limit(Call::Extend, ttl);
            let started = Instant::now();
            let extended = timeout(limit, lock.extend(ttl)).await;
            let took = started.elapsed();
            let mut tally = shared.tally();
            match extended {
                Ok(result) => {
                    tally
                        .calls
                        .record(self.index, Call::Extend, took, bound, limit);
                    match result {
                        Ok(()) => tally.extended += 1,
                        Err(err) => tally.error("extend", &err),
                    }
                }
                Err(_elapsed) => tally.calls.record_hang(self.index, Call::Extend, limit),
            }
        }
        tokio::time::sleep(step.work.1).await;
        let (wrote, late) = if lock.valid_until() > Instant::now() + shared.write_guard {
            write_counter(&mut self.counter, key, value + 1).await;
            (true, Instant::now() > lock.valid_until())
        } else {
            (false, false)
        };
        let ended_at = Instant::now();
        shared.recorder.record(Window {
            client: self.index,
            resource: step.resource,
            how: step.entry.name(),
            acquired_at,
            valid_until: lock.valid_until(),
            ended_at,
        });
        {
            let mut tally = shared.tally();
            tally.section_end(step.resource, wrote);
            tally.late_writes += u64::from(late);
        }
        if step.drop_unreleased {
            drop(lock);
            shared.tally().dropped += 1;
            return;
        }
        let ttl = lock.lease().ttl();
        let bound = shared.bounds.bound(Call::Release, ttl);
        let limit = shared.bounds.limit(Call::Release, ttl);
        let started = Instant::now();
        let released = timeout(limit, lock.release()).await;
        let took = started.elapsed();
        let mut tally = shared.tally();
        match released {
            Ok(report) => {
                tally
                    .calls
                    .record(self.index, Call::Release, took, bound, limit);
                tally.release(&report);
            }
            Err(_elapsed) => tally.calls.record_hang(self.index, Call::Release, limit),
        }
    }

    /// A section under `with_lock`: the work watches the lease and writes only while it is valid.
    async fn scoped(&mut self, step: &Step, shared: &Shared) {
        let resource = shared.resources[step.resource].as_str();
        let work = step.work.0 + step.work.1;
        let guard = shared.write_guard;
        let lock_bound = shared.bounds.bound(Call::Lock, step.ttl);
        let lock_limit = shared.bounds.limit(Call::Lock, step.ttl);
        let release_bound = shared.bounds.bound(Call::Release, step.ttl);
        let release_limit = shared.bounds.limit(Call::Release, step.ttl);
        let slot: Arc<Mutex<Option<ScopedEnd>>> = Arc::default();
        let record = Arc::clone(&slot);
        let mut counter = self.counter.clone();
        let key = shared.counters[step.resource].clone();
        let started = Instant::now();
        let scoped = self
            .redlock
            .with_lock(resource, step.ttl, |lease| async move {
                let acquired_at = Instant::now();
                let value = read_counter(&mut counter, &key).await;
                let lost = tokio::select! {
                    () = lease.lost() => true,
                    () = tokio::time::sleep(work) => false,
                };
                let valid =
                    !lost && !lease.is_lost() && lease.valid_until() > Instant::now() + guard;
                let (wrote, late) = if valid {
                    write_counter(&mut counter, &key, value + 1).await;
                    (true, Instant::now() > lease.valid_until())
                } else {
                    (false, false)
                };
                let end = ScopedEnd {
                    acquired_at,
                    valid_until: lease.valid_until(),
                    ended_at: Instant::now(),
                    wrote,
                    late,
                };
                *record.lock().unwrap_or_else(PoisonError::into_inner) = Some(end);
            });
        let hard_limit = lock_limit + work + release_limit + SLACK;
        let outcome = timeout(hard_limit, scoped).await;
        let returned = Instant::now();
        let end = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
        let mut tally = shared.tally();
        let Some(end) = end else {
            match outcome {
                Ok(Err(err)) => {
                    tally.calls.record(
                        self.index,
                        Call::Lock,
                        returned - started,
                        lock_bound,
                        lock_limit,
                    );
                    tally.error("with_lock", &err);
                }
                Ok(Ok(())) => unreachable!("with_lock returned Ok without running its work"),
                Err(_elapsed) => tally.calls.record_hang(self.index, Call::Lock, hard_limit),
            }
            return;
        };
        shared.recorder.record(Window {
            client: self.index,
            resource: step.resource,
            how: step.entry.name(),
            acquired_at: end.acquired_at,
            valid_until: end.valid_until,
            ended_at: end.ended_at,
        });
        tally.acquired += 1;
        tally.entry(step.entry);
        tally.section_end(step.resource, end.wrote);
        tally.late_writes += u64::from(end.late);
        tally.calls.record(
            self.index,
            Call::Lock,
            end.acquired_at - started,
            lock_bound,
            lock_limit,
        );
        match outcome {
            Ok(result) => {
                tally.calls.record(
                    self.index,
                    Call::Release,
                    returned - end.ended_at,
                    release_bound,
                    release_limit,
                );
                match result {
                    Ok(()) => {}
                    Err(Error::Lost(_)) => tally.lost += 1,
                    Err(err) => tally.error("with_lock", &err),
                }
            }
            Err(_elapsed) => tally
                .calls
                .record_hang(self.index, Call::Release, hard_limit),
        }
    }
}

async fn read_counter(counter: &mut MultiplexedConnection, key: &str) -> i64 {
    let value: Option<i64> = redis::cmd("GET")
        .arg(key)
        .query_async(counter)
        .await
        .unwrap_or_else(|err| panic!("GET {key} on the (fault-free) counter server: {err}"));
    value.unwrap_or(0)
}

async fn write_counter(counter: &mut MultiplexedConnection, key: &str, value: i64) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(counter)
        .await
        .unwrap_or_else(|err| panic!("SET {key} on the (fault-free) counter server: {err}"));
}
