//! Properties of the engine, checked by driving its one API, [`Lifecycle`](redlock_core::Lifecycle)
//! (through the views in `engine`), against in-memory nodes over a
//! simulated network whose faults come from `redlock_core::strategies`.
//!
//! Time is virtual: each case reads `Instant::now()` once as its base, and every instant after
//! that is the base plus an offset. The simulator always jumps to the earliest thing due (a
//! network event or the instant a machine waits for), so a case replays exactly.
//!
//! Each run is checked after the fact against a reference reading of its trace: which replies
//! the engine was entitled to count (first answer per node, from the current batch, before the
//! deadline computed here from the configuration), what the quorum decision had to be at every
//! output, and what the outcome must say.
//!
//! The nodes are the project's one fake Redis node (`redlock_core::fake`). The crate is split
//! by concept: `world` is the simulated network and the driver that runs machines over it, `reference` the reading shared by every
//! check, `acquire`, `extend` and `release` the checks of each machine's trace, and
//! `setup` the strategies and set-ups the properties below start from.
// `Instant::now()` is read once per case, as the base of virtual time. The clock ban in
// clippy.toml is for the engine, not for the code that drives it.
#![allow(clippy::disallowed_methods)]

mod acquire;
mod engine;
mod extend;
mod reference;
mod release;
mod setup;
mod world;

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redlock_core::strategies::{self, Schedule};
use redlock_core::{AcquireOutcome, Config, ExtendOutcome, RetryPolicy};

use acquire::{AcquireSpec, Acquired, check_acquire};
use extend::{ExtendSpec, check_extend};
use redlock_core::fake::Keys;
use reference::span;
use release::check_release;
use setup::{
    FOREIGN_TOKEN, acquire_at_once, acquire_once, cases, config_and_request, contention, hold, rng,
};
use world::{Client, Rec, World};

/// An offset from the base instant of a case.
type At = Duration;

/// What a check or a run returns: a failure ends the case.
type Outcome<T> = Result<T, TestCaseError>;

/// Further than any run goes in virtual time.
const MAX_TIME: Duration = Duration::from_secs(3600);

// ---------------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(cases(256))]

    /// Any two quorums share a node: the builder accepts exactly the quorums with 2q > N and
    /// q ≤ N, and for every generated configuration two arbitrary quorums intersect.
    #[test]
    fn two_quorums_always_intersect(
        nodes in 0usize..=70,
        quorum in 0usize..=70,
        (config, a, b) in strategies::configs().prop_flat_map(|config| {
            let all: Vec<usize> = (0..config.nodes()).collect();
            (Just(config), Just(all.clone()).prop_shuffle(), Just(all).prop_shuffle())
        }),
    ) {
        let built = Config::builder(nodes).quorum(quorum).build();
        let allowed = (1..=redlock_core::MAX_NODES).contains(&nodes)
            && 2 * quorum > nodes
            && quorum <= nodes;
        prop_assert_eq!(built.is_ok(), allowed, "nodes {} quorum {}: {:?}", nodes, quorum, built);

        let q = config.quorum();
        prop_assert!(q <= config.nodes() && 2 * q > config.nodes());
        let first = &a[..q];
        let second = &b[..q];
        prop_assert!(second.iter().any(|node| first.contains(node)),
            "{:?} and {:?} share no node", first, second);
    }
}

proptest! {
    #![proptest_config(cases(512))]

    /// An acquisition under any schedule (delays, drops, duplicates, wrong replies, stray ids,
    /// unasked timeouts) and any contention never panics, ends within its time bound, and every
    /// output agrees with the reference reading: a quorum of in-time grants from the current
    /// round behind every lease, validity from the winning round's start, a release on every
    /// node after every lost round, pauses within the jitter, no pause after the last round.
    #[test]
    fn acquire_follows_the_algorithm_under_any_schedule(
        (config, request) in config_and_request(),
        schedule in strategies::schedules(),
        contention in contention(),
        seed in any::<u64>(),
    ) {
        acquire_once(Instant::now(), &config, &request, &schedule, &contention, seed)?;
    }

    /// Two clients racing for the same lock over an honest network (per-connection order kept,
    /// no made-up replies) never hold it at the same time.
    #[test]
    fn two_clients_never_hold_the_lock_at_once(
        (config, request) in config_and_request(),
        schedule in strategies::honest_schedules(),
        second_start in (0u64..=50_000).prop_map(Duration::from_micros),
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        world.schedule = schedule.clone();
        let a = engine::acquire(base, &config, &request, &mut rng(seed)).expect("valid");
        let b = engine::acquire(base, &config, &request, &mut rng(seed ^ 1)).expect("valid");
        prop_assert_ne!(a.spec().token(), b.spec().token());
        let mut clients = [Client::new(a), Client::new(b)];
        let starts = [Duration::ZERO, second_start];
        world.run(&mut clients, &starts)?;
        let mut held = Vec::new();
        for (client, start) in clients.iter().zip(starts) {
            let lag = schedule.timer_lag;
            let x = AcquireSpec::new(&config, request.ttl(), *config.retry(), start, lag);
            let checked = check_acquire(&client.trace, &x, base)?;
            if let AcquireOutcome::Acquired(lease) = checked.outcome {
                held.push((checked.done, lease.valid_until().saturating_duration_since(base)));
            }
        }
        if let [(a_from, a_until), (b_from, b_until)] = held[..] {
            prop_assert!(a_until <= b_from || b_until <= a_from,
                "both hold the lock: [{:?}, {:?}) and [{:?}, {:?})",
                a_from, a_until, b_from, b_until);
        }
    }

}

