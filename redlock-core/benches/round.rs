//! What one lock round costs in the engine alone, from machine creation to `Done`: a full N = 5
//! acquisition (5 sends, 5 `OK` replies) and a full release (5 sends, 5 replies), against a
//! reference measured in the same run — encoding the same five `SET` commands with
//! [`resp::encode`] into fresh buffers, about the least a driver does per round (encoding into
//! one reused buffer is shown too).
//!
//! `cargo bench -p redlock-core --bench round` prints nanoseconds and heap allocations
//! (allocations plus reallocations) per round, and each round's time as a multiple of the
//! reference. Targets for the acquisition: under 1 µs and at most 8 allocations. Under
//! `cargo test` (no `--bench` argument) it runs a few rounds only, to check that it works.
//!
//! Allocations are counted by `stats_alloc`'s instrumented system allocator: a `GlobalAlloc`
//! implementation needs `unsafe`, which the workspace forbids in its own code.
// A driver of the engine, not the engine: it reads the clock. The bans in clippy.toml are for
// the engine's code.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use chacha20::ChaCha8Rng;
use rand_core::SeedableRng;
use redlock_core::{
    Acquire, AcquireOutcome, Command, Config, Lease, Lifecycle, LockEvent, LockOutput, LockRequest,
    Output, Release, Reply, RequestId, resp,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NODES: usize = 5;

struct Fixture {
    config: Config,
    request: LockRequest,
    now: Instant,
    rng: ChaCha8Rng,
    lease: Lease,
    /// The five `SET` commands of one acquisition round, for the reference.
    sets: Vec<Command>,
    /// A buffer kept across rounds.
    buf: Vec<u8>,
}

impl Fixture {
    fn new() -> Self {
        let config = Config::new(NODES).expect("5 nodes are valid");
        let request = LockRequest::new("invoices:2024-06", Duration::from_secs(10));
        let now = Instant::now();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut machine = Acquire::new(now, &config, &request, &mut rng).expect("a valid request");
        let mut sets = Vec::new();
        let mut ids = Vec::new();
        while let Output::Send(transmit) = machine.poll_output(now) {
            ids.push(transmit.id);
            sets.push(transmit.command);
        }
        let mut lease = None;
        for id in ids {
            machine.handle_reply(now, id, Reply::Ok);
            if let Output::Done(AcquireOutcome::Acquired(won)) = machine.poll_output(now) {
                lease = Some(won);
            }
        }
        let lease = lease.expect("five OKs win the lock");
        Self {
            config,
            request,
            now,
            rng,
            lease,
            sets,
            buf: Vec::with_capacity(256),
        }
    }
}

/// Hands `reply` to every request, draining outputs after each as a driver does; returns how
/// many times `Done` came out.
fn answer_all<M: redlock_core::Machine>(
    machine: &mut M,
    now: Instant,
    ids: &[RequestId],
    reply: Reply,
) -> usize {
    let mut done = 0;
    for id in ids {
        machine.handle_reply(now, *id, reply);
        loop {
            match machine.poll_output(now) {
                Output::Done(outcome) => {
                    black_box(outcome);
                    done += 1;
                }
                Output::Send(transmit) => {
                    black_box(transmit);
                }
                _ => break,
            }
        }
    }
    done
}

/// Polls the first round's requests out (up to the first `Wait`).
fn sends<M: redlock_core::Machine>(machine: &mut M, now: Instant) -> [RequestId; NODES] {
    let mut ids = [None; NODES];
    let mut sent = 0;
    while let Output::Send(transmit) = machine.poll_output(now) {
        ids[sent % NODES] = Some(transmit.id);
        sent += 1;
        black_box(transmit.command);
    }
    assert_eq!(sent, NODES, "one request per node");
    ids.map(|id| id.expect("sent"))
}

fn acquire_round(f: &mut Fixture) -> usize {
    let mut machine = Acquire::new(f.now, &f.config, &f.request, &mut f.rng).expect("valid");
    let ids = sends(&mut machine, f.now);
    answer_all(&mut machine, f.now, &ids, Reply::Ok)
}

fn release_round(f: &mut Fixture) -> usize {
    let mut machine = Release::new(f.now, &f.config, &f.lease);
    let ids = sends(&mut machine, f.now);
    answer_all(&mut machine, f.now, &ids, Reply::Int(1))
}

/// Drains `lock` until it waits, counting the sends and passing the event on, if any.
fn drain_lock(lock: &mut Lifecycle, now: Instant, ids: &mut Vec<RequestId>) -> Option<LockEvent> {
    loop {
        match lock.poll_output(now) {
            LockOutput::Send(transmit) => {
                ids.push(transmit.id);
                black_box(transmit.command);
            }
            LockOutput::Event(event) => return Some(event),
            LockOutput::Wait { .. } | LockOutput::Idle => return None,
        }
    }
}

/// What an adapter drives: a lock's whole life in its `Lifecycle` — acquire (5 SETs, 5 OKs),
/// the `Acquired` event, release (5 DELs, 5 replies), the `Released` event.
fn lifecycle_round(f: &mut Fixture) -> usize {
    let mut lock = Lifecycle::acquire(f.now, &f.config, &f.request, &mut f.rng).expect("valid");
    let mut ids = Vec::with_capacity(NODES);
    let mut events = 0;
    for reply in [Reply::Ok, Reply::Int(1)] {
        ids.clear();
        if let Some(event) = drain_lock(&mut lock, f.now, &mut ids) {
            black_box(event);
        }
        for id in &ids {
            lock.handle_reply(f.now, *id, reply);
            if let Some(event) = drain_lock(&mut lock, f.now, &mut Vec::new()) {
                events += 1;
                black_box(event);
            }
        }
        if events == 1 {
            lock.release(f.now);
        }
    }
    usize::from(events == 2)
}

fn reference_round(f: &mut Fixture) -> usize {
    for command in &f.sets {
        let mut buf = Vec::new();
        resp::encode(black_box(command), &mut buf);
        black_box(buf);
    }
    1
}

/// The floor of the floor: the same five encodings into one buffer that is reused.
fn reused_buffer_round(f: &mut Fixture) -> usize {
    let mut buf = std::mem::take(&mut f.buf);
    for command in &f.sets {
        buf.clear();
        resp::encode(black_box(command), &mut buf);
        black_box(&buf);
    }
    f.buf = buf;
    1
}

struct Measured {
    ns: f64,
    allocs: f64,
}

/// Runs `round` in `batches` batches of `iters`, after a warm-up: the median time per round and
/// the allocations per round (the same in every batch; the last is reported).
fn measure(
    fixture: &mut Fixture,
    round: fn(&mut Fixture) -> usize,
    iters: u32,
    batches: usize,
) -> Measured {
    let mut done = 0;
    for _ in 0..iters / 10 {
        done += round(fixture);
    }
    let mut times = Vec::with_capacity(batches);
    let mut allocs = 0;
    for _ in 0..batches {
        let region = Region::new(GLOBAL);
        let start = Instant::now();
        for _ in 0..iters {
            done += round(black_box(&mut *fixture));
        }
        let took = start.elapsed();
        let change = region.change();
        times.push(took.as_nanos() as f64 / f64::from(iters));
        allocs = change.allocations + change.reallocations;
    }
    let expected =
        usize::try_from(iters / 10 + iters * u32::try_from(batches).expect("few")).expect("fits");
    assert_eq!(done, expected, "every round ends with one Done");
    times.sort_by(f64::total_cmp);
    Measured {
        ns: times[times.len() / 2],
        allocs: allocs as f64 / f64::from(iters),
    }
}

fn main() {
    let benching = std::env::args().any(|arg| arg == "--bench");
    let (iters, batches) = if benching { (200_000, 5) } else { (10, 1) };
    let mut fixture = Fixture::new();

    let acquire = measure(&mut fixture, acquire_round, iters, batches);
    let release = measure(&mut fixture, release_round, iters, batches);
    let lifecycle = measure(&mut fixture, lifecycle_round, iters, batches);
    let reference = measure(&mut fixture, reference_round, iters, batches);
    let reused = measure(&mut fixture, reused_buffer_round, iters, batches);

    let line = |name: &str, m: &Measured| {
        println!(
            "{name:<58} {:>8.0} ns/round {:>6.2} allocs/round {:>6.2}× reference",
            m.ns,
            m.allocs,
            m.ns / reference.ns
        );
    };
    println!("redlock-core, N = {NODES}, {batches} batches of {iters} rounds (median)");
    line("acquire: new + 5 SET sends + 5 OK replies + Done", &acquire);
    line("release: new + 5 DEL sends + 5 replies + Done", &release);
    line(
        "lifecycle: acquire + Acquired + release + Released",
        &lifecycle,
    );
    line(
        "reference: resp::encode of the 5 SETs into fresh Vecs",
        &reference,
    );
    line("(encoding the 5 SETs into one reused buffer)", &reused);
    if !benching {
        println!("(a smoke run under `cargo test`, unoptimised: the times are not measurements)");
        return;
    }
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "target for acquire: < 1000 ns/round ({}), <= 8 allocs/round ({})",
        verdict(acquire.ns < 1000.0),
        verdict(acquire.allocs <= 8.0)
    );
}
