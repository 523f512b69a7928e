//! The set-ups the properties start from: strategies for configurations, requests and
//! contention, another holder's keys on a node, a lock acquired on a perfect network, one checked
//! acquisition, and the proptest configuration.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};
use rand_core::SeedableRng;
use redlock_core::strategies::{self, Schedule};
use redlock_core::{AcquireOutcome, Config, Lease, LockRequest, LockSpec};

use crate::engine;

use crate::acquire::{AcquireSpec, Acquired, check_acquire};
use crate::world::{Client, Rec, World};
use crate::{At, MAX_TIME, Outcome};
use redlock_core::fake::FakeNode as Node;

/// The token another holder's keys carry.
pub(crate) const FOREIGN_TOKEN: &[u8] = b"someone-else";

/// The RNG a machine draws its tokens and jitter from, seeded by the case.
pub(crate) fn rng(seed: u64) -> chacha20::ChaCha8Rng {
    chacha20::ChaCha8Rng::seed_from_u64(seed)
}

/// A configuration and a lock request valid under it.
pub(crate) fn config_and_request() -> impl Strategy<Value = (Config, LockRequest)> {
    strategies::configs()
        .prop_flat_map(|config| (Just(config.clone()), strategies::lock_requests(&config)))
}

/// Another holder on some nodes: which of the lock's keys it holds, and until when.
pub(crate) fn contention() -> impl Strategy<Value = Vec<Option<(usize, Duration)>>> {
    let until = prop_oneof![
        (0u64..=2_000_000).prop_map(Duration::from_micros),
        Just(MAX_TIME),
    ];
    proptest::collection::vec(
        proptest::option::weighted(0.25, (0usize..3, until)),
        strategies::MAX_GENERATED_NODES,
    )
}

/// Has another holder (`FOREIGN_TOKEN`) hold key `key` of `spec` on `node` until `until`.
pub(crate) fn hold(node: &mut Node, spec: &LockSpec, key: usize, until: At) {
    let keys: Vec<&[u8]> = spec.keys().collect();
    let key = keys[key % keys.len()];
    node.keys
        .insert(key.to_vec(), (FOREIGN_TOKEN.to_vec(), until));
}

/// Acquires `request` at the base instant over a network that delivers everything at once.
pub(crate) fn acquire_at_once(
    world: &mut World,
    config: &Config,
    request: &LockRequest,
    seed: u64,
) -> Outcome<Lease> {
    let machine =
        engine::acquire(world.base, config, request, &mut rng(seed)).expect("a valid request");
    let mut clients = [Client::new(machine)];
    world.run(&mut clients, &[Duration::ZERO])?;
    match clients[0].outcome() {
        Some((_, AcquireOutcome::Acquired(lease))) => Ok(lease.clone()),
        other => Err(TestCaseError::fail(format!(
            "no lease on a perfect network: {other:?}"
        ))),
    }
}

/// One acquisition under `schedule`, checked; returns the checked result and the trace.
pub(crate) fn acquire_once(
    base: Instant,
    config: &Config,
    request: &LockRequest,
    schedule: &Schedule,
    contention: &[Option<(usize, Duration)>],
    seed: u64,
) -> Outcome<(Acquired, Vec<Rec<AcquireOutcome>>)> {
    let mut world = World::new(base, config.nodes());
    world.schedule = schedule.clone();
    let machine = engine::acquire(base, config, request, &mut rng(seed)).expect("a valid request");
    for (node, holder) in world.nodes.iter_mut().zip(contention) {
        if let Some((key, until)) = holder {
            hold(node, machine.spec(), *key, *until);
        }
    }
    let mut clients = [Client::new(machine)];
    world.run(&mut clients, &[Duration::ZERO])?;
    let x = AcquireSpec::new(
        config,
        request.ttl(),
        *config.retry(),
        Duration::ZERO,
        schedule.timer_lag,
    );
    let [client] = clients;
    let acquired = check_acquire(&client.trace, &x, base)?;
    Ok((acquired, client.trace))
}

/// `n` cases per property (`PROPTEST_CASES` overrides it, for a longer soak). Failures are saved
/// in `proptest-regressions/properties.txt` (relative to the package, where `cargo test` runs)
/// and replayed first on every later run: commit that file.
pub(crate) fn cases(n: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n);
    ProptestConfig {
        cases: n,
        max_shrink_iters: 10_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/properties.txt",
        ))),
        ..ProptestConfig::default()
    }
}