proptest! {
    #![proptest_config(cases(256))]

    /// Against nodes that all hold the lock for someone else, every pause between a round's
    /// release and the next round lies in [delay, delay + jitter], there is none after the last
    /// round, and the same seed replays the whole run exactly (another seed does not).
    #[test]
    fn retry_pauses_stay_within_the_jitter_and_replay_from_the_seed(
        (config, request) in config_and_request(),
        attempts in 2u32..=6,
        delay in (0u64..=300_000).prop_map(Duration::from_micros),
        jitter in (1u64..=100_000).prop_map(Duration::from_micros),
        schedule in strategies::honest_schedules()
            .prop_map(|s| Schedule { timer_lag: Duration::ZERO, ..s }),
        seed in any::<u64>(),
    ) {
        // Attempts only (the default 5 s deadline would cut slow schedules short).
        let policy = RetryPolicy::default()
            .attempts(attempts)
            .no_deadline()
            .delay(delay)
            .jitter(jitter);
        // The request's policy overrides the configuration's.
        let request = request.retry(policy);
        let base = Instant::now();
        let run = |seed| -> Outcome<(Acquired, Vec<Rec<AcquireOutcome>>)> {
            let mut world = World::new(base, config.nodes());
            world.schedule = schedule.clone();
            let machine = engine::acquire(base, &config, &request, &mut rng(seed)).expect("valid");
            for node in &mut world.nodes {
                hold(node, machine.spec(), 0, MAX_TIME);
            }
            let mut clients = [Client::new(machine)];
            world.run(&mut clients, &[Duration::ZERO])?;
            let (start, lag) = (Duration::ZERO, Duration::ZERO);
            let x = AcquireSpec::new(&config, request.ttl(), policy, start, lag);
            let [client] = clients;
            Ok((check_acquire(&client.trace, &x, base)?, client.trace))
        };
        let (first, trace) = run(seed)?;
        let AcquireOutcome::Failed(failure) = &first.outcome else {
            return Err(TestCaseError::fail("acquired a lock held everywhere by someone else"));
        };
        prop_assert_eq!(failure.attempts, attempts);
        prop_assert_eq!(first.pauses.len(), usize::try_from(attempts - 1).expect("small"));
        prop_assert_eq!(&first.observed, &first.pauses,
            "with a punctual timer, rounds open when the pause ends");
        let (_, again) = run(seed)?;
        prop_assert!(trace == again, "the same seed gave another run");
        let (_, other) = run(seed.wrapping_add(1))?;
        prop_assert!(trace != other, "another seed gave the same run");
    }

    /// An extension under any schedule: a quorum of in-time grants behind every success, the
    /// new validity counted from the extension's own start, never a delete, and applying the
    /// outcome never lowers the lease's validity (a failure leaves the lease as it was).
    #[test]
    fn a_failed_extension_changes_nothing_and_never_releases(
        (config, request, ttl) in strategies::configs().prop_flat_map(|c| {
            (Just(c.clone()), strategies::lock_requests(&c), strategies::ttls(&c))
        }),
        schedule in strategies::schedules(),
        lost in proptest::collection::vec(0u8..4, strategies::MAX_GENERATED_NODES),
        later in 0u32..=1_200,
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        let lease = acquire_at_once(&mut world, &config, &request, seed)?;
        // Some nodes lose our key (expired early, or taken over) before the extension.
        for (node, lost) in world.nodes.iter_mut().zip(&lost) {
            match lost {
                0 => node.keys.clear(),
                1 => hold(node, lease.spec(), 0, MAX_TIME),
                _ => {}
            }
        }
        let start = (request.ttl() * later) / 1_000;
        world.now = start;
        world.schedule = schedule;
        world.sent = 0;
        world.fifo.clear();
        let machine = engine::extend(base + start, &config, &lease, ttl).expect("a valid ttl");
        let mut clients = [Client::new(machine)];
        world.run(&mut clients, &[start])?;
        let x = ExtendSpec {
            nodes: config.nodes(),
            quorum: config.quorum(),
            ttl,
            span: span(&config, ttl),
            node_timeout: config.node_timeout(ttl),
            min_validity: config.min_validity(),
            start,
            lease: lease.clone(),
            timer_lag: world.schedule.timer_lag,
        };
        let outcome = check_extend(&clients[0].trace, &x, base)?;
        let mut applied = lease.clone();
        applied.apply(&outcome);
        prop_assert!(applied.valid_until() >= lease.valid_until(), "apply lowered the validity");
        match &outcome {
            ExtendOutcome::Extended { valid_until, .. } => {
                prop_assert_eq!(applied.valid_until(), lease.valid_until().max(*valid_until));
            }
            _ => prop_assert_eq!(&applied, &lease, "a failed extension changed the lease"),
        }
    }

    /// A release asks every node once with the lease's keys and token, ends as soon as every
    /// node answered or at the deadline, reports exactly what each node's first in-time answer
    /// said, never reports `Released` for a node holding another token, and leaves that token's
    /// keys in place.
    #[test]
    fn release_reports_every_node_and_never_touches_another_holder(
        (config, request) in config_and_request(),
        schedule in strategies::schedules(),
        state in proptest::collection::vec(0u8..4, strategies::MAX_GENERATED_NODES),
        later in 0u32..=1_200,
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        let lease = acquire_at_once(&mut world, &config, &request, seed)?;
        let keys: Vec<Vec<u8>> = lease.spec().keys().map(<[u8]>::to_vec).collect();
        for (node, state) in world.nodes.iter_mut().zip(&state) {
            match state {
                0 => node.keys.clear(),
                1 => hold(node, lease.spec(), 0, MAX_TIME),
                2 => hold(node, lease.spec(), keys.len() - 1, MAX_TIME),
                _ => {}
            }
        }
        // Another holder's keys, node by node, to check they survive.
        let foreign: Vec<Keys> = world
            .nodes
            .iter()
            .map(|n| {
                let keys = n.keys.clone().into_iter();
                keys.filter(|(_, (token, _))| token == FOREIGN_TOKEN).collect()
            })
            .collect();
        let start = (request.ttl() * later) / 1_000;
        world.now = start;
        world.schedule = schedule;
        world.sent = 0;
        world.fifo.clear();
        let machine = engine::release(base + start, &config, &lease);
        let mut clients = [Client::new(machine)];
        world.run(&mut clients, &[start])?;
        let deadline = start + config.node_timeout(lease.ttl());
        let times = (start, deadline, world.schedule.timer_lag);
        check_release(&clients[0].trace, &lease, config.nodes(), times)?;
        for (node, held) in world.nodes.iter().zip(foreign) {
            for (key, value) in held {
                prop_assert_eq!(node.keys.get(&key), Some(&value),
                    "another holder's key was touched");
            }
        }
    }

    /// A lock extended (to any TTL, shorter than what is left included) over an honest network
    /// stays exclusive: another client racing for it afterwards gets it only once the holder's
    /// validity, as `Lease::apply` left it, is over.
    #[test]
    fn an_extended_lock_stays_exclusive(
        (config, request, ttl) in strategies::configs().prop_flat_map(|c| {
            (Just(c.clone()), strategies::lock_requests(&c), strategies::ttls(&c))
        }),
        schedule in strategies::honest_schedules(),
        later in 0u32..=1_000,
        wait in 0u32..=1_500,
        seed in any::<u64>(),
    ) {
        let base = Instant::now();
        let mut world = World::new(base, config.nodes());
        let mut lease = acquire_at_once(&mut world, &config, &request, seed)?;
        let start = (request.ttl() * later) / 1_000;
        world.now = start;
        world.schedule = schedule.clone();
        let machine = engine::extend(base + start, &config, &lease, ttl).expect("a valid ttl");
        let mut holder = [Client::new(machine)];
        world.run(&mut holder, &[start])?;
        let Some((_, outcome)) = holder[0].outcome() else {
            return Err(TestCaseError::fail("no outcome"));
        };
        lease.apply(outcome);
        let held_until = lease.valid_until().saturating_duration_since(base);

        let start = world.now + (request.ttl() * wait) / 1_000;
        world.now = start;
        let machine = engine::acquire(base + start, &config, &request, &mut rng(seed ^ 1))
            .expect("valid");
        let mut rival = [Client::new(machine)];
        world.run(&mut rival, &[start])?;
        let lag = schedule.timer_lag;
        let x = AcquireSpec::new(&config, request.ttl(), *config.retry(), start, lag);
        let checked = check_acquire(&rival[0].trace, &x, base)?;
        if let AcquireOutcome::Acquired(_) = checked.outcome {
            prop_assert!(checked.done >= held_until,
                "the rival holds at {:?}, the holder until {:?}", checked.done, held_until);
        }
    }
}
