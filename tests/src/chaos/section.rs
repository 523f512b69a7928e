//! The critical sections, written once for every adapter: a client takes its plan's steps one
//! after another until the run's end, timing each call against its bound and adding what happened
//! to its adapter's tally (see the workload module for what a section is).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_redis::Error;

use super::adapter::{Client, ClientLock, Lease};
use super::bounds::{Call, SLACK};
use super::counter::Counter;
use super::recorder::Window;
use super::workload::{Entry, Planner, Shared, Step};

/// Runs critical sections until the run's end; hands the client back for the checks after.
pub(crate) async fn run<C: Client>(
    mut client: C,
    index: usize,
    mut planner: Planner,
    shared: Arc<Shared>,
) -> C {
    while Instant::now() < shared.stop_at {
        let step = planner.next_step();
        match step.entry {
            Entry::WithLock => scoped(&mut client, index, &step, &shared).await,
            _ => plain(&mut client, index, &step, &shared).await,
        }
        C::sleep(step.think).await;
    }
    client
}

/// A section under `lock` / `try_lock`, with an optional extension, then release (or drop).
async fn plain<C: Client>(client: &mut C, index: usize, step: &Step, shared: &Shared) {
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
        Entry::TryLock => C::within(give_up, client.try_lock(resource, step.ttl)).await,
        _ => C::within(give_up, client.lock(resource, step.ttl)).await,
    };
    let took = started.elapsed();
    let result = match attempt {
        Some(result) => {
            shared
                .tally(C::KIND)
                .calls
                .record(index, call, took, bound, limit);
            result
        }
        None if give_up < limit => {
            // The future was dropped: the library releases in the background.
            shared.tally(C::KIND).cancelled += 1;
            return;
        }
        None => {
            shared.tally(C::KIND).calls.record_hang(index, call, limit);
            return;
        }
    };
    let mut lock = match result {
        Ok(lock) => lock,
        Err(err) => {
            shared.tally(C::KIND).error(call.name(), &err);
            return;
        }
    };
    let acquired_at = Instant::now();
    {
        let mut tally = shared.tally(C::KIND);
        tally.acquired += 1;
        tally.entry(step.entry);
    }
    let key = shared.counters[step.resource].as_str();
    let value = client.counter().get(key).await;
    C::sleep(step.work.0).await;
    if let Some(ttl) = step.extend {
        let bound = shared.bounds.bound(Call::Extend, ttl);
        let limit = shared.bounds.limit(Call::Extend, ttl);
        let started = Instant::now();
        let extended = C::within(limit, lock.extend(ttl)).await;
        let took = started.elapsed();
        let mut tally = shared.tally(C::KIND);
        match extended {
            Some(result) => {
                tally.calls.record(index, Call::Extend, took, bound, limit);
                match result {
                    Ok(()) => tally.extended += 1,
                    Err(err) => tally.error("extend", &err),
                }
            }
            None => tally.calls.record_hang(index, Call::Extend, limit),
        }
    }
    C::sleep(step.work.1).await;
    let (wrote, late) = if lock.valid_until() > Instant::now() + shared.write_guard {
        client.counter().set(key, value + 1).await;
        (true, Instant::now() > lock.valid_until())
    } else {
        (false, false)
    };
    let ended_at = Instant::now();
    shared.recorder.record(Window {
        client: index,
        resource: step.resource,
        how: step.entry.name(),
        acquired_at,
        valid_until: lock.valid_until(),
        ended_at,
    });
    {
        let mut tally = shared.tally(C::KIND);
        tally.section_end(step.resource, wrote);
        tally.late_writes += u64::from(late);
    }
    if step.drop_unreleased {
        drop(lock);
        shared.tally(C::KIND).dropped += 1;
        return;
    }
    let ttl = lock.ttl();
    let bound = shared.bounds.bound(Call::Release, ttl);
    let limit = shared.bounds.limit(Call::Release, ttl);
    let started = Instant::now();
    let released = C::within(limit, lock.release()).await;
    let took = started.elapsed();
    let mut tally = shared.tally(C::KIND);
    match released {
        Some(report) => {
            tally.calls.record(index, Call::Release, took, bound, limit);
            tally.release(&report);
        }
        None => tally.calls.record_hang(index, Call::Release, limit),
    }
}

/// A section under `with_lock`: the work watches the lease and writes only while it is valid.
async fn scoped<C: Client>(client: &mut C, index: usize, step: &Step, shared: &Shared) {
    let resource = shared.resources[step.resource].as_str();
    let lock_bound = shared.bounds.bound(Call::Lock, step.ttl);
    let lock_limit = shared.bounds.limit(Call::Lock, step.ttl);
    let release_bound = shared.bounds.bound(Call::Release, step.ttl);
    let release_limit = shared.bounds.limit(Call::Release, step.ttl);
    let work = ScopedWork {
        key: &shared.counters[step.resource],
        length: step.work.0 + step.work.1,
        guard: shared.write_guard,
    };
    let hard_limit = lock_limit + work.length + release_limit + SLACK;
    let mut end = None;
    let started = Instant::now();
    let outcome = C::within(
        hard_limit,
        client.with_lock(resource, step.ttl, work, &mut end),
    )
    .await;
    let returned = Instant::now();
    let mut tally = shared.tally(C::KIND);
    let Some(end) = end else {
        match outcome {
            Some(Err(err)) => {
                tally.calls.record(
                    index,
                    Call::Lock,
                    returned - started,
                    lock_bound,
                    lock_limit,
                );
                tally.error("with_lock", &err);
            }
            Some(Ok(())) => unreachable!("with_lock returned Ok without running its work"),
            None => tally.calls.record_hang(index, Call::Lock, hard_limit),
        }
        return;
    };
    shared.recorder.record(Window {
        client: index,
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
        index,
        Call::Lock,
        end.acquired_at - started,
        lock_bound,
        lock_limit,
    );
    match outcome {
        Some(result) => {
            tally.calls.record(
                index,
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
        None => tally.calls.record_hang(index, Call::Release, hard_limit),
    }
}

/// The work of a `with_lock` section: `GET` the counter, work for `length` unless the lock is
/// lost, and `SET` the counter to the value read plus one only if the lock is not lost and at
/// least `guard` of validity is left.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScopedWork<'a> {
    key: &'a str,
    length: Duration,
    guard: Duration,
}

/// What the work inside `with_lock` saw.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScopedEnd {
    acquired_at: Instant,
    valid_until: Instant,
    ended_at: Instant,
    wrote: bool,
    late: bool,
}

impl ScopedWork<'_> {
    /// Does the work under `lease`, with the counter server at `counter`. Each adapter calls
    /// this inside its `with_lock`.
    pub(crate) async fn run(self, lease: &impl Lease, counter: &mut impl Counter) -> ScopedEnd {
        let acquired_at = Instant::now();
        let value = counter.get(self.key).await;
        let lost = lease.lost_within(self.length).await;
        let valid = !lost && !lease.is_lost() && lease.valid_until() > Instant::now() + self.guard;
        let (wrote, late) = if valid {
            counter.set(self.key, value + 1).await;
            (true, Instant::now() > lease.valid_until())
        } else {
            (false, false)
        };
        ScopedEnd {
            acquired_at,
            valid_until: lease.valid_until(),
            ended_at: Instant::now(),
            wrote,
            late,
        }
    }
}
